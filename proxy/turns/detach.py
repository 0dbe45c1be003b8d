"""Detached streamed turns (``[runs] detach_on_disconnect``, off by default): a streamed create
with ``store`` true runs as a run (proxy/turns/background.py: the create streamed into the
store's event log) whose first reader is the client's own connection. Its Response is an
ordinary streamed one (``background`` false); the client dropping ends its reading, not the
turn, and ``GET /v1/responses/{id}?stream=true&starting_after=N`` resumes it.

**Join.** Codex and agents resend the whole turn after a drop. Each detached turn leaves its
fingerprint in the store's shared map (``remember``): a hash of the inbound key's name and the
request's model, ``previous_response_id``, ``conversation``, input, instructions, tools and
sampling fields, naming the run. The same key sending the identical turn while the run is going
on (up to a day), or within ``[runs] join_seconds`` of its end, joins it: its events from the first,
and the backend is not asked again. In this process a resend that comes before the first turn's
Response has begun waits for it (the fingerprint is only written once its id is known). A run
that failed or was cancelled is not joined.

With the option off none of this runs: ``wanted`` is one check per create, the plain streamed
path (proxy/streaming/sinks.py) is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.state.runs import find_run, stream_run
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import STORE
from crossfeed.proxy.turns import background
from crossfeed.proxy.turns.turn import Turn

log = structlog.get_logger("crossfeed")

# What makes two creates the same turn (``stream``, ``store``, metadata and the like do not).
SAME_TURN = (
    "model",
    "previous_response_id",
    "conversation",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "temperature",
    "top_p",
    "max_output_tokens",
    "max_tool_calls",
    "include",
)
NOT_JOINED = frozenset({"failed", "cancelled"})
STORE_WAIT = 2.0  # at most this long for the store's map: past it the turn is not joined
# While a run goes on its fingerprint stays (its end replaces it with one of ``join_seconds``; a
# run whose process died is ended failed by its readers, and a failed run is not joined).
RUNNING_SECONDS = 24 * 3600
# Turns of this process whose Response has not begun yet: (app, fingerprint) -> its run id.
_STARTING: dict[tuple[int, str], asyncio.Future[str]] = {}


def wanted(app: web.Application, body: dict[str, Any]) -> bool:
    """Whether a streamed create on a chat upstream runs detached."""
    return app[CONFIG].runs.detach_on_disconnect and body.get("store") is not False


def fingerprint(owner: str | None, body: dict[str, Any]) -> str:
    """The name of a turn in the store's map: the owner and the request, canonical JSON, hashed."""
    same = {key: body.get(key) for key in SAME_TURN}
    doc = orjson.dumps([owner, same], option=orjson.OPT_SORT_KEYS)
    return "turn:" + hashlib.sha256(doc).hexdigest()


async def create(request: web.Request, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
    """A detached streamed create: joins the identical turn's run, else runs one; either way the
    client reads its events from the first."""
    app = request.app
    name = fingerprint(KEY_NAME.get(), body)
    joined = await _joinable(app, name)
    if joined is not None:
        turn.log["joined"] = joined
        log.info("run.joined", response_id=joined)
        if METRICS in app:
            app[METRICS].runs_joined.inc()
        return await stream_run(request, joined, -1)
    key = (id(app), name)
    starting: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    _STARTING[key] = starting
    run = background.launch(turn, body)
    # (the run remembers its fingerprint itself, before its Response is handed out: a client
    # that leaves before that changes nothing)
    run.on_begin = lambda begun: _remember(app, name, begun.id, RUNNING_SECONDS)
    run.on_end = lambda ended: _remember(app, name, ended.id)
    run.started.add_done_callback(lambda started: _settle(key, starting, started))
    response = await asyncio.shield(run.started)
    return await stream_run(request, response["id"], -1)


def _settle(key: tuple[int, str], starting: asyncio.Future[str], started: asyncio.Future[dict[str, Any]]) -> None:
    """The run began (its id, and its fingerprint is in the store by now) or failed first."""
    if _STARTING.get(key) is starting:
        del _STARTING[key]
    if starting.done():
        return
    if started.cancelled() or started.exception() is not None:
        starting.cancel()
    else:
        starting.set_result(str(started.result()["id"]))


async def _joinable(app: web.Application, name: str) -> str | None:
    """The run of the identical turn, when it may be joined: starting in this process (waited
    for), or remembered, visible to this key, not failed or cancelled."""
    starting = _STARTING.get((id(app), name))
    if starting is not None:
        await asyncio.wait([starting])
        if starting.cancelled():
            return None  # (it failed before it began: this one runs on its own)
        return starting.result()
    try:
        async with asyncio.timeout(STORE_WAIT):
            rid = await app[STORE].recall(name)
    except (StoreError, TimeoutError) as exc:
        log.info("run.join_lookup_failed", error=str(exc)[:200] or "timed out")
        return None
    if rid is None:
        return None
    state = await find_run(app, rid)
    if state is None or state.get("status") in NOT_JOINED:
        return None
    return rid


async def _remember(app: web.Application, name: str, run_id: str | None, seconds: int = 0) -> None:
    """Keep the turn's fingerprint for ``join_seconds`` from now, or ``seconds`` when longer
    (best effort)."""
    if run_id is None:
        return
    with contextlib.suppress(StoreError, TimeoutError):
        async with asyncio.timeout(STORE_WAIT):
            await app[STORE].remember(name, run_id, max(seconds, app[CONFIG].runs.join_seconds))
