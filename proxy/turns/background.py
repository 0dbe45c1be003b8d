"""Background runs: a create with ``background: true`` runs as a task of the application, not of
the client's request, and writes every event of its Response to the store's event log.

The run is the ordinary create (``forward.respond``) streamed into a ``LogSink``: the sink renders
one JSON document per event (the WebSocket sink's rendering, JSON framing) and appends them to the
run's log (``ResponseStore.append_events``), keeping the run's state record (proxy/state/runs.py)
up to date at the Response's start, at each finished output item and at its end. A plain turn
never meets any of it: only a background create (or, with ``[runs] detach_on_disconnect``, a
detached streamed one: proxy/turns/detach.py) opens a ``LogSink``.

While it runs, a watcher renews the run's lease every ``[runs] renew_seconds`` and checks its
cancel flag every ``cancel_poll_seconds``. A cancel raises ``Cancelled`` into the relay's upstream
read (the upstream request is closed at once; the Response ends ``response.failed`` with status
``cancelled``), or, between two legs, cancels the task and writes that terminal event itself. A
run whose lease another process took (it was thought dead) stops without writing anything more.

Shutdown: the drain ends the runs' relays as it ends every open stream (``response.failed``,
written to the log); ``end_runs`` then ends the runs still going (between legs, or waiting for the
upstream) the same way.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ProxyError
from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.state.runs import LIVE, TERMINAL_EVENTS, LiveLog, end_run
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import STORE
from crossfeed.proxy.streaming.relay import Cancelled
from crossfeed.proxy.turns.forward import respond
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.errors import TranslationError
from crossfeed.translators.sse import JSON_FRAMING, Framing, render_json

log = structlog.get_logger("crossfeed")

RUNS: web.AppKey[set[Run]] = web.AppKey("background_runs", set)
HOLDER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"  # this process, as a lease holder


class Run:
    """One background run in this process: its task, its sink, what the readers' state says."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.store = app[STORE]
        self.id: str | None = None  # known at the Response's first event
        self.owner = KEY_NAME.get()
        self.started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        # (its error is the create's answer; a create whose client left never reads it)
        self.started.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.sink = LogSink(self)
        self.task: asyncio.Task[None] | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.response: dict[str, Any] = {}  # the Response so far
        self.last = -1  # the last sequence number written
        self.ended = False  # its terminal event is written
        self.cancelling = False
        self.lost = False  # another process took the lease: write nothing more
        self.live = LiveLog()  # what it wrote, for this process's readers (proxy/state/runs.py)
        # (proxy/turns/detach.py) after its first event is logged, and after its end
        self.on_begin: Callable[[Run], Awaitable[None]] | None = None
        self.on_end: Callable[[Run], Awaitable[None]] | None = None

    def state(self) -> dict[str, Any]:
        status = self.response.get("status") or "queued"
        return {"id": self.id, "owner": self.owner, "status": status, "response": self.response, "last": self.last}

    async def begin(self, response: dict[str, Any]) -> None:
        """The Response's first event: the run is known to the store and leased, then handed out."""
        self.id, self.response = response["id"], response
        if METRICS in self.app:
            self.app[METRICS].runs_active.inc()
        await self.store.renew_lease(response["id"], HOLDER, self.app[CONFIG].runs.lease_seconds)
        await self.store.put_run(response["id"], self.state())
        self.app[LIVE][response["id"]] = self.live
        self.watcher = asyncio.get_running_loop().create_task(self._watch())
        if self.on_begin is not None:
            await self.on_begin(self)

    async def write(self, docs: list[bytes]) -> None:
        """Log a payload of events, then the state when it changed (start, an item done, the end)."""
        if self.lost:
            raise ConnectionResetError("another process runs this response now")
        if not docs:
            return
        changed = ended = False
        pairs = []
        try:
            for doc in docs:
                event = orjson.loads(doc)
                kind, seq = event.get("type"), event["sequence_number"]
                pairs.append((seq, doc))
                if kind in ("response.created", "response.in_progress", *TERMINAL_EVENTS):
                    if self.id is None:
                        await self.begin(event["response"])
                    self.response, changed = event["response"], True
                    ended = ended or kind in TERMINAL_EVENTS
                elif kind == "response.output_item.done":
                    self.response = {**self.response, "output": [*self.response.get("output", ()), event["item"]]}
                    changed = True
            assert self.id is not None, "a Response's first event is response.created"
            await self.store.append_events(self.id, pairs)
            self.last, self.ended = pairs[-1][0], self.ended or ended
            self.live.add(pairs, ended)
            if changed:
                await self.store.put_run(self.id, self.state())
        except StoreError as exc:
            log.warning("run.log_failed", response_id=self.id, error=str(exc))
            raise ConnectionResetError("the response store took no events") from None
        if not self.started.done():
            self.started.set_result(self.response)

    async def end(self, code: str, message: str, *, cancelled: bool = False) -> None:
        """Write the end of a run that ended without its terminal event (best effort)."""
        if self.id is None or self.ended or self.lost:
            return
        self.ended = True
        try:
            if await end_run(self.store, self.id, self.state(), code, message, cancelled=cancelled):
                self.response = {**self.response, "status": "cancelled" if cancelled else "failed"}
        except StoreError as exc:
            log.warning("run.end_failed", response_id=self.id, error=str(exc))

    def cancel(self) -> None:
        """Cancel at once: into the relay's read when a leg is streaming, else the task."""
        self.cancelling = True
        handle = self.sink.open_stream
        if handle is not None:
            handle.end(Cancelled())
        elif self.task is not None:
            self.task.cancel()

    async def _watch(self) -> None:
        assert self.id is not None
        cfg = self.app[CONFIG].runs
        loop = asyncio.get_running_loop()
        renew_at = loop.time() + cfg.renew_seconds
        while self.task is None or not self.task.done():
            try:
                if self.cancelling:
                    await asyncio.sleep(cfg.cancel_poll_seconds)
                elif await self.store.wait_cancel(self.id, cfg.cancel_poll_seconds):
                    log.info("run.cancelled", response_id=self.id)
                    self.cancel()
                if loop.time() >= renew_at:
                    renew_at = loop.time() + cfg.renew_seconds
                    if not await self.store.renew_lease(self.id, HOLDER, cfg.lease_seconds):
                        log.warning("run.lease_lost", response_id=self.id)
                        self.lost = True
                        if self.task is not None:
                            self.task.cancel()
                        return
            except StoreError as exc:
                log.warning("run.watch_failed", response_id=self.id, error=str(exc))


class LogSink:
    """A sink that writes the Response's events to its run's log (JSON documents, no transport)."""

    __slots__ = ("run", "render", "write", "empty", "framing", "open_stream")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.render: Callable[[list[Any]], list[bytes]] = render_json
        self.write = run.write
        self.empty: list[bytes] = []
        self.framing: Framing = JSON_FRAMING
        self.open_stream: Any = None

    async def flush(self) -> None:
        return None

    async def keepalive(self) -> None:
        return None

    async def close(self, last: list[bytes]) -> None:
        if last:
            await self.run.write(last)

    async def end(self, events: list[Any]) -> None:
        await self.close(self.render(events) if events else self.empty)


async def start(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    """Start a background create; returns its Response as it began (raises the create's error
    when it fails before its stream, as a foreground create would)."""
    return await asyncio.shield(launch(turn, body).started)


def launch(turn: Turn, body: dict[str, Any]) -> Run:
    """Start a run of the create; its ``started`` is the Response as it began (or the error)."""
    app = turn.app
    run = Run(app)

    async def open_sink() -> LogSink:
        return run.sink

    # (streamed from the backend whatever the create's own ``stream``: the run is a stream)
    run.task = asyncio.get_running_loop().create_task(_drive(run, turn, {**body, "stream": True}, open_sink))
    app[RUNS].add(run)
    run.task.add_done_callback(lambda _: app[RUNS].discard(run))
    return run


async def _drive(run: Run, turn: Turn, body: dict[str, Any], open_sink: Callable[[], Any]) -> None:
    try:
        await respond(turn, body, open_sink)
    except asyncio.CancelledError:
        if run.cancelling:
            await run.end("cancelled", "the client cancelled the response", cancelled=True)
        else:
            await run.end("server_shutting_down", "crossfeed is shutting down; the response was ended")
    except (ProxyError, TranslationError) as exc:
        if not run.started.done():
            run.started.set_exception(exc)
            return
        await run.end(str(getattr(exc, "code", None) or "server_error"), exc.message)
    except Exception as exc:
        log.exception("run.failed", response_id=run.id)
        if not run.started.done():
            run.started.set_exception(ProxyError("crossfeed failed to start the background response"))
            return
        await run.end("server_error", f"crossfeed failed running the response ({type(exc).__name__})")
    finally:
        if not run.started.done():  # (a client-less run that never began: nothing to hand out)
            run.started.set_exception(ProxyError("the background response ended before it began"))
        await run.end("server_error", "the response ended without its terminal event")
        await _ended(run)
        if run.watcher is not None:
            run.watcher.cancel()
        log.info("run.ended", response_id=run.id, status=run.response.get("status"), lost=run.lost or None)


async def _ended(run: Run) -> None:
    """After a run's end is written: its live log closed, counted, its ``on_end``."""
    run.live.close()
    if run.id is None:
        return
    run.app[LIVE].pop(run.id, None)
    if METRICS in run.app:
        run.app[METRICS].runs_active.dec()
        run.app[METRICS].runs_ended.labels("lost" if run.lost else run.response.get("status") or "failed").inc()
    if run.on_end is not None:
        try:
            await run.on_end(run)
        except Exception:
            log.exception("run.on_end_failed", response_id=run.id)


async def end_runs(app: web.Application) -> None:
    """on_shutdown, after the drain: the runs still going end failed, their terminal event written."""
    runs = [run for run in app.get(RUNS, ()) if run.task is not None and not run.task.done()]
    if not runs:
        return
    log.info("server.ending_runs", runs=len(runs))
    for run in runs:
        handle = run.sink.open_stream
        if handle is not None:
            handle.end()
        elif run.task is not None:
            run.task.cancel()
    await asyncio.wait([run.task for run in runs if run.task is not None], timeout=5)
