"""The pool keys of an ``[[upstreams]]`` entry (README "Pools"; proxy/runtime/pool.py): the
replicas, how calls fail over among them before the first byte, and whether a replica that dies
in the middle of an answer is continued on another one (README "Continuation"). ``Upstream``
(config.py) extends ``PoolKeys``; these apply only to a pool.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# How a backend takes the partial answer to continue (translators/forward/prefill.py).
Prefill = Literal["trailing_assistant", "continue_final_message"]
# The pool keys that need a pool (base_urls or a fallback); the continuation ones need base_urls.
POOL_KEYS = ("retries", "retry_deadline_seconds", "failures_before_cooldown", "cooldown_seconds")
CONTINUATION_KEYS = ("continue_on_failure", "prefill", "max_continuations")


class PoolKeys(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_urls: tuple[str, ...] = Field(
        (), description="replicas of the same backend (instead of base_url): each call goes to one of them"
    )
    retries: int | None = Field(
        None, ge=0, le=16, description="pool: other replicas tried before the first byte (default: replicas - 1)"
    )
    retry_deadline_seconds: float = Field(
        30.0, gt=0, description="pool: the most time spent trying replicas before a call's first byte"
    )
    failures_before_cooldown: int = Field(
        3, ge=1, description="pool: consecutive failures that put a replica in cooldown"
    )
    cooldown_seconds: float = Field(
        10.0, gt=0, description="pool: how long a failing replica is left alone (a Retry-After, when sent, instead)"
    )
    affinity_ttl_seconds: int = Field(
        3600, ge=1, description="pool: how long a conversation, chain or session keeps its replica"
    )
    fallback: str | None = Field(
        None, min_length=1, description="pool: the upstream asked when no replica of this one answers"
    )
    continue_on_failure: bool = Field(
        False,
        description="pool: a replica that dies in the middle of an answer's text has it continued by another "
        "replica, the partial answer sent as a prefill (the client sees one Response)",
    )
    prefill: Prefill = Field(
        "trailing_assistant",
        description="pool: how the backend takes that prefill: a trailing assistant message it continues "
        '(llama.cpp), or with continue_final_message (vLLM: "continue_final_message")',
    )
    max_continuations: int = Field(1, ge=1, le=2, description="pool: continuations of one turn at most")

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [u for u in v if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"every URL must start with http:// or https:// (not {bad[0]!r})")
        urls = tuple(u.rstrip("/") for u in v)
        if len(set(urls)) != len(urls):
            raise ValueError("a URL is listed twice")
        return urls

    @model_validator(mode="before")
    @classmethod
    def _pool_base_url(cls, data: Any) -> Any:
        """With ``base_urls``, ``base_url`` is the first replica's (what code outside the pool reads)."""
        if isinstance(data, dict) and data.get("base_urls"):
            if "base_url" in data:
                raise ValueError("base_url and base_urls are exclusive: list every replica in base_urls")
            urls = data["base_urls"]
            if isinstance(urls, (list, tuple)) and urls and isinstance(urls[0], str):
                data = {**data, "base_url": urls[0]}
        return data

    def pool_keys_misplaced(self, api: str) -> str | None:
        """The error of pool keys given where they do not apply, or None."""
        if not self.base_urls and self.fallback is None:
            given = [k for k in POOL_KEYS + CONTINUATION_KEYS if k in self.model_fields_set]
            if given:
                return f"{', '.join(given)} only applies to a pool (an upstream with base_urls or fallback)"
        if self.continue_on_failure and (len(self.base_urls) < 2 or api != "chat"):
            return 'continue_on_failure needs a pool of chat replicas (api = "chat", two base_urls or more)'
        return None
