"""Background runs as their readers see them: the run's state record, its event log read from a
cursor until its one terminal event, and the end of a run whose process stopped.

A run (proxy/turns/background.py) writes every event of its Response to the store's event log
(``append_events``) and keeps a state record (``put_run``): ``{"id", "owner", "status",
"response", "last"}`` where ``response`` is the Response so far (its output items as they finish)
and ``last`` the last sequence number written. Any process sharing the store reads them: ``GET
/v1/responses/{id}`` answers the record's Response, ``?stream=true&starting_after=N`` the
events after N and then the live ones until the terminal event.

No run is ever stuck: its process renews a lease (``[runs] lease_seconds``). A reader that finds
the run not ended and the lease run out takes the lease itself (one reader wins it) and ends the
run: ``response.failed`` with ``server_error`` "the server running this response stopped", so
every reader gets that terminal event.

A reader in the process running the run reads its ``LiveLog`` (the events written so far, kept in
memory while it runs) rather than the store: no store read per event, no polling delay (the
detached turn's own client, proxy/turns/detach.py, is such a reader); once the run's task is over
it reads the rest (the end its process wrote) from the store.
"""

from __future__ import annotations

import asyncio
import bisect
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.ids import RandomIds
from crossfeed.proxy.state.store.base import ResponseStore, StoreError
from crossfeed.proxy.state.store_access import STORE, count_failure, unavailable
from crossfeed.translators.responses.normalize import NormalizeResponses

log = structlog.get_logger("crossfeed")

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
ENDED = frozenset({"completed", "incomplete", "failed", "cancelled"})
STOPPED = "the server running this response stopped"
WAIT_SECONDS = 1.0  # one wait on the log; between two, the reader checks the run is alive


class LiveLog:
    """A running run's events as written to its log, in memory, for this process's readers."""

    __slots__ = ("seqs", "docs", "end", "done", "_grew")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.docs: list[bytes] = []
        self.end: int | None = None  # the terminal event's sequence number, once written
        self.done = False  # the run's task is over: read the rest from the store
        self._grew = asyncio.Event()

    def add(self, pairs: list[tuple[int, bytes]], ended: bool) -> None:
        """Events the run has just written to the store (in order)."""
        for seq, doc in pairs:
            self.seqs.append(seq)
            self.docs.append(doc)
        if ended and pairs:
            self.end = pairs[-1][0]
        self.wake()

    def close(self) -> None:
        self.done = True
        self.wake()

    def wake(self) -> None:
        self._grew.set()
        self._grew = asyncio.Event()

    def after(self, cursor: int) -> tuple[list[bytes], int]:
        """The events after ``cursor`` and the cursor after them."""
        start = bisect.bisect_right(self.seqs, cursor)
        if start == len(self.seqs):
            return [], cursor
        return self.docs[start:], self.seqs[-1]

    async def wait(self, seconds: float) -> None:
        """Until something is added or the run is over, at most ``seconds``."""
        try:
            await asyncio.wait_for(self._grew.wait(), seconds)
        except TimeoutError:
            pass


LIVE: web.AppKey[dict[str, LiveLog]] = web.AppKey("live_runs", dict)


def is_terminal(doc: bytes) -> bool:
    """Whether a logged event is the Response's terminal event."""
    try:
        return orjson.loads(doc).get("type") in TERMINAL_EVENTS
    except (orjson.JSONDecodeError, AttributeError):
        return False


def ended_status(state: dict[str, Any]) -> bool:
    return state.get("status") in ENDED


async def find_run(app: web.Application, run_id: str) -> dict[str, Any] | None:
    """The run's state record, if there is one and the current request's key may see it (a run
    of another key is as if it did not exist). A store that cannot be read: None (the caller's
    lookup of a stored response says what it can: one this process still holds for retry, or
    the 503 naming the store)."""
    try:
        state = await app[STORE].get_run(run_id)
    except StoreError as exc:
        count_failure(app, "get_run", exc)
        return None
    if state is None or state.get("owner") != KEY_NAME.get() or state.get("deleted"):
        return None
    return state


async def forget_run(app: web.Application, run_id: str) -> None:
    """After ``DELETE /v1/responses/{id}``: the run's record says so, and no reader finds it
    (its log expires with it). Best effort: a store that fails here is counted and logged."""
    try:
        state = await app[STORE].get_run(run_id)
        if state is not None:
            await app[STORE].put_run(run_id, {**state, "deleted": True})
    except StoreError as exc:
        count_failure(app, "delete_run", exc)


def closing_events(logged: list[bytes], code: str, message: str, *, cancelled: bool = False) -> list[dict[str, Any]]:
    """The events that end a run whose log stopped at ``logged`` (no terminal event): its open
    items closed ``incomplete``, then ``error`` and ``response.failed`` (``cancelled``: no error,
    the Response's status ``cancelled``), numbered on from the log. The log is replayed through
    the strict-stream machine (translators/responses/normalize.py), which knows what is open."""
    machine = NormalizeResponses(ids=RandomIds(), now=lambda: int(time.time()))
    for doc in logged:
        machine.feed(orjson.loads(doc))
    out = machine.fail(code, message)
    if cancelled:
        out = [e for e in out if e.get("type") != "error"]
        out[-1]["response"] = {**out[-1]["response"], "status": "cancelled", "error": None}
    first = len(logged)
    for i, event in enumerate(out):
        event["sequence_number"] = first + i
    return out


async def end_run(
    store: ResponseStore, run_id: str, state: dict[str, Any], code: str, message: str, *, cancelled: bool = False
) -> bool:
    """Write the events that end a run without a terminal event in its log, and its final
    state; False (nothing written) when its log already ends."""
    logged = [doc for _, doc in await store.read_events(run_id, -1, 0)]
    if any(is_terminal(doc) for doc in logged[-1:]):
        return False
    events = closing_events(logged, code, message, cancelled=cancelled)
    await store.append_events(run_id, [(e["sequence_number"], orjson.dumps(e)) for e in events])
    response = events[-1]["response"]
    last = events[-1]["sequence_number"]
    await store.put_run(run_id, {**state, "status": response["status"], "response": response, "last": last})
    return True


async def reap_if_stopped(app: web.Application, run_id: str) -> bool:
    """End the run failed when it has not ended and its lease ran out (its process stopped):
    True when this call ended it. One reader wins the lease and ends it; the others read the
    terminal event it wrote."""
    store = app[STORE]
    lease = await store.lease(run_id)
    if lease is None or lease[1] > time.time():
        return False
    if not await store.renew_lease(run_id, f"reaper-{uuid.uuid4().hex}", app[CONFIG].runs.lease_seconds):
        return False  # another reader is ending it, or its process came back
    state = await store.get_run(run_id)
    if state is None or ended_status(state):
        return False
    if not await end_run(store, run_id, state, "server_error", STOPPED):
        return False
    log.warning("run.abandoned", response_id=run_id, holder=lease[0])
    return True


async def run_events(app: web.Application, run_id: str, after: int) -> AsyncIterator[list[bytes]]:
    """The run's logged events after sequence number ``after``, batch by batch as they come,
    until (and with) its terminal event. While none come, the run is checked (``reap_if_stopped``)
    once per ``WAIT_SECONDS``; an empty batch is yielded then, for the caller's keepalive."""
    store = app[STORE]
    cursor, wait = after, 0.0  # (the first read does not wait: an ended run answers at once)
    live = app[LIVE].get(run_id) if LIVE in app else None
    while live is not None and not live.done:  # a run of this process: its events from memory
        docs, cursor = live.after(cursor)
        if docs:
            yield docs
            if live.end is not None and cursor >= live.end:
                return
            continue
        if live.end is not None and cursor >= live.end:
            return
        await live.wait(WAIT_SECONDS)
        if not live.after(cursor)[0] and not live.done:
            yield []
    while True:
        try:
            batch = await store.read_events(run_id, cursor, wait)
            wait = WAIT_SECONDS
        except StoreError as exc:
            raise unavailable(app, exc, "get", f"the events of response '{run_id}'") from None
        if batch:
            docs = []
            for seq, doc in batch:
                docs.append(doc)
                if is_terminal(doc):
                    yield docs
                    return
                cursor = seq
            yield docs
            continue
        try:
            state = await store.get_run(run_id)
            if state is None:
                return  # expired meanwhile
            if ended_status(state):
                # its terminal event is at or before the cursor (or its log has expired): done,
                # unless the log has more after the cursor now
                if not await store.read_events(run_id, cursor, 0):
                    return
                continue
            await reap_if_stopped(app, run_id)
        except StoreError as exc:
            raise unavailable(app, exc, "get", f"response with id '{run_id}'") from None
        yield []


def starting_after(request: web.Request) -> int:
    """``starting_after`` of a resumed stream: -1 (from the start) when absent."""
    raw = request.query.get("starting_after")
    if raw is None or raw == "":
        return -1
    if not raw.lstrip("-").isdigit():
        raise ClientRequestError("`starting_after` must be an integer", param="starting_after", code="invalid_type")
    return int(raw)


async def stream_run(request: web.Request, run_id: str, after: int) -> web.StreamResponse:
    """A resumed stream of a run as SSE: its events after ``after``, then the live ones until the
    terminal event; an SSE comment while none come (every keepalive interval)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    events = run_events(request.app, run_id, after)
    first = await anext(events, None)  # a store that cannot be read is still a 503 here
    await resp.prepare(request)
    keepalive = request.app[CONFIG].server.keepalive_seconds
    quiet_since = time.monotonic()
    docs: list[bytes] | None = first
    while docs is not None:
        if docs:
            await resp.write(b"".join(sse_frame(doc) for doc in docs))
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= keepalive:
            await resp.write(b": keepalive\n\n")
            quiet_since = time.monotonic()
        try:
            docs = await anext(events, None)
        except Exception:  # (a store failing mid-stream: the stream ends; the client may resume)
            log.warning("run.read_failed", response_id=run_id)
            break
    await resp.write_eof()
    return resp


async def answer_run(request: web.Request, state: dict[str, Any]) -> web.StreamResponse:
    """``GET /v1/responses/{id}`` of a background run: its Response so far (a run whose process
    stopped is ended first), or with ``stream``, its events after ``starting_after``."""
    rid = str(state["id"])
    if request.query.get("stream") in ("true", "1"):
        return await stream_run(request, rid, starting_after(request))
    if not ended_status(state):
        try:
            if await reap_if_stopped(request.app, rid):
                state = await find_run(request.app, rid) or state
        except StoreError as exc:
            raise unavailable(request.app, exc, "get", f"response with id '{rid}'") from None
    return web.Response(body=orjson.dumps(state["response"]), content_type="application/json")


def sse_frame(doc: bytes) -> bytes:
    kind = orjson.loads(doc).get("type", "")
    return b"event: " + str(kind).encode() + b"\ndata: " + doc + b"\n\n"
