"""The Responses API ``Response`` object: a skeleton echoing the request, and usage mapping.

Used by the forward stream machine (lifecycle and terminal events) and by the non-streaming
path, so both produce the same object (docs/wire-facts.md, The Response object).
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
    ("presence_penalty", 0.0),
    ("frequency_penalty", 0.0),
    ("truncation", "disabled"),
    ("user", None),
    ("prompt_cache_key", None),
    ("safety_identifier", None),
    ("service_tier", "default"),
    ("store", True),
    ("background", False),
)


def echoed_tool(tool: Any) -> Any:
    """A function tool as the Response echoes it: every field present, as sent or defaulted
    (``strict`` defaults to true in the Responses API). Other tools are echoed as sent."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": True if tool.get("strict") is None else tool["strict"],
        **{k: v for k, v in tool.items() if k not in _FUNCTION_TOOL_FIELDS},
    }


_FUNCTION_TOOL_FIELDS = frozenset({"type", "name", "description", "parameters", "strict"})


# The echoed fields with their defaults, in the Response's key order: copied whole into each new
# Response (one C-level update), then the few the request sets are written over (a dict keeps a
# key's place when its value changes). A loop of get-and-set over every field cost more than the
# rest of the skeleton (bench/account.py, "lifecycle events").
_ECHO_TEMPLATE: dict[str, Any] = dict(_ECHO_DEFAULTS)
_ECHO_KEYS = frozenset(_ECHO_TEMPLATE)


def new_response(request: dict[str, Any], *, response_id: str, created_at: int, model: str) -> dict[str, Any]:
    """An ``in_progress`` Response with empty output that echoes the client's request."""
    resp: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": None,  # set when the Response completes
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": [],
        "usage": None,
        "metadata": request.get("metadata") or {},
    }
    resp.update(_ECHO_TEMPLATE)
    for key in _ECHO_KEYS.intersection(request):
        value = request[key]
        if value is not None:
            resp[key] = value
    if resp["tools"]:
        resp["tools"] = [echoed_tool(t) for t in resp["tools"]]
    reasoning = request.get("reasoning") or {}
    resp["reasoning"] = {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
    text = dict(request.get("text") or {})
    text.setdefault("format", {"type": "text"})
    fmt = text["format"]
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # echoed whole, as the API does
        text["format"] = {"description": None, "strict": False, **fmt}
    text.setdefault("verbosity", "medium")
    resp["text"] = text
    return resp


def map_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Chat ``usage`` -> Responses ``usage``; every required field present, 0 when unknown."""
    u = usage if isinstance(usage, dict) else {}
    prompt = _count(u.get("prompt_tokens"))
    completion = _count(u.get("completion_tokens"))
    pd = u.get("prompt_tokens_details")
    if not isinstance(pd, dict):
        pd = {}
    cd = u.get("completion_tokens_details")
    if not isinstance(cd, dict):
        cd = {}
    cached = _count(pd.get("cached_tokens")) or _count(u.get("prompt_cache_hit_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": _count(pd.get("cache_write_tokens"))},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(cd.get("reasoning_tokens"))},
        "total_tokens": _count(u.get("total_tokens")) or (prompt + completion),
    }


def fill_usage(usage: Any) -> dict[str, Any]:
    """A Responses usage from a Responses backend with every field a strict client reads (0 when
    unknown); what else it sent is kept."""
    u: dict[str, Any] = usage if isinstance(usage, dict) else {}
    ind, outd = (u[k] if isinstance(u.get(k), dict) else {} for k in ("input_tokens_details", "output_tokens_details"))
    inp, out = _count(u.get("input_tokens")), _count(u.get("output_tokens"))
    return {
        **u,
        "input_tokens": inp,
        "output_tokens": out,
        "total_tokens": _count(u.get("total_tokens")) or inp + out,
        "input_tokens_details": {**ind, "cached_tokens": _count(ind.get("cached_tokens"))},
        "output_tokens_details": {**outd, "reasoning_tokens": _count(outd.get("reasoning_tokens"))},
    }


def _count(value: Any) -> int:
    """A token count; anything that is not a non-negative integer counts as unknown (0)."""
    return value if value.__class__ is int and value >= 0 else 0


def fill_response(resp: dict[str, Any]) -> dict[str, Any]:
    """A Response from a Responses backend, with every field the Open Responses schema requires
    present: what it sent is kept, what it left out gets the value the API reports when unset
    (``completed_at``: null, unknown). Returns the same dict."""
    for key, default in _ECHO_DEFAULTS:
        if key not in resp:
            resp[key] = default
    resp.setdefault("completed_at", None)
    resp.setdefault("metadata", {})
    resp.setdefault("text", {"format": {"type": "text"}, "verbosity": "medium"})
    reasoning = resp.get("reasoning")
    if isinstance(reasoning, dict) and ("effort" not in reasoning or "summary" not in reasoning):
        resp["reasoning"] = {"effort": reasoning.get("effort"), "summary": reasoning.get("summary"), **reasoning}
    return resp
