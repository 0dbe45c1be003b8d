"""Which session a turn belongs to: one resolution for the inspector's grouping
(proxy/runtime/inspector.py) and the trace's ``gen_ai.conversation.id``
(proxy/runtime/tracing_otel.py). Pure functions.

A session is ``(kind, id)``: ``("conversation", conv_...)`` for a turn of a conversation,
``("chain", resp_...)`` for a ``previous_response_id`` chain (named by its first response when
that is known, else by the response the turn continues), ``("session", value)`` for a client's
session header (Codex sends ``session_id``) or its ``prompt_cache_key``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Session = tuple[str, str]

# Headers that name a client's session (Codex sends session_id; others their own).
SESSION_HEADERS = ("session_id", "x-session-id", "conversation_id", "x-conversation-id")
MAX_ID = 128  # characters of a client's session value kept


def resolve(client: Mapping[str, Any], headers: Mapping[str, str], known: Mapping[str, Session]) -> Session | None:
    """The session of a turn: its conversation, the chain its ``previous_response_id`` continues
    (``known``: a response id -> the session its turn had), the client's session header, or its
    prompt cache key. None: a turn of its own (it starts a chain once its response id is known:
    ``started``)."""
    conversation = client.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        return ("conversation", conversation)
    previous = client.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return known.get(previous) or ("chain", previous)
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return ("session", value[:MAX_ID])
    key = client.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return ("session", key[:MAX_ID])
    return None


def started(response_id: str) -> Session:
    """The session a turn of its own starts: the chain its response heads."""
    return ("chain", response_id)


def label(session: Session | None) -> str | None:
    """How the inspector's page names a session: ``"chain resp_..."``."""
    return None if session is None else f"{session[0]} {session[1]}"
