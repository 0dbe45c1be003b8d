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


# Every field of a new Response, in its key order, with the value it has when the request sets
# nothing: copied whole into each new Response (one C-level copy of a dict already at its final
# size), then the few fields of this response and those the request sets are written over (a
# dict keeps a key's place when its value changes). Building it field by field, or updating a
# smaller dict with the echoed defaults, cost more than the rest of the machine's set-up
# (bench/account.py, "lifecycle events"). Values of the skeleton are never mutated in place:
# ``tools`` is replaced when the request has tools, ``output``, ``metadata``, ``reasoning`` and
# ``text`` are made anew for each Response.
_SKELETON: dict[str, Any] = {
    "id": "",
    "object": "response",
    "created_at": 0,
    "completed_at": None,  # set when the Response completes
    "status": "in_progress",
    "error": None,
    "incomplete_details": None,
    "model": "",
    "output": None,
    "usage": None,
    "metadata": None,
    **dict(_ECHO_DEFAULTS),
    "reasoning": None,
    "text": None,
}
_ECHO_KEYS = frozenset(k for k, _ in _ECHO_DEFAULTS)


def new_response(request: dict[str, Any], *, response_id: str, created_at: int, model: str) -> dict[str, Any]:
    """An ``in_progress`` Response with empty output that echoes the client's request."""
    resp = _SKELETON.copy()
    resp["id"] = response_id
    resp["created_at"] = created_at
    resp["model"] = model
    resp["output"] = []
    resp["metadata"] = request.get("metadata") or {}
    for key in _ECHO_KEYS.intersection(request):
        value = request[key]
        if value is not None:
            resp[key] = value
    if resp["tools"]:
        resp["tools"] = [echoed_tool(t) for t in resp["tools"]]
    reasoning = request.get("reasoning")
    if reasoning:
        resp["reasoning"] = {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
    else:
        resp["reasoning"] = {"effort": None, "summary": None}
    text = request.get("text")
    if not text:
        resp["text"] = {"format": {"type": "text"}, "verbosity": "medium"}
        return resp
    text = dict(text)
    text.setdefault("format", {"type": "text"})
    fmt = text["format"]
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # echoed whole, as the API does
        text["format"] = {"description": None, "strict": False, **fmt}
    text.setdefault("verbosity", "medium")
    resp["text"] = text
    return resp


def map_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Chat ``usage`` -> Responses ``usage``; every required field present, 0 when unknown.

    Each count is checked inline (``_count``'s test): this runs at the end of every turn."""
    u = usage if isinstance(usage, dict) else {}
    get = u.get
    prompt = get("prompt_tokens")
    prompt = prompt if prompt.__class__ is int and prompt >= 0 else 0
    completion = get("completion_tokens")
    completion = completion if completion.__class__ is int and completion >= 0 else 0
    pd = get("prompt_tokens_details")
    if not isinstance(pd, dict):
        pd = {}
    cd = get("completion_tokens_details")
    if not isinstance(cd, dict):
        cd = {}
    cached = pd.get("cached_tokens")
    if not (cached.__class__ is int and cached > 0):
        cached = _count(get("prompt_cache_hit_tokens"))
    written = pd.get("cache_write_tokens")
    reasoning = cd.get("reasoning_tokens")
    total = get("total_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": written if written.__class__ is int and written >= 0 else 0,
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": reasoning if reasoning.__class__ is int and reasoning >= 0 else 0
        },
        "total_tokens": total if total.__class__ is int and total > 0 else prompt + completion,
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
