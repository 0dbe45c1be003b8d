"""The ``memory`` backend: per process, lost on restart, always bounded. For tests and
throwaway single-process use; never the default.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store.base import (
    Clock,
    ResponseStore,
    StoredResponse,
    StoreError,
    StoreStats,
    decode_record,
    encode_record,
    item_ids,
    owner_tag,
)

MEMORY_DEFAULT_MAX_COUNT = 10_000


@dataclass(slots=True)
class _Run:
    """A background run's log, state, lease and cancel flag (kept until ``expires_at``)."""

    expires_at: float
    seqs: list[int] = field(default_factory=list)
    events: list[bytes] = field(default_factory=list)
    state: bytes | None = None
    lease: tuple[str, float] | None = None
    cancel: bool = False
    grew: asyncio.Event | None = None  # set (and replaced) when events are appended


class MemoryStore(ResponseStore):
    """Bounded per-process store. Records are kept serialised, so callers never share objects."""

    backend = "memory"
    SWEEP_BATCH = 500

    def __init__(self, config: StoreConfig, *, clock: Clock = time.time) -> None:
        self._ttl = config.ttl_seconds
        self._max_count = config.max_count or MEMORY_DEFAULT_MAX_COUNT
        self._max_bytes = config.max_bytes
        self._interval = config.sweep_interval_seconds
        self._clock = clock
        self._counters: dict[str, tuple[float, int]] = {}  # name -> (window start, total)
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # oldest saved first
        # (owner tag, item id) -> the ids of the records holding it, oldest saved first; and
        # each record's index keys, so that dropping a record drops its index entries.
        self._holders: dict[tuple[str, str], dict[str, None]] = {}
        self._keys_of: dict[str, list[tuple[str, str]]] = {}
        self._bytes = 0
        self._evicted = 0
        self._expired = 0
        self._next_sweep = 0.0
        self._closed = False
        self._runs: OrderedDict[str, _Run] = OrderedDict()  # background runs, oldest written first

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed", backend=self.backend)

    def _drop(self, response_id: str) -> tuple[float, bytes] | None:
        entry = self._data.pop(response_id, None)
        if entry is not None:
            self._bytes -= len(entry[1])
        for key in self._keys_of.pop(response_id, ()):
            holders = self._holders.get(key)
            if holders is not None:
                holders.pop(response_id, None)
                if not holders:
                    del self._holders[key]
        return entry

    async def save(self, record: StoredResponse) -> None:
        self._check_open()
        blob = encode_record(record, self.backend)
        if self._max_bytes is not None and len(blob) > self._max_bytes:
            raise StoreError(
                f"record {record.id} is {len(blob)} bytes, more than max_bytes", backend=self.backend, retryable=False
            )
        now = self._clock()
        self._drop(record.id)
        self._data[record.id] = (now + self._ttl, blob)
        self._bytes += len(blob)
        tag = owner_tag(record.owner)
        keys = [(tag, item_id) for item_id in item_ids(record)]
        self._keys_of[record.id] = keys
        for key in keys:
            self._holders.setdefault(key, {})[record.id] = None
        while len(self._data) > self._max_count or (self._max_bytes is not None and self._bytes > self._max_bytes):
            self._drop(next(iter(self._data)))
            self._evicted += 1
        if now >= self._next_sweep:
            self._sweep(now)

    def _sweep(self, now: float) -> int:
        # Same TTL for all records, so expiry order is save order: expired ones are at the front.
        purged = 0
        while self._data and purged < self.SWEEP_BATCH:
            rid, (expires_at, _) = next(iter(self._data.items()))
            if expires_at > now:
                break
            self._drop(rid)
            purged += 1
        self._expired += purged
        self._next_sweep = now if purged >= self.SWEEP_BATCH else now + self._interval
        return purged

    async def get(self, response_id: str) -> StoredResponse | None:
        self._check_open()
        entry = self._data.get(response_id)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            self._drop(response_id)
            self._expired += 1
            return None
        return decode_record(entry[1], self.backend)

    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        self._check_open()
        holders = self._holders.get((owner_tag(owner), item_id))
        for rid in reversed(list(holders or ())):
            record = await self.get(rid)  # an expired one is purged there, with its index entries
            if record is not None:
                return record
        return None

    async def delete(self, response_id: str) -> bool:
        self._check_open()
        entry = self._drop(response_id)
        return entry is not None and entry[0] > self._clock()

    async def count(self, name: str, amount: int, window: int) -> tuple[int, float]:
        self._check_open()
        now = self._clock()
        start = now - now % window
        began, total = self._counters.get(name, (start, 0))
        total = (total if began == start else 0) + amount
        self._counters[name] = (start, total)
        if len(self._counters) > 100_000:  # old windows' counters go
            self._counters = {k: v for k, v in self._counters.items() if v[0] == start}
        return total, start + window - now

    async def sweep(self) -> int:
        self._check_open()
        return self._sweep(self._clock())

    async def stats(self) -> StoreStats:
        self._check_open()
        return StoreStats(self.backend, len(self._data), self._bytes, self._evicted, self._expired)

    async def ping(self) -> None:
        self._check_open()

    async def probe_write(self) -> None:
        self._check_open()

    async def close(self) -> None:
        self._closed = True
        self._data.clear()
        self._holders.clear()
        self._keys_of.clear()
        self._bytes = 0
        for run in self._runs.values():  # (a reader waiting on a log wakes to the closed store)
            if run.grew is not None:
                run.grew.set()
        self._runs.clear()
        self.__dict__.pop("_kv", None)

    # -- background runs (store/base.py) -----------------------------------------------------

    def _run(self, run_id: str, *, make: bool) -> _Run | None:
        now = self._clock()
        run = self._runs.get(run_id)
        if run is not None and run.expires_at <= now:
            del self._runs[run_id]
            run = None
        if run is None and make:
            run = self._runs[run_id] = _Run(now + self._ttl)
            while len(self._runs) > self._max_count:
                self._runs.popitem(last=False)
        elif run is not None and make:
            run.expires_at = now + self._ttl
            self._runs.move_to_end(run_id)
        return run

    async def append_events(self, run_id: str, events: list[tuple[int, bytes]]) -> None:
        self._check_open()
        run = self._run(run_id, make=True)
        assert run is not None
        for seq, doc in events:
            run.seqs.append(seq)
            run.events.append(bytes(doc))
        if run.grew is not None:
            run.grew.set()
            run.grew = None

    async def read_events(self, run_id: str, after: int, wait: float) -> list[tuple[int, bytes]]:
        self._check_open()
        run = self._run(run_id, make=False)
        if run is None:
            return []
        start = bisect.bisect_right(run.seqs, after)
        if start == len(run.seqs) and wait > 0:
            if run.grew is None:
                run.grew = asyncio.Event()
            try:
                await asyncio.wait_for(run.grew.wait(), wait)
            except TimeoutError:
                return []
            self._check_open()
            start = bisect.bisect_right(run.seqs, after)
        return list(zip(run.seqs[start:], run.events[start:], strict=True))

    async def put_run(self, run_id: str, state: dict[str, Any]) -> None:
        self._check_open()
        run = self._run(run_id, make=True)
        assert run is not None
        run.state = orjson.dumps(state)

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        self._check_open()
        run = self._run(run_id, make=False)
        if run is None or run.state is None:
            return None
        state: dict[str, Any] = orjson.loads(run.state)
        return state

    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> bool:
        self._check_open()
        run = self._run(run_id, make=True)
        assert run is not None
        now = self._clock()
        if run.lease is not None and run.lease[0] != holder and run.lease[1] > now:
            return False
        run.lease = (holder, now + ttl)
        return True

    async def lease(self, run_id: str) -> tuple[str, float] | None:
        self._check_open()
        run = self._run(run_id, make=False)
        return None if run is None else run.lease

    async def request_cancel(self, run_id: str) -> None:
        self._check_open()
        run = self._run(run_id, make=True)
        assert run is not None
        run.cancel = True

    async def cancel_requested(self, run_id: str) -> bool:
        self._check_open()
        run = self._run(run_id, make=False)
        return run is not None and run.cancel

    # -- the key-value map (base.py ``remember``/``recall``) ----------------------------------------

    KV_MAX = 100_000  # entries kept at most; past it the expired go, then the oldest

    async def remember(self, name: str, value: str, ttl: int) -> None:
        self._check_open()
        kv: dict[str, tuple[float, str]] = self.__dict__.setdefault("_kv", {})
        kv.pop(name, None)
        kv[name] = (self._clock() + ttl, value)
        if len(kv) > self.KV_MAX:
            now = self._clock()
            for key in [k for k, (end, _) in kv.items() if end <= now] or list(kv)[: len(kv) - self.KV_MAX]:
                del kv[key]

    async def recall(self, name: str) -> str | None:
        self._check_open()
        kv: dict[str, tuple[float, str]] = self.__dict__.get("_kv", {})
        found = kv.get(name)
        if found is None or found[0] <= self._clock():
            return None
        return found[1]
