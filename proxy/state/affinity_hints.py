"""Affinity hints: a turn's affinity key, forwarded to a backend or router that routes by it.

A gateway with sticky sessions, or a cache-aware router in front of vLLM/SGLang replicas, can keep
a conversation on one replica when each call names the conversation. An upstream's
``affinity_header`` and/or ``affinity_field`` (proxy/runtime/pool_config.py) say where: each
call to it, translated (proxy/upstream.py ``open_upstream``) or passed through with a body
(proxy/http/passthrough.py), carries the turn's key (proxy/state/affinity.py: conversation, the
root of a ``previous_response_id`` chain, Codex's session, ``prompt_cache_key``), hashed. Never the raw key: a
conversation's or a response's id lets whoever holds it read that conversation through crossfeed,
and a backend or router logs what it routes by. The hash is stable (every crossfeed process sends
the same one for a conversation), 32 hex characters, and does not say which kind of key it was.
A turn with no key (its first Response then roots its chain) sends no hint.
"""

from __future__ import annotations

import hashlib
from typing import Any

from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.state import affinity

_SALT = b"crossfeed-affinity-hint:"


def hint_value(key: str) -> str:
    """What a backend is sent for affinity key ``key``."""
    return hashlib.sha256(_SALT + key.encode()).hexdigest()[:32]


async def with_hint(
    up: Upstream, body: dict[str, Any], headers: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``body`` and ``headers`` of a call to ``up``, with the current turn's hint when ``up`` asks
    for one (unchanged otherwise; the caller's dicts are never changed)."""
    if not up.forwards_affinity:
        return body, headers
    aff = affinity.CURRENT.get()
    if aff is None:
        return body, headers
    if aff.app is not None:
        await affinity.preferred(aff.app, aff)  # resolves a previous_response_id's chain, once per turn
    key = aff.key or aff.fallback
    if key is None:
        return body, headers
    value = hint_value(key)
    if up.affinity_header is not None:
        headers = {**headers, up.affinity_header: value}
    if up.affinity_field is not None:
        body = {**body, up.affinity_field: value}
    return body, headers
