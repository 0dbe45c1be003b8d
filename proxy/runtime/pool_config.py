"""The pool keys of an ``[[upstreams]]`` entry (README "Pools"; proxy/runtime/pool.py): the
replicas, how calls fail over among them before the first byte, and whether a replica that dies
in the middle of an answer is continued on another one (README "Continuation"). ``Upstream``
(config.py) extends ``PoolKeys``; these apply only to a pool. Beside them, the affinity hints an
upstream (pooled or not) forwards to a backend that routes by them (README "Affinity hints";
proxy/state/affinity_hints.py).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# How a backend takes the partial answer to continue (translators/forward/prefill.py).
Prefill = Literal["trailing_assistant", "continue_final_message"]
# How a prefill of reasoning is sent: "<think>\n" + it as content, or in the reasoning field.
ReasoningPrefill = Literal["think_tag", "reasoning_field"]
# The pool keys that need a pool (base_urls or a fallback); the continuation ones need base_urls.
POOL_KEYS = ("retries", "retry_deadline_seconds", "failures_before_cooldown", "cooldown_seconds")
CONTINUATION_KEYS = ("continue_on_failure", "prefill", "reasoning_prefill", "max_continuations")

# Headers crossfeed itself sets on an upstream call, or that name the connection: never a hint's.
_RESERVED_HEADERS = frozenset(
    {
        "authorization",
        "content-type",
        "content-length",
        "content-encoding",
        "accept",
        "accept-encoding",
        "host",
        "connection",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-authorization",
        "cookie",
    }
)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Body fields a call is made of: a hint never replaces one.
_RESERVED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "input",
        "instructions",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "previous_response_id",
        "conversation",
        "store",
        "response_format",
        "text",
        "reasoning",
        "include",
    }
)


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
        description="pool: a replica that dies in the middle of an answer's text or reasoning has it continued by another "
        "replica, the partial answer sent as a prefill (the client sees one Response)",
    )
    prefill: Prefill = Field(
        "trailing_assistant",
        description="pool: how the backend takes that prefill: a trailing assistant message it continues "
        '(llama.cpp), or with continue_final_message (vLLM: "continue_final_message")',
    )
    reasoning_prefill: ReasoningPrefill = Field(
        "think_tag",
        description='pool: how a prefill of reasoning is sent: "<think>\\n" + it as the content ("think_tag", '
        "the default; older llama.cpp builds), or in the message's reasoning field with empty content "
        '("reasoning_field": current llama.cpp builds continue the thought from it)',
    )
    max_continuations: int = Field(1, ge=1, le=2, description="pool: continuations of one turn at most")

    # Any upstream (README "Affinity hints"; proxy/state/affinity_hints.py).
    affinity_header: str | None = Field(
        None,
        description="a header each call carries the turn's affinity key in (hashed), for a router that routes by it",
    )
    affinity_field: str | None = Field(
        None, description="a top-level body field each call carries the turn's affinity key in (hashed)"
    )

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

    @field_validator("affinity_header")
    @classmethod
    def _hint_header(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not _TOKEN.fullmatch(v):
            raise ValueError(f"{v!r} is not a header name (letters, digits and -, at most 100)")
        if v.lower() in _RESERVED_HEADERS:
            raise ValueError(f"{v} is a header crossfeed or HTTP sets itself: name another (e.g. x-session-id)")
        return v

    @field_validator("affinity_field")
    @classmethod
    def _hint_field(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not _FIELD.fullmatch(v):
            raise ValueError(f"{v!r} is not a body field name (a letter or _, then letters, digits or _)")
        if v in _RESERVED_FIELDS:
            raise ValueError(f"{v} is part of every call: name another field (e.g. user, prompt_cache_key)")
        return v

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

    @property
    def forwards_affinity(self) -> bool:
        """Its calls carry the turn's affinity key (``affinity_header``/``affinity_field``)."""
        return self.affinity_header is not None or self.affinity_field is not None
