"""What the inspector says of a turn's two requests: what changed between the client's body and the
body crossfeed sent the backend, and which session the turn belongs to. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    "parallel_tool_calls": "defaulted",
    "store": "set by crossfeed (it keeps the response itself)",
}
# Headers that name a client's session (Codex sends session_id; others their own).
_SESSION_HEADERS = ("session_id", "x-session-id", "conversation_id", "x-conversation-id")


def _count(value: Any) -> str:
    if isinstance(value, list):
        return f"{len(value)} item{'' if len(value) == 1 else 's'}"
    return "a string" if isinstance(value, str) else "set"


def changes(client: Mapping[str, Any], sent: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per field that is not passed unchanged: ``{"field", "change", "detail"}`` with
    ``change`` one of mapped, changed, dropped, added."""
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
        if key not in client:
            why = _ADDED.get(key, "added")
            if key in mapped_to and key not in _ADDED:
                continue
            detail = f"{why}: {_count(value)}" if key in ("messages", "input") else f"{why}: {_brief(value)}"
            rows.append({"field": key, "change": "added", "detail": detail})
    return rows


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def session_of(client: Mapping[str, Any], headers: Mapping[str, str], sessions: Mapping[str, str]) -> str | None:
    """The session a turn is grouped under: its conversation, the chain its
    ``previous_response_id`` continues, the client's session header, or its prompt cache key.
    None: a turn of its own (it starts a chain when its response id is known)."""
    conversation = client.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        return f"conversation {conversation}"
    previous = client.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return sessions.get(previous) or f"chain {previous}"
    for name in _SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return f"session {value[:128]}"
    key = client.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return f"session {key[:128]}"
    return None
