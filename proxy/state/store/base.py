"""What every store backend shares: the record (``StoredResponse``), the one error
(``StoreError``), the async interface (``ResponseStore``), the record's serialisation and the
item index's keys. The backends (memory.py, sqlite.py, redis.py) import it; the package
(``__init__``) opens the configured one. The store's behaviour is described there.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

Clock = Callable[[], float]
"""Seconds since the epoch (``time.time``); injectable so tests can expire records instantly."""


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
    # On a pool: where its turn was routed ({"upstream", "key", "replica"}; proxy/state/affinity.py),
    # so the turn that continues it reads its route with its history, without a lookup of its own.
    routed: dict[str, str] | None = None


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
                **({"routed": record.routed} if record.routed is not None else {}),
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
            routed=d.get("routed"),
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

    def note_failed_save(self, at: float) -> None:
        """Let every process on this store know that a save failed at ``at`` (a time from the
        keeper's clock), where the backend can do that without a working store (SQLite: a file
        beside the database). This default does nothing."""
        return None

    def failed_save_noted(self) -> float | None:
        """The time of the last failed save any process noted (``note_failed_save``), or None."""
        return None

    async def probe_write(self) -> None:
        """A small write (about one record's size) that fails when saves fail (the backend down,
        its disk full or read-only), leaving no stored response behind: how a process that has
        not saved lately learns whether the store takes writes (proxy/state/store_retry.py). Raises
        ``StoreError``. This default only pings."""
        await self.ping()

    @abstractmethod
    async def count(self, name: str, amount: int, window: int) -> tuple[int, float]:
        """Add ``amount`` to the counter ``name`` of the current ``window`` (seconds, windows
        aligned on the epoch) and return its total after the addition and the seconds left until the
        window ends: the per-key rate limits (proxy/state/rate_limits.py), shared by every process
        and replica that shares the store."""

    @abstractmethod
    async def close(self) -> None:
        """Release resources; later calls raise ``StoreError``. Idempotent."""

    async def __aenter__(self) -> ResponseStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- background runs: the event log, the run's state, its lease and its cancel flag --------
    # (proxy/turns/background.py runs them; proxy/state/runs.py reads them.) Everything lives
    # ``ttl_seconds`` (the response retention) from its last write.

    @abstractmethod
    async def append_events(self, run_id: str, events: list[tuple[int, bytes]]) -> None:
        """Append ``(sequence_number, JSON event document)`` pairs to the run's log, in order
        (sequence numbers increase)."""

    @abstractmethod
    async def read_events(self, run_id: str, after: int, wait: float) -> list[tuple[int, bytes]]:
        """The run's events with a sequence number above ``after``, in order: at once when there
        are some, else the first that come within ``wait`` seconds (``[]`` when none came)."""

    @abstractmethod
    async def put_run(self, run_id: str, state: dict[str, Any]) -> None:
        """Write the run's state record (a JSON object), replacing the one before."""

    @abstractmethod
    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run's state record, or None (no such run, or expired)."""

    @abstractmethod
    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> bool:
        """Hold the run's lease ``ttl`` seconds from now, atomically: True when it was free,
        expired or already ``holder``'s; False (and unchanged) while another holder's is live."""

    @abstractmethod
    async def lease(self, run_id: str) -> tuple[str, float] | None:
        """The run's lease (holder, expiry in epoch seconds), or None when none was taken."""

    @abstractmethod
    async def request_cancel(self, run_id: str) -> None:
        """Raise the run's cancel flag (the process running it polls ``cancel_requested``)."""

    @abstractmethod
    async def cancel_requested(self, run_id: str) -> bool:
        """Whether the run's cancel flag is raised."""

    async def wait_cancel(self, run_id: str, wait: float) -> bool:
        """Whether the run's cancel flag is raised, waiting up to ``wait`` seconds for it to be
        (the running process calls it in a loop). This default checks the flag, then sleeps;
        Redis is told at once (a subscription to the cancels' channel)."""
        if await self.cancel_requested(run_id):
            return True
        await asyncio.sleep(wait)
        return False

    # -- a small shared key-value map: which replica of a pool serves a conversation ---------------
    # (proxy/state/affinity.py), agreed on by every process and replica that shares the store.

    @abstractmethod
    async def remember(self, name: str, value: str, ttl: int) -> None:
        """Set ``name`` to ``value`` for ``ttl`` seconds (replacing any value it had)."""

    @abstractmethod
    async def recall(self, name: str) -> str | None:
        """The value ``name`` was last set to, or None (never set, or its ``ttl`` is over)."""
