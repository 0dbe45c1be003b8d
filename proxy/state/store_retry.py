"""The store in front of the handlers: bounded waits, failed saves kept for retry, write health.

One ``SaveKeeper`` per process (per worker) stands between the handlers and the store:

- Every store call it makes is bounded by ``[store] operation_timeout_seconds``; a read that fails
  or times out raises ``StoreError`` (the handlers answer 503 ``store_unavailable``).
- ``save`` never raises. A save that fails for an outage (the store down, its disk full or
  read-only, a timeout) is counted and logged (``store.failed``) and the record is kept in a
  per-process **retry queue**, bounded by ``retry_max_records`` and ``retry_max_bytes`` (its
  JSON size); over the bound the oldest is dropped (``store.save_lost``, counted as lost). A
  background task saves the queue again, oldest first, after a backoff of 0.25 s doubling to
  2 s, and at once when a fresh save shows the store is back: once the store recovers, the
  queue reaches it within about two seconds (plus the time to write it) and every other process
  finds those responses. At shutdown the queue gets up to ``DRAIN_SECONDS`` more (given up after
  ``DRAIN_ATTEMPTS`` failures in a row); what is left is logged and counted as lost.
- Until then this process serves follow-ups from the queue (``queued``, ``queued_items``): a
  response whose save failed is continued, fetched, listed and deleted here as if stored.
- **Write health**: when the last save (a fresh one, a retry, or a probe) failed, and since when
  (a read that finds the store unreachable or timed out counts too: it could not save either);
  when it last recovered. A lookup that misses gets an explanation (``explain_miss``) instead of
  a bare 404: a response this process gave up on (a 404 that says so); else, while saves fail or
  for ``RECOVERY_HINT_SECONDS`` after they recover (long enough for every other process to
  write its queue), a 503 that names the failed saves, since the id may be one whose save
  failed in another process. Unless its own saves are failing already, a process first asks the
  store with a small write (``ResponseStore.probe_write``; concurrent misses share one), so that
  it knows even when its own last save went through a moment before another process's failed.
  A miss is an error path (an id nobody stored), so the write is not on any turn's way.
- ``readiness``: a failing or unreachable store leaves the process ready (turns are served,
  follow-ups get their 503) but degraded, with the state in words; only a store never reached
  since start makes it not ready (a wrong URL keeps a new pod out of rotation).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from crossfeed.proxy.runtime.observability import Metrics
from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store.base import (
    ResponseStore,
    StoredResponse,
    StoreError,
    decode_record,
    encode_record,
    item_ids,
    owner_tag,
    stored_item,
)
from crossfeed.proxy.state.store_health import FRESH_SECONDS, Miss, WriteHealth, short_reason, stamp

log = structlog.get_logger("crossfeed")

T = TypeVar("T")

BACKOFF_FIRST = 0.25
BACKOFF_MAX = 2.0
DRAIN_SECONDS = 5.0  # at shutdown, the queue's last chance: at most this long,
DRAIN_ATTEMPTS = 3  # and given up after this many failures in a row (about 1.75 s of a store still down)
READY_TIMEOUT = 2.0  # /readyz's ping
LOST_IDS = 10_000  # ids of responses given up on, remembered (about 1 MB) to say so on a miss
LOG_EVERY = 10.0  # failed retries are logged at most this often


@dataclass(slots=True)
class _Queued:
    blob: bytes
    keys: list[tuple[str, str]]  # (owner tag, item id) of its items
    owner: str | None
    attempts: int = 0


class SaveKeeper:
    def __init__(
        self, store: ResponseStore, config: StoreConfig, metrics: Metrics, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.backend = store.backend or config.backend
        self.timeout = config.operation_timeout_seconds
        self.max_records = config.retry_max_records
        self.max_bytes = config.retry_max_bytes
        self.metrics = metrics
        self.health = WriteHealth(clock)
        self.clock = clock
        self.reached = False  # any operation answered since start
        self._queue: OrderedDict[str, _Queued] = OrderedDict()  # oldest first
        self._bytes = 0
        self._holders: dict[tuple[str, str], dict[str, None]] = {}  # item key -> queued ids, oldest first
        self._lost: OrderedDict[str, tuple[str | None, str, str]] = OrderedDict()  # id -> (owner, why, store's reason)
        self._lost_total = 0
        self._inflight: str | None = None
        self._deleted: set[str] = set()  # discarded while its retry was in flight
        self._wake = asyncio.Event()
        self._recovered = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[bool] | None = None
        self._logged_at = 0.0

    # -- bounded calls ---------------------------------------------------------------------------

    async def _call(self, op: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        limit = self.timeout if timeout is None else timeout
        try:
            result = await asyncio.wait_for(op(), limit)
        except TimeoutError:
            raise StoreError(f"{self.backend}: timed out (no answer within {limit:g}s)", backend=self.backend) from None
        self.reached = True
        return result

    async def _read(self, op: Callable[[], Awaitable[T]]) -> T:
        try:
            return await self._call(op)
        except StoreError as exc:
            if short_reason(exc) in ("unreachable", "timed out"):  # it cannot save either
                self._failed(exc)
            raise

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self._read(lambda: self.store.get(response_id))

    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        return await self._read(lambda: self.store.get_by_item(item_id, owner))

    async def delete(self, response_id: str) -> bool:
        return await self._read(lambda: self.store.delete(response_id))

    # -- saving ----------------------------------------------------------------------------------

    async def save(self, record: StoredResponse) -> None:
        """Save ``record``; a failure is counted, logged and kept for retry. Never raises."""
        try:
            await self._call(lambda: self.store.save(record))
        except Exception as exc:
            self.metrics.store_failures.labels("save").inc()
            retryable = not isinstance(exc, StoreError) or exc.retryable
            if not retryable:
                log.warning("store.failed", operation="save", response_id=record.id, error=str(exc))
                self._give_up(record.id, record.owner, "the store refused it", "refused")
                return
            self._failed(exc)
            self._enqueue(record)
            log.warning(
                "store.failed", operation="save", response_id=record.id, error=str(exc), queued=len(self._queue)
            )
            return
        self._ok()

    def _ok(self) -> None:
        failed_from = self.health.failing_since
        if self.health.ok():
            self._recovered.set()
            log.info(
                "store.recovered",
                backend=self.backend,
                failing_since=stamp(failed_from or 0),
                seconds=round(self.clock() - (failed_from or 0), 1),
                queued=len(self._queue),
            )

    def _failed(self, exc: BaseException) -> None:
        self.store.note_failed_save(self.clock())
        if self.health.failed(short_reason(exc)):
            log.warning("store.failing", backend=self.backend, error=str(exc))

    def _enqueue(self, record: StoredResponse) -> None:
        try:
            blob = encode_record(record, self.backend)
        except StoreError:
            self._give_up(record.id, record.owner, "the store refused it", "refused")
            return
        if len(blob) > self.max_bytes or self.max_records == 0:
            self._give_up(record.id, record.owner, "the retry queue could not hold it", "queue_full")
            return
        self._remove(record.id)
        tag = owner_tag(record.owner)
        entry = _Queued(blob, [(tag, i) for i in item_ids(record)], record.owner)
        self._queue[record.id] = entry
        self._bytes += len(blob)
        for key in entry.keys:
            self._holders.setdefault(key, {})[record.id] = None
        self.metrics.store_retries.labels("queued").inc()
        while len(self._queue) > self.max_records or self._bytes > self.max_bytes:
            oldest = next(iter(self._queue))
            dropped = self._remove(oldest)
            self._give_up(oldest, dropped.owner if dropped else None, "the retry queue was full", "queue_full")
        self._gauge()
        self._wake.set()

    def _remove(self, response_id: str) -> _Queued | None:
        entry = self._queue.pop(response_id, None)
        if entry is None:
            return None
        self._bytes -= len(entry.blob)
        for key in entry.keys:
            holders = self._holders.get(key)
            if holders is not None:
                holders.pop(response_id, None)
                if not holders:
                    del self._holders[key]
        self._gauge()
        return entry

    def _give_up(self, response_id: str, owner: str | None, why: str, reason: str) -> None:
        self._lost[response_id] = (owner, why, self.health.reason or "a write error")
        self._lost.move_to_end(response_id)
        while len(self._lost) > LOST_IDS:
            self._lost.popitem(last=False)
        self._lost_total += 1
        self.metrics.store_lost.labels(reason).inc()
        log.error("store.save_lost", response_id=response_id, reason=reason, detail=why)

    def _gauge(self) -> None:
        self.metrics.store_retry_queue.labels("records").set(len(self._queue))
        self.metrics.store_retry_queue.labels("bytes").set(self._bytes)

    # -- the queue, read -------------------------------------------------------------------------

    def queued(self, response_id: str) -> StoredResponse | None:
        entry = self._queue.get(response_id)
        return None if entry is None else decode_record(entry.blob, self.backend)

    def queued_items(self, item_ids_wanted: list[str], owner: str | None) -> dict[str, dict[str, Any]]:
        """The items of ``item_ids_wanted`` held by queued records of ``owner`` (the newest)."""
        tag, found = owner_tag(owner), {}
        records: dict[str, StoredResponse | None] = {}
        for item_id in item_ids_wanted:
            holders = self._holders.get((tag, item_id))
            if not holders:
                continue
            rid = next(reversed(holders))
            if rid not in records:
                records[rid] = self.queued(rid)
            item = stored_item(records[rid], item_id)
            if item is not None:
                found[item_id] = item
        return found

    async def discard(self, response_id: str) -> bool:
        """Take a queued record out (a DELETE): True when it was queued. One whose retry is in
        flight is deleted from the store once that retry lands."""
        if self._remove(response_id) is None:
            return False
        if self._inflight == response_id:
            self._deleted.add(response_id)
        return True

    @property
    def queue_size(self) -> int:
        return len(self._queue)

    # -- misses ----------------------------------------------------------------------------------

    async def explain_miss(self, response_id: str, owner: str | None) -> Miss | None:
        lost = self._lost.get(response_id)
        if lost is not None and lost[0] == owner:
            return Miss.given_up(self.backend, why=lost[1], reason=lost[2])
        if self.health.failing_since is None:
            # A save of ours that went through a moment ago says nothing of a save another
            # process failed since: the miss asks the store itself (misses share one probe).
            await self._probe_once()
        miss = self.health.miss(self.backend)
        if miss is None:  # saves of ours went through; another process's may not have (noted in the store)
            miss = Miss.failed_elsewhere(self.backend, self.store.failed_save_noted(), self.clock())
        return miss

    async def _probe_once(self) -> bool:
        """One probe write at a time (concurrent misses share it); True when it went through."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_write())
        return await asyncio.shield(self._probe)

    async def _probe_write(self) -> bool:
        try:
            await self._call(self.store.probe_write, min(self.timeout, FRESH_SECONDS))
        except Exception as exc:
            self._failed(exc)
            log.warning("store.failed", operation="probe_write", error=str(exc))
            return False
        self._ok()
        return True

    # -- the retry loop --------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                await self._retry_forever()
            except Exception:  # a bug here must not end the retries for the life of the process
                log.exception("store.retry_loop_failed")
                await asyncio.sleep(BACKOFF_MAX)

    async def _retry_forever(self) -> None:
        delay = BACKOFF_FIRST
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                delay = BACKOFF_FIRST
            if not self._recovered.is_set():  # a fresh save that went through skips the wait
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._recovered.wait(), delay)
            self._recovered.clear()
            while self._queue:
                if not await self._attempt(next(iter(self._queue))):
                    delay = min(delay * 2, BACKOFF_MAX)
                    break
                delay = BACKOFF_FIRST

    async def _attempt(self, response_id: str, timeout: float | None = None) -> bool:
        """Save one queued record again; True when it reached the store (or was dropped)."""
        entry = self._queue[response_id]
        self._inflight = response_id
        try:
            record = decode_record(entry.blob, self.backend)
            await self._call(lambda: self.store.save(record), timeout)
        except Exception as exc:
            entry.attempts += 1
            self.metrics.store_retries.labels("retried").inc()
            if isinstance(exc, StoreError) and not exc.retryable:
                self._remove(response_id)
                self._give_up(response_id, entry.owner, "the store refused it", "refused")
                return True
            self._failed(exc)
            now = self.clock()
            if now - self._logged_at >= LOG_EVERY:
                self._logged_at = now
                log.warning("store.retry_failed", error=str(exc), queued=len(self._queue), attempts=entry.attempts)
            return False
        finally:
            self._inflight = None
        self._remove(response_id)
        self._lost.pop(response_id, None)  # (dropped from a full queue while this retry was in flight: saved after all)
        self.metrics.store_retries.labels("saved").inc()
        self._ok()
        if response_id in self._deleted:
            self._deleted.discard(response_id)
            with contextlib.suppress(Exception):
                await self.delete(response_id)
        return True

    async def drain(self) -> None:
        """At shutdown: stop the loop, give the queue up to ``DRAIN_SECONDS``, count the rest as lost."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._probe is not None:
            await asyncio.gather(self._probe, return_exceptions=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_SECONDS
        delay = BACKOFF_FIRST
        failures = 0
        while self._queue and (left := deadline - loop.time()) > 0 and failures < DRAIN_ATTEMPTS:
            if await self._attempt(next(iter(self._queue)), min(self.timeout, left)):
                failures = 0
                continue
            failures += 1
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, BACKOFF_MAX)
        if self._queue:
            log.error("store.retry_abandoned", backend=self.backend, queued=len(self._queue))
            for rid in list(self._queue):
                entry = self._remove(rid)
                self._give_up(
                    rid, entry.owner if entry else None, "crossfeed stopped before the store took it", "shutdown"
                )

    # -- readiness -------------------------------------------------------------------------------

    async def readiness(self) -> tuple[bool, str]:
        """(ready, the store's state in words) for /readyz."""
        parts: list[str] = []
        try:
            await self._call(self.store.ping, min(self.timeout, READY_TIMEOUT))
        except Exception as exc:
            reason = short_reason(exc)
            why = "" if reason == "unreachable" else f" ({reason})"
            if not self.reached:
                return False, f"not reached since start{why}"
            parts.append(f"unreachable{why}")
        return True, self.health.words(parts, len(self._queue), self._lost_total)
