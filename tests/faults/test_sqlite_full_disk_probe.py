"""A full disk is seen by the write probe even when the WAL has room.

SQLite reuses its write-ahead log from the start after each checkpoint, so on a disk with no
byte free a small write (the probe, and often a save) still fits in the log's old pages, while a
save that needs the log or the database to grow fails. A process whose own probe went through
then answered a follow-up for a response queued in another worker with a bare 404 instead of the
503 that names the failing saves (seen once in the two-worker disk-full chaos test). Here the
store runs on a private tmpfs, grows its WAL, the disk is filled to its last byte, and every
probe must report the disk full; without the free-space check all of them went through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.full_disk import namespace_problem
from tests.support.paths import ROOT

pytestmark = [pytest.mark.timeout(120)]

SCRIPT = r"""
import asyncio, os, sys
from pathlib import Path
from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store.sqlite import SQLiteStore
from crossfeed.proxy.state.store.base import StoreError
from tests.store.helpers import rec
from tests.support.full_disk import fill

async def main():
    data = Path(sys.argv[1])
    store = SQLiteStore(StoreConfig(), data_dir=data)
    for i in range(100):  # about 2 MB of records: the WAL grows to its checkpoint size (4 MB)
        await store.save(rec(f"resp_{i}", pad=20000))
    wal = os.path.getsize(data / "responses.sqlite3-wal")
    await store.probe_write()  # room on the disk: it goes through
    fill(data / "fill")
    outcomes = []
    for _ in range(10):
        try:
            await store.probe_write()
            outcomes.append("ok")
        except StoreError as exc:
            outcomes.append(str(exc))
    await store.close()
    print(wal)
    for line in outcomes:
        print(line)

asyncio.run(main())
"""


def test_every_probe_on_a_full_disk_fails_though_the_wal_has_room(tmp_path: Path) -> None:
    problem = namespace_problem()
    if problem is not None:
        pytest.fail(f"the full-disk probe test cannot run here: {problem}")
    data = tmp_path / "data"
    data.mkdir()
    mount = 'mount -t tmpfs -o size=32m,mode=0700 tmpfs "$0" && exec "$@"'
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(data)]
    r = subprocess.run([*cmd, sys.executable, "-c", SCRIPT, str(data)], cwd=ROOT, capture_output=True, timeout=100)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    wal, *outcomes = r.stdout.decode().splitlines()
    assert int(wal) > 1 << 20, "the WAL did not grow: the test does not reach the case it is for"
    assert len(outcomes) == 10
    for line in outcomes:
        assert line != "ok", outcomes
        assert "database or disk is full" in line and "bytes free in" in line, line
