"""The Responses API ``Response`` object: a skeleton echoing the request, and usage mapping.

Used by the forward stream machine (lifecycle and terminal events) and by the non-streaming
path, so both produce the same object (wire-spec 1.8).
"""

from __future__ import annotations

from typing import Any

# Request fields echoed on the Response, with the value the OpenAI API reports when unset.
_ECHO_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("instructions", None),
    ("max_output_tokens", None),
    ("max_tool_calls", None),
    ("parallel_tool_calls", True),
    ("previous_response_id", None),
    ("temperature", 1.0),
    ("tool_choice", "auto"),
    ("tools", []),
    ("top_logprobs", 0),
    ("top_p", 1.0),
    ("truncation", "disabled"),
    ("user", None),
    ("prompt_cache_key", None),
    ("safety_identifier", None),
    ("service_tier", "default"),
    ("store", True),
    ("background", False),
)


def new_response(request: dict[str, Any], *, response_id: str, created_at: int, model: str) -> dict[str, Any]:
    """An ``in_progress`` Response with empty output that echoes the client's request."""
    resp: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
        "usage": None,
        "metadata": request.get("metadata") or {},
    }
    for key, default in _ECHO_DEFAULTS:
        value = request.get(key)
        resp[key] = default if value is None else value
    reasoning = request.get("reasoning") or {}
    resp["reasoning"] = {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
    text = dict(request.get("text") or {})
    text.setdefault("format", {"type": "text"})
    text.setdefault("verbosity", "medium")
    resp["text"] = text
    return resp


def map_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Chat ``usage`` -> Responses ``usage``; every required field present, 0 when unknown."""
    u = usage if isinstance(usage, dict) else {}
    prompt = _count(u.get("prompt_tokens"))
    completion = _count(u.get("completion_tokens"))
    pd = u.get("prompt_tokens_details") if isinstance(u.get("prompt_tokens_details"), dict) else {}
    cd = u.get("completion_tokens_details") if isinstance(u.get("completion_tokens_details"), dict) else {}
    cached = _count(pd.get("cached_tokens")) or _count(u.get("prompt_cache_hit_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": _count(pd.get("cache_write_tokens"))},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(cd.get("reasoning_tokens"))},
        "total_tokens": _count(u.get("total_tokens")) or (prompt + completion),
    }


def _count(value: Any) -> int:
    """A token count; anything that is not a non-negative integer counts as unknown (0)."""
    return value if value.__class__ is int and value >= 0 else 0
