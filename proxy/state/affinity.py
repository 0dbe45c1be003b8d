"""Affinity: the turns of one conversation go to the replica of a pool that served it before.

A backend's prefix cache (vLLM's, llama.cpp's slots) holds the conversation it last served: the
next turn on the same replica reads its history from the cache instead of computing it again.
So a turn's *key* names its conversation, first found of:

  ``conversation``               the Conversations API's id                       ``conv:<id>``
  ``previous_response_id``       the root of its chain (kept in each saved         the root's key
                                 Response's record, with the replica that
                                 answered it: read with the history, no lookup
                                 of its own; a chain of unstored responses: the
                                 next two keys)
  ``session_id`` header          Codex's session (``session-id`` too)              ``session:<id>``
  ``prompt_cache_key``           the client's own cache key                        ``cache:<key>``

and the store keeps ``affinity:<upstream>:<key>`` -> the replica's label for
``affinity_ttl_seconds``, so every crossfeed process and replica sharing the store agrees. A
turn without a key goes to the least busy replica; its Response's id becomes its chain's root.
A client that sends back the ``x-codex-turn-state`` crossfeed gave it is sent where it names:
an HTTP answer's token (``cf1.``) names the replica that gave it, which the client's next call of
the turn goes to first; a WebSocket's 101 carries a token (``cf2.``) naming the socket's session
(from its handshake's session header), which keys a turn as that header does, so a client that
reconnects with it (as Codex does within a turn) reaches the replica the first socket used. The store failing never
fails a turn: affinity is then lost.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import STORE

log = structlog.get_logger("crossfeed")

TURN_STATE_HEADER = "x-codex-turn-state"
REPLICA_HEADER = "x-crossfeed-replica"
_TOKEN_PREFIX = "cf1."  # names a replica (an HTTP answer's)
_KEY_PREFIX = "cf2."  # names an affinity key (a WebSocket's 101)


@dataclass(slots=True)
class Affinity:
    """One turn's affinity on a pooled upstream."""

    upstream: str
    ttl: int
    key: str | None  # conv:/session:/cache: (previous_response_id's root is found later)
    previous: str | None  # previous_response_id, when no conversation names the turn
    pinned: str | None  # the replica an x-codex-turn-state names
    fallback: str | None = None  # session:/cache:, when previous_response_id's chain has no root
    app: web.Application | None = None  # the turn's (its key's chain is looked up in its store)
    resolved: bool = False
    replica: str | None = None  # the replica the key had (then: the one that served this turn)


# The current turn's affinity (None: its upstream is no pool). Set when the turn is made
# (proxy/turns/turn.py new_turn); read by its legs and by the save of its Response.
CURRENT: ContextVar[Affinity | None] = ContextVar("crossfeed_affinity", default=None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def begin(
    upstream: Upstream, body: Mapping[str, Any] | None, headers: Mapping[str, str], app: web.Application | None = None
) -> Affinity | None:
    """The turn's affinity (set as ``CURRENT``): None unless ``upstream`` is a pool or forwards
    affinity hints (proxy/state/affinity_hints.py)."""
    if not (upstream.pooled or upstream.forwards_affinity) or body is None:
        CURRENT.set(None)
        return None
    get, hget = body.get, headers.get
    if (
        get("conversation") is None
        and get("previous_response_id") is None
        and get("prompt_cache_key") is None
        and not hget("session_id")
        and not hget("session-id")
        and not hget(TURN_STATE_HEADER)
    ):  # nothing names the turn (most calls of a load balancer's kind): no key to work out
        aff = Affinity(upstream.name, upstream.affinity_ttl_seconds, None, None, None, app=app)
        CURRENT.set(aff)
        return aff
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    previous = _text(body.get("previous_response_id"))
    session = _text(headers.get("session_id")) or _text(headers.get("session-id"))
    cache = _text(body.get("prompt_cache_key"))
    token = headers.get(TURN_STATE_HEADER)
    named = (read_key_token(token) if token else None) or (
        f"session:{session}" if session else f"cache:{cache}" if cache else None
    )
    key: str | None = None
    if _text(conversation):
        key = f"conv:{conversation}"
    elif previous is None:
        key = named
    aff = Affinity(upstream.name, upstream.affinity_ttl_seconds, key, previous if key is None else None, None, app=app)
    if aff.previous is not None:
        aff.fallback = named
    aff.pinned = read_turn_state(token, upstream.name) if token else None
    CURRENT.set(aff)
    return aff


def unresolved(aff: Affinity) -> bool:
    """``preferred`` has a lookup to make (else its answer is ``aff.pinned or aff.replica``)."""
    return not aff.resolved and (aff.previous is not None or aff.key is not None)


def changed(aff: Affinity, label: str) -> bool:
    """``served`` has a write to make: the turn's key names another replica than ``label``."""
    return aff.key is not None and label != aff.replica


async def preferred(app: web.Application, aff: Affinity) -> str | None:
    """The replica the turn should go to first (None: the least busy)."""
    if not aff.resolved:
        aff.resolved = True
        if aff.previous is not None:
            await _resolve_chain(app, aff, aff.previous)
        elif aff.key is not None:
            aff.replica = await _recall(app, f"affinity:{aff.upstream}:{aff.key}")
    return aff.pinned or aff.replica


async def _resolve_chain(app: web.Application, aff: Affinity, previous: str) -> None:
    """A ``previous_response_id`` turn's key and replica: its chain's root's. A chain's root keeps
    no ``root:`` entry when it had a replica (its ``resp:`` key's replica is the one write);
    a chain of unstored responses (``store: false``, e.g. Codex's WebSocket frames) keeps none
    at all: its session or cache key (``fallback``) names it then."""
    aff.key = await _recall(app, f"root:{previous}")
    if aff.key is not None:
        aff.replica = await _recall(app, f"affinity:{aff.upstream}:{aff.key}")
        return
    aff.key = f"resp:{previous}"
    aff.replica = await _recall(app, f"affinity:{aff.upstream}:{aff.key}")
    if aff.replica is None and aff.fallback is not None:
        aff.key = aff.fallback
        aff.replica = await _recall(app, f"affinity:{aff.upstream}:{aff.key}")


async def served(app: web.Application, aff: Affinity, label: str) -> None:
    """The replica ``label`` answered the turn: its key keeps it (written when it changed)."""
    if changed(aff, label):
        await _remember(app, f"affinity:{aff.upstream}:{aff.key}", label, aff.ttl)
    aff.replica = label


async def saved(app: web.Application, response_id: str) -> None:
    """A Response of the current turn was saved: a turn continuing it (``previous_response_id``)
    finds its chain's key, and a chain that starts here is keyed by it (and keeps its replica).
    One store write either way."""
    aff = CURRENT.get()
    if aff is None:
        return
    if aff.key is None:  # no key: this Response is its chain's root
        aff.key = f"resp:{response_id}"
        if aff.replica is not None:  # its own root: no root: entry (``_resolve_chain``)
            await _remember(app, f"affinity:{aff.upstream}:{aff.key}", aff.replica, aff.ttl)
            return
    await _remember(app, f"root:{response_id}", aff.key, aff.ttl)


def routing(response_id: str) -> dict[str, str] | None:
    """Where the current turn was routed, kept in its Response's record (None: no pool, or no
    replica answered): its chain's key (this Response roots a chain that has none) and replica."""
    aff = CURRENT.get()
    if aff is None or aff.replica is None:
        return None
    return {"upstream": aff.upstream, "key": aff.key or f"resp:{response_id}", "replica": aff.replica}


def continues(response_id: str, routed: dict[str, str] | None) -> None:
    """The current turn continues ``response_id`` (its ``previous_response_id``), which was routed
    as ``routed`` (its record's, or a socket's remembered response's): its key and replica are
    those, read with its history, with no lookup of their own. The replica that answered the
    previous turn holds its prefix in cache; a response kept without a route (an older record, or
    no replica answered) is looked up as before (``_resolve_chain``)."""
    aff = CURRENT.get()
    if aff is None or aff.resolved or routed is None or aff.previous != response_id:
        return
    if routed.get("upstream") == aff.upstream and routed.get("key") and routed.get("replica"):
        aff.key, aff.replica, aff.resolved = routed["key"], routed["replica"], True


async def replica_of(app: web.Application, upstream: str, response_id: str) -> str | None:
    """The replica whose answer ``response_id`` was, as its chain's key has it (None: unknown)."""
    key = await _recall(app, f"root:{response_id}") or f"resp:{response_id}"
    return await _recall(app, f"affinity:{upstream}:{key}")


@functools.lru_cache(maxsize=1024)
def turn_state(label: str) -> str:
    """The opaque ``x-codex-turn-state`` token naming a replica (a pool's few labels: cached)."""
    return _TOKEN_PREFIX + _b64(label)


def socket_token(headers: Mapping[str, str], pooled: bool) -> str | None:
    """The ``x-codex-turn-state`` a WebSocket's 101 carries: a token naming the socket's session
    (None: no upstream is a pool or takes hints, or the handshake names no session). The client
    that reconnects with it is keyed by that session, with or without its session header; one
    that sent a token of ours gets it back."""
    if not pooled:
        return None
    sent = headers.get(TURN_STATE_HEADER)
    if sent and (read_key_token(sent) or sent.startswith(_TOKEN_PREFIX)):
        return sent
    session = _text(headers.get("session_id")) or _text(headers.get("session-id"))
    return _KEY_PREFIX + _b64(f"session:{session}") if session else None


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(raw: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def read_key_token(token: str | None) -> str | None:
    """The affinity key a WebSocket's token names (None: not such a token)."""
    if not token or not token.startswith(_KEY_PREFIX) or len(token) > 512:
        return None
    key = _unb64(token[len(_KEY_PREFIX) :])
    return key if key is not None and key.startswith("session:") else None


def read_turn_state(token: str | None, upstream: str) -> str | None:
    """The replica label a token names, when it is one of ``upstream``'s (else None)."""
    if not token or not token.startswith(_TOKEN_PREFIX) or len(token) > 512:
        return None
    label = _unb64(token[len(_TOKEN_PREFIX) :])
    return label if label is not None and label.rpartition("/")[0] == upstream else None


class ResponseIdSniffer:
    """A pooled Responses backend's answer passed through unchanged: the Response's id, read from
    its first bytes (``response.created``, or the JSON body), is saved like one crossfeed made, so
    a ``previous_response_id`` to it goes to the replica that stores it."""

    LIMIT = 16384  # bytes looked at, at most

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._seen = b""

    async def feed(self, chunk: bytes) -> bool:
        """Look at the next bytes; True once done (found, or nothing in the first LIMIT bytes)."""
        self._seen += chunk[: self.LIMIT]
        found = _RESPONSE_ID.search(self._seen)
        if found is not None:
            await saved(self._app, found.group(1).decode())
            return True
        return len(self._seen) >= self.LIMIT


_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,200})"')


# The longest a turn waits for the affinity map: past it (a hung store) the turn goes on without.
MAX_WAIT = 2.0


def _wait(app: web.Application) -> float:
    return min(MAX_WAIT, app[CONFIG].store.operation_timeout_seconds)


async def _recall(app: web.Application, name: str) -> str | None:
    store = app.get(STORE)
    if store is None:
        return None
    try:
        async with asyncio.timeout(_wait(app)):
            return await store.recall(name)
    except (StoreError, TimeoutError) as exc:
        log.info("affinity.store_failed", operation="recall", error=str(exc)[:200] or "timed out")
        return None


async def _remember(app: web.Application, name: str, value: str, ttl: int) -> None:
    store = app.get(STORE)
    if store is None:
        return
    try:
        async with asyncio.timeout(_wait(app)):
            await store.remember(name, value, ttl)
    except (StoreError, TimeoutError) as exc:
        log.info("affinity.store_failed", operation="remember", error=str(exc)[:200] or "timed out")
