"""The SQLite backend's part for background runs (store/base.py): a mixin of ``SQLiteStore``
(sqlite.py), which gives it its worker thread (``_run``), its connection and its clock.

Two tables of their own, made on first use with CREATE ... IF NOT EXISTS (the schema version is
unchanged: an older crossfeed opening the file ignores them). A reader waiting for events polls
every ``POLL_SECONDS``: another process's commit has no other signal.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from crossfeed.proxy.state.store.base import Clock, StoreError

T = TypeVar("T")


class SQLiteRuns:
    """Run log, state, lease and cancel flag on the store's file."""

    backend: str
    SWEEP_BATCH: int
    _ttl: int
    _clock: Clock
    _runs_ready = False

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[..., T], *args: object) -> T: ...

        def _connect(self) -> sqlite3.Connection: ...

    POLL_SECONDS = 0.05
    _RUNS_SCHEMA = """
    CREATE TABLE IF NOT EXISTS run_events (
        run_id     TEXT    NOT NULL,
        seq        INTEGER NOT NULL,      -- the event's sequence_number
        expires_at REAL    NOT NULL,
        data       BLOB    NOT NULL,      -- the event, one JSON document
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS run_events_expires_at ON run_events(expires_at);
    CREATE TABLE IF NOT EXISTS runs (
        run_id      TEXT    PRIMARY KEY,
        expires_at  REAL    NOT NULL,
        state       BLOB,                 -- the run's state record, JSON
        holder      TEXT,                 -- the lease: who runs it, until when
        lease_until REAL,
        cancel      INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS runs_expires_at ON runs(expires_at);
    """

    def _runs_conn(self) -> sqlite3.Connection:
        conn = self._connect()
        if not getattr(self, "_runs_ready", False):
            conn.executescript(self._RUNS_SCHEMA)
            self._runs_ready = True
        return conn

    def _touch_run_sync(self, run_id: str, now: float) -> sqlite3.Connection:
        conn = self._runs_conn()
        conn.execute(
            "INSERT INTO runs (run_id, expires_at) VALUES (?, ?) ON CONFLICT(run_id) DO UPDATE SET "
            "expires_at = excluded.expires_at",
            (run_id, now + self._ttl),
        )
        return conn

    def _append_events_sync(self, run_id: str, events: list[tuple[int, bytes]], now: float) -> None:
        conn = self._runs_conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._touch_run_sync(run_id, now)
            conn.executemany(
                "INSERT OR REPLACE INTO run_events (run_id, seq, expires_at, data) VALUES (?, ?, ?, ?)",
                [(run_id, seq, now + self._ttl, doc) for seq, doc in events],
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _events_after_sync(self, run_id: str, after: int, now: float) -> list[tuple[int, bytes]]:
        rows = (
            self._runs_conn()
            .execute(
                "SELECT seq, data FROM run_events WHERE run_id = ? AND seq > ? AND expires_at > ? ORDER BY seq",
                (run_id, after, now),
            )
            .fetchall()
        )
        return [(int(seq), bytes(data)) for seq, data in rows]

    def _put_run_sync(self, run_id: str, blob: bytes, now: float) -> None:
        conn = self._touch_run_sync(run_id, now)
        conn.execute("UPDATE runs SET state = ? WHERE run_id = ?", (blob, run_id))
        # expired runs go a bounded batch at a time, with the runs' own writes
        conn.execute(
            "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM runs WHERE expires_at <= ? LIMIT ?)",
            (now, self.SWEEP_BATCH),
        )
        conn.execute(
            "DELETE FROM run_events WHERE (run_id, seq) IN "
            "(SELECT run_id, seq FROM run_events WHERE expires_at <= ? LIMIT ?)",
            (now, self.SWEEP_BATCH),
        )

    def _run_row_sync(self, run_id: str, now: float) -> tuple[Any, ...] | None:
        row = (
            self._runs_conn()
            .execute(
                "SELECT state, holder, lease_until, cancel FROM runs WHERE run_id = ? AND expires_at > ?", (run_id, now)
            )
            .fetchone()
        )
        return None if row is None else tuple(row)

    def _renew_lease_sync(self, run_id: str, holder: str, ttl: float, now: float) -> bool:
        conn = self._touch_run_sync(run_id, now)
        cur = conn.execute(
            "UPDATE runs SET holder = ?, lease_until = ? WHERE run_id = ? AND "
            "(holder IS NULL OR holder = ? OR lease_until <= ?)",
            (holder, now + ttl, run_id, holder, now),
        )
        return cur.rowcount == 1

    def _cancel_sync(self, run_id: str, now: float) -> None:
        self._touch_run_sync(run_id, now).execute("UPDATE runs SET cancel = 1 WHERE run_id = ?", (run_id,))

    async def append_events(self, run_id: str, events: list[tuple[int, bytes]]) -> None:
        await self._run(self._append_events_sync, run_id, events, self._clock())

    async def read_events(self, run_id: str, after: int, wait: float) -> list[tuple[int, bytes]]:
        deadline = time.monotonic() + wait
        while True:
            events = await self._run(self._events_after_sync, run_id, after, self._clock())
            if events or time.monotonic() >= deadline:
                return events
            await asyncio.sleep(min(self.POLL_SECONDS, max(deadline - time.monotonic(), 0)))

    async def put_run(self, run_id: str, state: dict[str, Any]) -> None:
        try:
            blob = orjson.dumps(state)
        except (orjson.JSONEncodeError, TypeError) as exc:
            raise StoreError(f"run {run_id}: {exc}", backend=self.backend, retryable=False) from exc
        await self._run(self._put_run_sync, run_id, blob, self._clock())

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        row = await self._run(self._run_row_sync, run_id, self._clock())
        if row is None or row[0] is None:
            return None
        try:
            state: dict[str, Any] = orjson.loads(row[0])
        except orjson.JSONDecodeError as exc:
            raise StoreError(f"corrupt run state {run_id}: {exc}", backend=self.backend) from exc
        return state

    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> bool:
        return await self._run(self._renew_lease_sync, run_id, holder, ttl, self._clock())

    async def lease(self, run_id: str) -> tuple[str, float] | None:
        row = await self._run(self._run_row_sync, run_id, self._clock())
        return None if row is None or row[1] is None else (str(row[1]), float(row[2]))

    async def request_cancel(self, run_id: str) -> None:
        await self._run(self._cancel_sync, run_id, self._clock())

    async def cancel_requested(self, run_id: str) -> bool:
        row = await self._run(self._run_row_sync, run_id, self._clock())
        return row is not None and bool(row[3])
