"""What the inspector says of a turn's two requests: what changed between the client's body and the
body crossfeed sent the backend, and which session the turn belongs to. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.proxy.runtime import sessions
from crossfeed.proxy.runtime.sessions import Session

# A client field -> the backend field(s) it becomes (Responses -> Chat, and Chat -> Responses).
_MAPPED: dict[str, tuple[str, ...]] = {
    "input": ("messages",),
    "instructions": ("messages",),
    "max_output_tokens": ("max_tokens", "max_completion_tokens"),
    "text": ("response_format", "verbosity"),
    "reasoning": ("reasoning_effort",),
    "previous_response_id": ("messages",),
    "conversation": ("messages",),
    "messages": ("input", "instructions"),
    "max_tokens": ("max_output_tokens",),
    "max_completion_tokens": ("max_output_tokens",),
    "response_format": ("text",),
    "reasoning_effort": ("reasoning",),
    "stream_options": ("stream",),
}
# Why a field the backend got was not in the client's body.
_ADDED = {
    "messages": "built from the input (and the stored history)",
    "input": "built from the messages",
    "stream_options": "added: usage on the last chunk",
}
# A value crossfeed fills in where the client left the field out (the API's default, sent explicitly).
_DEFAULTED = {
    "stream": "not asked for: sent as the API's default",
    "store": "not asked for: the backend keeps nothing (crossfeed keeps the response itself)",
    "parallel_tool_calls": "not asked for: sent as the API's default",
}


def _count(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} item{'' if len(value) == 1 else 's'}"
    return "a string" if isinstance(value, str) else "set"


def changes(client: Mapping[str, Any], sent: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per field that is not passed unchanged: ``{"field", "change", "detail"}`` with
    ``change`` one of mapped, changed, dropped, added, defaulted (a value crossfeed filled in for
    a field the client left out)."""
    rows: list[dict[str, str]] = []
    for key, value in client.items():
        if key in sent:
            if sent[key] != value:
                rows.append({"field": key, "change": "changed", "detail": f"{_brief(value)} -> {_brief(sent[key])}"})
            continue
        targets = [t for t in _MAPPED.get(key, ()) if t in sent]
        if targets:
            detail = f"{_count(value)} -> {', '.join(targets)}"
            if key == "previous_response_id":
                detail = f"history of {value} resolved from the store into {targets[0]}"
            elif key == "conversation":
                detail = "the conversation's items resolved from the store"
            rows.append({"field": key, "change": "mapped", "detail": detail})
        else:
            rows.append({"field": key, "change": "dropped", "detail": "not sent to the backend"})
    mapped_to = {t for key in client for t in _MAPPED.get(key, ())}
    for key, value in sent.items():
        if key in client:
            continue
        if key in _DEFAULTED:
            rows.append({"field": key, "change": "defaulted", "detail": f"{_DEFAULTED[key]}: {_brief(value)}"})
            continue
        if key in mapped_to and key not in _ADDED:
            continue
        why = _ADDED.get(key, "added")
        detail = f"{why}: {_count(value)}" if key in ("messages", "input") else f"{why}: {_brief(value)}"
        rows.append({"field": key, "change": "added", "detail": detail})
    return rows


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def session_of(client: Mapping[str, Any], headers: Mapping[str, str], known: Mapping[str, Session]) -> str | None:
    """The session a turn is grouped under, as the page names it (proxy/runtime/sessions.py)."""
    return sessions.label(sessions.resolve(client, headers, known))
