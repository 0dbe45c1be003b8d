"""Response store: where crossfeed keeps Responses so that ``previous_response_id`` works.

One record is one stored response (``StoredResponse``). Three backends implement
``ResponseStore``:

- ``sqlite`` (default): one file, ``<data_dir>/responses.sqlite3``, WAL mode. All SQLite work runs
  on one worker thread that owns the connection, so the event loop never blocks on disk.
- ``redis``: for several crossfeed replicas sharing conversations. Records expire with Redis
  ``EXPIRE``; ``max_count`` is enforced atomically by a Lua script over a sorted-set index.
- ``memory``: per process, lost on restart, always bounded (``max_count`` defaults to 10 000).
  For tests and throwaway single-process use; never the default.

Retention: every record lives ``ttl_seconds`` from the moment it is saved (default 30 days, the
OpenAI API's retention for stored responses); afterwards ``get`` answers ``None`` and the record is
purged lazily (on ``get``/``delete``) and by a sweep amortised over ``save`` calls, with bounded
work per call. Optionally ``max_count`` (all backends) and ``max_bytes`` (sqlite, memory: the sum of
the stored JSON sizes) evict the oldest-saved records first; re-saving an id makes it the newest.

Items by id: every item a record holds (its response's output items and its input items) is
indexed under (owner, item id) when the record is saved, so ``get_by_item`` (what an input
``item_reference`` resolves with) is one indexed read, never a scan. The index lives and dies
with the records: a record that expires, is evicted, deleted or re-saved leaves it in the same
operation (redis: see proxy/state/store/redis.py). An item several records hold (a conversation's
history is in every later record) resolves from the newest live one.

Every backend failure is raised as ``StoreError`` so the proxy can log and count it without
breaking the client's stream; a failed save is kept and retried by proxy/state/store_retry.py
(``StoreError.retryable`` says whether a retry can help).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from crossfeed.proxy.runtime.store_config import StoreConfig

__all__ = [
    "Clock",
    "MemoryStore",
    "ResponseStore",
    "StoreError",
    "StoreStats",
    "StoredResponse",
    "decode_record",
    "encode_record",
    "item_ids",
    "open_store",
    "owner_tag",
    "stored_item",
]

Clock = Callable[[], float]
"""Seconds since the epoch (``time.time``); injectable so tests can expire records instantly."""

MEMORY_DEFAULT_MAX_COUNT = 10_000


class StoreError(Exception):
    """Any failure of the store (I/O, backend down, corrupt data, unserialisable record).

    ``retryable``: false when the same call can never succeed (a record that is not
    serialisable, or larger than ``max_bytes``); true for an outage (the backend down, the disk
    full or read-only, a timeout), which a later retry may get past."""

    def __init__(self, message: str, *, backend: str = "", retryable: bool = True) -> None:
        super().__init__(message)
        self.backend = backend
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response.

    ``response``: the full Response object as sent in the terminal event (or non-streaming body).
    ``input_items``: the complete resolved input that produced it (the previous chain's input and
    output, then this request's input); every item carries a string ``id``.
    """

    id: str
    created_at: int
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    previous_response_id: str | None = None
    owner: str | None = None  # the name of the inbound key that created it (never the key)


@dataclass(frozen=True, slots=True)
class StoreStats:
    backend: str
    count: int | None  # records held (redis: index size, may include just-expired ids)
    bytes: int | None  # stored JSON bytes (None for redis)
    evicted: int  # evicted by max_count / max_bytes, by this instance
    expired: int  # purged after their TTL, by this instance


def owner_tag(owner: str | None) -> str:
    """The owner as the item index spells it: ``""`` for no owner (no inbound keys), else the
    name prefixed by its length, so that no (owner, item id) pair can spell another's key."""
    return "" if owner is None else f"{len(owner)}={owner}"


def item_ids(record: StoredResponse) -> list[str]:
    """The ids of the items a record holds (its output items, then its input items), each once:
    what the item index keeps for it."""
    output = record.response.get("output")
    seen: dict[str, None] = {}
    for item in [*(output if isinstance(output, list) else ()), *record.input_items]:
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
            seen[item["id"]] = None
    return list(seen)


def stored_item(record: StoredResponse | None, item_id: str) -> dict[str, Any] | None:
    """The item with ``item_id`` a record holds (an output item first, then an input item)."""
    if record is None:
        return None
    output = record.response.get("output")
    for item in [*(output if isinstance(output, list) else ()), *record.input_items]:
        if isinstance(item, dict) and item.get("id") == item_id:
            return item
    return None


def encode_record(record: StoredResponse, backend: str = "") -> bytes:
    """Validate and serialise a record (raises ``StoreError``, never anything else)."""
    if not isinstance(record, StoredResponse):
        raise StoreError(f"expected StoredResponse, got {type(record).__name__}", backend=backend, retryable=False)
    if not isinstance(record.id, str) or not record.id:
        raise StoreError("record id must be a non-empty string", backend=backend, retryable=False)
    if not isinstance(record.response, dict) or not isinstance(record.input_items, list):
        raise StoreError("response must be a dict and input_items a list", backend=backend, retryable=False)
    for i, item in enumerate(record.input_items):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
            raise StoreError(f"input_items[{i}] has no string id", backend=backend, retryable=False)
    try:
        return orjson.dumps(
            {
                "id": record.id,
                "created_at": record.created_at,
                "previous_response_id": record.previous_response_id,
                "owner": record.owner,
                "response": record.response,
                "input_items": record.input_items,
            }
        )
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise StoreError(
            f"record {record.id} is not JSON-serialisable: {exc}", backend=backend, retryable=False
        ) from exc


def decode_record(blob: bytes | str, backend: str = "") -> StoredResponse:
    try:
        d = orjson.loads(blob)
        return StoredResponse(
            id=d["id"],
            created_at=d["created_at"],
            response=d["response"],
            input_items=d["input_items"],
            previous_response_id=d.get("previous_response_id"),
            owner=d.get("owner"),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise StoreError(f"corrupt stored record: {exc}", backend=backend) from exc


class ResponseStore(ABC):
    """Async interface of every backend. All methods raise only ``StoreError``."""

    backend: str = ""

    @abstractmethod
    async def save(self, record: StoredResponse) -> None:
        """Insert or replace the record with ``record.id``; it expires ``ttl_seconds`` from now."""

    @abstractmethod
    async def get(self, response_id: str) -> StoredResponse | None:
        """The record, or None if unknown, deleted, evicted or expired."""

    @abstractmethod
    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        """The newest live record of ``owner`` holding an item (output or input) with ``item_id``,
        or None. Records of another owner are never returned (the index is keyed by owner)."""

    @abstractmethod
    async def delete(self, response_id: str) -> bool:
        """Remove the record; True if a live (unexpired) record was removed."""

    @abstractmethod
    async def sweep(self) -> int:
        """Purge one bounded batch of expired records now; returns how many were purged."""

    @abstractmethod
    async def stats(self) -> StoreStats: ...

    @abstractmethod
    async def ping(self) -> None:
        """Open / reach the backend now (startup and readiness checks); raises ``StoreError``."""

    async def probe_write(self) -> None:
        """A small write (about one record's size) that fails when saves fail (the backend down,
        its disk full or read-only), leaving no stored response behind: how a process that has
        not saved lately learns whether the store takes writes (proxy/state/store_retry.py). Raises
        ``StoreError``. This default only pings."""
        await self.ping()

    @abstractmethod
    async def close(self) -> None:
        """Release resources; later calls raise ``StoreError``. Idempotent."""

    async def __aenter__(self) -> ResponseStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


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


def open_store(config: StoreConfig, *, clock: Clock = time.time, env: Mapping[str, str] | None = None) -> ResponseStore:
    """Build the configured backend. Cheap and synchronous: nothing is opened or created until the
    first call (use ``await store.ping()`` to fail fast at startup). Raises ``StoreError`` when the
    configuration cannot work (redis backend without a URL, malformed URL)."""
    if config.backend == "memory":
        return MemoryStore(config, clock=clock)
    if config.backend == "sqlite":
        from crossfeed.proxy.state.store.sqlite import SQLiteStore

        return SQLiteStore(config, clock=clock, data_dir=config.resolved_data_dir(env))
    from crossfeed.proxy.state.store.redis import RedisStore

    url = config.resolved_redis_url(env)
    if not url:
        raise StoreError(
            f"store backend is redis but neither [store] redis_url nor ${config.redis_url_env} is set", backend="redis"
        )
    return RedisStore(config, url, clock=clock)
