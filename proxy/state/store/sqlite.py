"""SQLite backend: one file, WAL mode, one worker thread owning the connection.

Every operation (including JSON encoding/decoding) is submitted to a single-thread executor, so
the event loop never waits on disk and the connection is never shared between threads; requests
are serialised in submission order. Record count and byte totals are kept exact by triggers in a
one-row ``totals`` table, so limits cost O(1) to check. ``auto_vacuum=INCREMENTAL`` lets the
sweep hand freed pages back to the filesystem.

The ``items`` table indexes every item a record holds by (owner, item id), pointing at the
record's ``seq``; a trigger deletes a record's index rows with the record however it goes
(delete, expiry, eviction, re-save). The index is not counted in ``max_bytes`` (a few dozen bytes
per item). A file written before the index existed gets it on open; its older records are found
by response id only.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

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
from crossfeed.proxy.state.store.failure_mark import FailureMark
from crossfeed.proxy.state.store.sqlite_runs import SQLiteRuns

T = TypeVar("T")

FILENAME = "responses.sqlite3"
SCHEMA_VERSION = 1
PROBE_ID = "\x00crossfeed-write-probe"  # never a response id (they are resp_...)
PROBE_BYTES = 16384
LOW_SPACE_BYTES = 1 << 20  # a probe on a filesystem with less free than this reports the disk full
OPEN_RETRY_SECONDS = 15.0  # how long opening waits out another process setting up the same file


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """True for the transient lock errors another connection causes (SQLITE_BUSY/LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    seq        INTEGER PRIMARY KEY,   -- save order: oldest first for eviction
    id         TEXT    NOT NULL UNIQUE,
    expires_at REAL    NOT NULL,
    size       INTEGER NOT NULL,
    data       BLOB    NOT NULL       -- orjson of the whole record
);
CREATE INDEX IF NOT EXISTS responses_expires_at ON responses(expires_at);
CREATE TABLE IF NOT EXISTS totals (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    count INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS responses_count_ins AFTER INSERT ON responses BEGIN
    UPDATE totals SET count = count + 1, bytes = bytes + NEW.size WHERE one = 1;
END;
CREATE TRIGGER IF NOT EXISTS responses_count_del AFTER DELETE ON responses BEGIN
    UPDATE totals SET count = count - 1, bytes = bytes - OLD.size WHERE one = 1;
END;
CREATE TABLE IF NOT EXISTS items (
    owner   TEXT    NOT NULL,         -- store/base.py's owner_tag of the record's owner
    item_id TEXT    NOT NULL,
    seq     INTEGER NOT NULL,         -- the record holding it (responses.seq)
    PRIMARY KEY (owner, item_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS items_seq ON items(seq);
CREATE TABLE IF NOT EXISTS counters (  -- the per-key rate limits' windows (store/base.py count)
    name  TEXT    PRIMARY KEY,
    start REAL    NOT NULL,
    total INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS responses_items_del AFTER DELETE ON responses BEGIN
    DELETE FROM items WHERE seq = OLD.seq;
END;
"""


def writability_problem(data_dir: Path, path: Path) -> str | None:
    """Why this process cannot create or write the store file ``path`` in ``data_dir`` (the
    directory or its nearest existing ancestor is a file, cannot be entered, is not writable, or is
    on a read-only filesystem; the file is not writable), or None when nothing visible stops it.
    Creates nothing, raises nothing. As root, only a file in the way or a read-only filesystem
    stops it (permission bits do not)."""

    def exists(p: Path) -> bool | None:  # None: its directory cannot be entered
        try:
            os.lstat(p)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return None

    def read_only(p: Path) -> bool:
        try:
            return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
        except (OSError, AttributeError):
            return False

    existing = data_dir
    while (found := exists(existing)) is False and existing != existing.parent:
        existing = existing.parent
    if found is None:
        return f"{existing.parent} cannot be entered (no search permission)"
    made = "" if existing == data_dir else f"{data_dir} cannot be made: "
    if not existing.is_dir():
        return f"{made}{existing} is a file, not a directory"
    if read_only(existing):
        return f"{made}{existing} is on a read-only filesystem"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{made}the directory {existing} is not writable"
    if existing == data_dir and exists(path):
        if path.is_dir():
            return f"{path} is a directory"
        if not os.access(path, os.R_OK | os.W_OK):
            return f"{path} is not writable"
    return None


class SQLiteStore(SQLiteRuns, ResponseStore):
    backend = "sqlite"
    SWEEP_BATCH = 500  # max expired rows purged per sweep
    EVICT_BATCH = 1000  # max rows evicted by max_count / max_bytes per save
    VACUUM_PAGES = 256  # max free pages returned to the filesystem per sweep

    def __init__(self, config: StoreConfig, *, clock: Clock = time.time, data_dir: Path) -> None:
        self._dir = data_dir
        self.path = data_dir / FILENAME
        self._ttl = config.ttl_seconds
        self._max_count = config.max_count
        self._max_bytes = config.max_bytes
        self._interval = config.sweep_interval_seconds
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crossfeed-sqlite")
        self._conn: sqlite3.Connection | None = None  # touched only by the worker thread
        self._failures = FailureMark(data_dir / (FILENAME + "-failed"))
        self._closed = False
        self._next_sweep = 0.0  # first save sweeps: catches up after downtime
        self._evicted = 0
        self._expired = 0

    # -- plumbing --------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise StoreError("store is closed", backend=self.backend)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except StoreError:
            raise
        except (sqlite3.Error, OSError, RuntimeError) as exc:
            # RuntimeError: executor shut down under us by a concurrent close().
            raise StoreError(f"sqlite store {self.path}: {exc}", backend=self.backend) from exc

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        # Several workers or replicas opening one new file at once: switching it to WAL and
        # creating the schema take a lock SQLite's busy handler does not always wait for (a
        # connection recovering or converting the journal answers SQLITE_BUSY at once). Setup
        # writes nothing twice, so it is simply tried again for a bounded time.
        deadline = time.monotonic() + OPEN_RETRY_SECONDS
        while True:
            try:
                self._conn = self._open_once()
                return self._conn
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise self._unwritable(exc) from exc
            time.sleep(0.05)

    def _open_once(self) -> sqlite3.Connection:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        except sqlite3.OperationalError:
            raise
        except (OSError, sqlite3.Error) as exc:
            raise self._unwritable(exc) from exc
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this crossfeed ({SCHEMA_VERSION})",
                    backend=self.backend,
                )
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # effective only on a new file
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot enable WAL on {self.path} (got {mode})", backend=self.backend)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
            if version != SCHEMA_VERSION:  # written once: opening an existing file writes nothing (a full disk)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.OperationalError:
            conn.close()
            raise
        except (OSError, sqlite3.Error) as exc:
            conn.close()
            raise self._unwritable(exc) from exc
        except BaseException:
            conn.close()
            raise
        self._failures.open()
        return conn

    def _unwritable(self, exc: BaseException) -> BaseException:
        """The error to raise for a failure to open or set up the file: when the file or its
        directory cannot be created or written by this process (an arbitrary container uid, a
        read-only root filesystem without a volume), one plain StoreError that says so and how
        to fix it; anything else unchanged (sqlite's own message)."""
        message = self.unwritable_message(f" ({exc})")
        return exc if message is None else StoreError(message, backend=self.backend)

    def unwritable_message(self, detail: str = "") -> str | None:
        """The plain message when this process cannot create or write the store file (None when
        nothing visible stops it). Opens and creates nothing: ``check-config`` asks it too."""
        problem = writability_problem(self._dir, self.path)
        if problem is None:
            return None
        uid = os.geteuid() if hasattr(os, "geteuid") else None
        who = f"this process (uid {uid}, gid {os.getegid()})" if uid is not None else "this process"
        return (
            f"the SQLite response store {self.path} cannot be created or written by {who}: "
            f"{problem}{detail}. Fix: mount a writable volume at {self._dir}, or set "
            "CROSSFEED_DATA_DIR (or [store] data_dir) to a directory this user can write, or use "
            'another backend: [store] backend = "memory" (CROSSFEED_STORE__BACKEND=memory; '
            'stored responses are lost on restart) or "redis"'
        )

    # -- worker-thread bodies --------------------------------------------------------------

    def _save_sync(self, record: StoredResponse, now: float) -> None:
        blob = encode_record(record, self.backend)
        if self._max_bytes is not None and len(blob) > self._max_bytes:
            raise StoreError(
                f"record {record.id} is {len(blob)} bytes, more than max_bytes", backend=self.backend, retryable=False
            )
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE FROM responses WHERE id = ?", (record.id,))
            cur = conn.execute(
                "INSERT INTO responses (id, expires_at, size, data) VALUES (?, ?, ?, ?)",
                (record.id, now + self._ttl, len(blob), blob),
            )
            tag = owner_tag(record.owner)
            conn.executemany(
                "INSERT OR IGNORE INTO items (owner, item_id, seq) VALUES (?, ?, ?)",
                [(tag, item_id, cur.lastrowid) for item_id in item_ids(record)],
            )
            self._evict(conn, cur.lastrowid)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if now >= self._next_sweep:
            self._sweep_sync(now)

    def _evict(self, conn: sqlite3.Connection, newest_seq: int | None) -> None:
        count, total = conn.execute("SELECT count, bytes FROM totals").fetchone()
        if self._max_count is not None and count > self._max_count:
            # The new row has the highest seq and count - max_count < count: never evicted here.
            n = min(count - self._max_count, self.EVICT_BATCH)
            cur = conn.execute(
                "DELETE FROM responses WHERE seq IN (SELECT seq FROM responses ORDER BY seq LIMIT ?)", (n,)
            )
            self._evicted += cur.rowcount
            count, total = conn.execute("SELECT count, bytes FROM totals").fetchone()
        if self._max_bytes is not None and total > self._max_bytes:
            excess, cutoff, n = total - self._max_bytes, None, 0
            rows = conn.execute(
                "SELECT seq, size FROM responses WHERE seq != ? ORDER BY seq LIMIT ?", (newest_seq, self.EVICT_BATCH)
            )
            for seq, size in rows:
                cutoff, n, excess = seq, n + 1, excess - size
                if excess <= 0:
                    break
            if cutoff is not None:
                conn.execute("DELETE FROM responses WHERE seq <= ?", (cutoff,))
                self._evicted += n

    def _count_sync(self, name: str, amount: int, window: int, now: float) -> tuple[int, float]:
        start = now - now % window
        conn = self._connect()
        row = conn.execute(
            "INSERT INTO counters (name, start, total) VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
            "total = CASE WHEN counters.start = excluded.start THEN counters.total + excluded.total "
            "ELSE excluded.total END, start = excluded.start RETURNING total",
            (name, start, amount),
        ).fetchone()
        return int(row[0]), start + window - now

    def _sweep_sync(self, now: float) -> int:
        conn = self._connect()
        cur = conn.execute(
            "DELETE FROM responses WHERE seq IN (SELECT seq FROM responses WHERE expires_at <= ? LIMIT ?)",
            (now, self.SWEEP_BATCH),
        )
        purged = max(cur.rowcount, 0)
        self._expired += purged
        self._next_sweep = now if purged >= self.SWEEP_BATCH else now + self._interval
        if purged:
            conn.execute(f"PRAGMA incremental_vacuum({self.VACUUM_PAGES})").fetchall()
        return purged

    def _get_sync(self, response_id: str, now: float) -> StoredResponse | None:
        conn = self._connect()
        row = conn.execute("SELECT expires_at, data FROM responses WHERE id = ?", (response_id,)).fetchone()
        if row is None:
            return None
        if row[0] <= now:
            cur = conn.execute("DELETE FROM responses WHERE id = ? AND expires_at <= ?", (response_id, now))
            self._expired += max(cur.rowcount, 0)
            return None
        return decode_record(row[1], self.backend)

    def _get_by_item_sync(self, item_id: str, owner: str | None, now: float) -> StoredResponse | None:
        row = (
            self._connect()
            .execute(
                "SELECT r.data FROM items i JOIN responses r ON r.seq = i.seq "
                "WHERE i.owner = ? AND i.item_id = ? AND r.expires_at > ? ORDER BY i.seq DESC LIMIT 1",
                (owner_tag(owner), item_id, now),
            )
            .fetchone()
        )
        return None if row is None else decode_record(row[0], self.backend)

    def _delete_sync(self, response_id: str, now: float) -> bool:
        conn = self._connect()
        row = conn.execute("DELETE FROM responses WHERE id = ? RETURNING expires_at", (response_id,)).fetchall()
        return bool(row) and row[0][0] > now

    def _stats_sync(self) -> StoreStats:
        count, total = self._connect().execute("SELECT count, bytes FROM totals").fetchone()
        return StoreStats(self.backend, count, total, self._evicted, self._expired)

    def _ping_sync(self) -> None:
        self._connect().execute("SELECT 1").fetchone()

    def _probe_write_sync(self) -> None:
        # A row of a record's size, inserted and deleted in one committed transaction: its pages
        # reach the WAL, so a full disk or a read-only file fails it as it fails a save (a write of
        # one page can still fit in the WAL's slack). The row never shows (expired, then gone).
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT OR REPLACE INTO responses (id, expires_at, size, data) VALUES (?, 0, ?, zeroblob(?))",
                (PROBE_ID, PROBE_BYTES, PROBE_BYTES),
            )
            conn.execute("DELETE FROM responses WHERE id = ?", (PROBE_ID,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        # The WAL is reused from its start after each checkpoint, so on a full disk a probe (and
        # a small save) can still fit in it while another process's bigger save fails: the free
        # space itself says whether saves are failing now.
        stat = os.statvfs(self.path.parent)
        free = stat.f_bavail * stat.f_frsize
        if free < LOW_SPACE_BYTES:
            raise sqlite3.OperationalError(f"database or disk is full ({free} bytes free in {self.path.parent})")

    def _close_sync(self) -> None:
        self._failures.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def note_failed_save(self, at: float) -> None:
        self._failures.note(at)

    def failed_save_noted(self) -> float | None:
        return self._failures.last()

    # -- interface -------------------------------------------------------------------------

    async def save(self, record: StoredResponse) -> None:
        await self._run(self._save_sync, record, self._clock())

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self._run(self._get_sync, response_id, self._clock())

    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        return await self._run(self._get_by_item_sync, item_id, owner, self._clock())

    async def delete(self, response_id: str) -> bool:
        return await self._run(self._delete_sync, response_id, self._clock())

    async def sweep(self) -> int:
        return await self._run(self._sweep_sync, self._clock())

    async def count(self, name: str, amount: int, window: int) -> tuple[int, float]:
        return await self._run(self._count_sync, name, amount, window, self._clock())

    async def stats(self) -> StoreStats:
        return await self._run(self._stats_sync)

    async def ping(self) -> None:
        await self._run(self._ping_sync)

    async def probe_write(self) -> None:
        await self._run(self._probe_write_sync)

    async def close(self) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        self._closed = True  # new calls are refused; queued ones run first (FIFO worker)
        try:
            await loop.run_in_executor(self._executor, self._close_sync)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path}: {exc}", backend=self.backend) from exc
        finally:
            self._executor.shutdown(wait=False)

    # -- the key-value map (base.py ``remember``/``recall``): a table of its own, made when first used

    _KV_SCHEMA = (
        "CREATE TABLE IF NOT EXISTS kv (name TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL NOT NULL);"
        "CREATE INDEX IF NOT EXISTS kv_expiry ON kv (expires_at);"
    )
    _KV_PURGE_EVERY = 256  # writes between two purges of the expired entries

    def _kv_conn(self) -> sqlite3.Connection:
        conn = self._connect()
        if not self.__dict__.get("_kv_ready"):
            conn.executescript(self._KV_SCHEMA)
            self.__dict__["_kv_ready"] = True
            self.__dict__["_kv_writes"] = 0
        return conn

    def _remember_sync(self, name: str, value: str, ttl: int, now: float) -> None:
        conn = self._kv_conn()
        conn.execute(
            "INSERT INTO kv (name, value, expires_at) VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
            "value = excluded.value, expires_at = excluded.expires_at",
            (name, value, now + ttl),
        )
        self.__dict__["_kv_writes"] += 1
        if self.__dict__["_kv_writes"] % self._KV_PURGE_EVERY == 0:
            conn.execute("DELETE FROM kv WHERE expires_at <= ?", (now,))

    def _recall_sync(self, name: str, now: float) -> str | None:
        row = self._kv_conn().execute("SELECT value FROM kv WHERE name = ? AND expires_at > ?", (name, now)).fetchone()
        return None if row is None else str(row[0])

    async def remember(self, name: str, value: str, ttl: int) -> None:
        await self._run(self._remember_sync, name, value, ttl, self._clock())

    async def recall(self, name: str) -> str | None:
        return await self._run(self._recall_sync, name, self._clock())
