"""Several workers or replicas opening one new SQLite store file at the same moment all come up:
the file's one-time setup (WAL, schema) answers "database is locked" at once to whoever loses the
race, and the store waits that out for a bounded time instead of refusing to start."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store import sqlite as sqlite_store
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store.sqlite import SQLiteStore


def _open_and_ping(data_dir: str, start: object) -> None:
    import asyncio

    start.wait()  # type: ignore[attr-defined]

    async def main() -> None:
        store = SQLiteStore(StoreConfig(), data_dir=Path(data_dir))
        try:
            await store.ping()
            await store.probe_write()
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_eight_processes_open_one_new_file_together(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(3):
        data_dir = tmp_path / f"round{round_}"
        start = ctx.Event()
        procs = [ctx.Process(target=_open_and_ping, args=(str(data_dir), start)) for _ in range(8)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 8, f"round {round_}"
        with sqlite3.connect(data_dir / sqlite_store.FILENAME) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_store.SCHEMA_VERSION


class _LockedAtFirst(sqlite3.Connection):
    """A connection whose setup meets another process's lock the first ``fails`` times."""

    fails = 0

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if sql.startswith("PRAGMA journal_mode") and _LockedAtFirst.fails > 0:
            _LockedAtFirst.fails -= 1
            raise sqlite3.OperationalError("database is locked")
        return super().execute(sql, parameters)


async def test_setup_that_meets_a_lock_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, factory=_LockedAtFirst, **k))
    _LockedAtFirst.fails = 3
    store = SQLiteStore(StoreConfig(), data_dir=tmp_path)
    try:
        await store.ping()
    finally:
        await store.close()
    assert _LockedAtFirst.fails == 0


async def test_a_lock_that_never_goes_is_a_plain_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, factory=_LockedAtFirst, **k))
    monkeypatch.setattr(sqlite_store, "OPEN_RETRY_SECONDS", 0.3)
    _LockedAtFirst.fails = 10**6
    store = SQLiteStore(StoreConfig(), data_dir=tmp_path)
    try:
        with pytest.raises(StoreError, match="database is locked"):
            await store.ping()
    finally:
        await store.close()
