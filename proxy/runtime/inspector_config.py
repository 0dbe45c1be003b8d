"""The ``[inspector]`` section: the live translation inspector (proxy/http/inspector.py), off by
default. It lives on the floor beside the rest of the configuration; the ring it sizes is
proxy/runtime/inspector.py."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class InspectorConfig(BaseModel):
    """``[inspector]``: a page at ``/inspector`` showing recent turns as they happen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(False, description="serve /inspector and keep recent turns in memory")
    admin_key_env: str | None = Field(
        None,
        min_length=1,
        description="variable holding the inspector's own key (Bearer); required when enabled, and no inbound key",
    )
    turns: int = Field(50, ge=1, le=2000, description="recent turns kept (the oldest is forgotten first)")
    max_turn_bytes: int = Field(
        256 * 1024,
        ge=4096,
        le=64 * 1024 * 1024,
        description="per turn, most bytes of backend chunks and client events kept (later ones are counted, not kept)",
    )
    max_body_chars: int = Field(
        4000, ge=100, description="a string in a kept request body longer than this is cut (saying how much)"
    )

    @model_validator(mode="after")
    def _needs_key(self) -> InspectorConfig:
        if self.enabled and not self.admin_key_env:
            raise ValueError(
                "enabled needs admin_key_env: the variable holding the inspector's own key "
                "(the page is never open without one, and no client key opens it)"
            )
        return self

    @property
    def memory_bound(self) -> int:
        """Bytes the ring may hold at most: every turn's chunks and events, and its two request
        bodies (each counted by its encoded size, cut at ``max_turn_bytes`` too)."""
        return self.turns * 3 * self.max_turn_bytes
