"""A SQLite store directory this process cannot create or write (a container started with an
arbitrary uid and no writable volume, a read-only root filesystem) stops ``crossfeed serve`` at
start-up with one plain line: the path, the uid, and the fixes; not sqlite's bare "unable to open
database file", and not at the first request.

The tests run as root, whom permission bits do not stop: the directory is made impossible by a
regular file in its path, or the server runs as another uid (only when this process may switch)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store.sqlite import SQLiteStore, writability_problem
from tests.support.cli import base_env, cli
from tests.support.paths import ROOT

FIXES = ("mount a writable volume at", "CROSSFEED_DATA_DIR", "[store] data_dir", 'backend = "memory"', '"redis"')


def assert_plain_refusal(r: subprocess.CompletedProcess, data_dir: Path, uid: int) -> str:
    err = r.stderr.decode()
    assert r.returncode == 2, (r.returncode, err)
    assert b"listening" not in r.stdout
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # one line, the store's own explanation
    assert err.startswith("crossfeed: the SQLite response store ")
    assert str(data_dir / "responses.sqlite3") in err
    assert f"cannot be created or written by this process (uid {uid}," in err
    for fix in FIXES:
        assert fix in err, (fix, err)
    assert f"mount a writable volume at {data_dir}," in err
    return err


def test_serve_refuses_a_data_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("a regular file where a directory should be\n")
    data_dir = tmp_path / "not-a-dir" / "crossfeed"
    env = base_env(tmp_path) | {"CROSSFEED_DATA_DIR": str(data_dir)}
    r = cli("serve", "--port", "0", env=env, timeout=30)
    err = assert_plain_refusal(r, data_dir, os.geteuid())
    assert f"{tmp_path / 'not-a-dir'} is a file, not a directory" in err
    assert not data_dir.exists()


def test_check_config_says_what_serve_would_refuse(tmp_path: Path) -> None:
    """check-config finds it too (exit 1: the file is valid, this environment is not), with the
    same message and without creating anything."""
    (tmp_path / "not-a-dir").write_text("x")
    data_dir = tmp_path / "not-a-dir" / "crossfeed"
    r = cli(
        "check-config",
        str(ROOT / "config.example.toml"),
        env=base_env(tmp_path) | {"CROSSFEED_DATA_DIR": str(data_dir)},
    )
    err = r.stderr.decode()
    assert r.returncode == 1, (r.returncode, err)
    assert "would refuse to start in this environment" in err
    assert f"the SQLite response store {data_dir / 'responses.sqlite3'} cannot be created or written" in err
    assert all(fix in err for fix in FIXES), err
    assert not data_dir.exists()


def test_serve_refuses_a_file_in_place_of_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.write_text("not a directory\n")
    r = cli("serve", "--port", "0", env=base_env(tmp_path) | {"CROSSFEED_DATA_DIR": str(data_dir)}, timeout=30)
    err = assert_plain_refusal(r, data_dir, os.geteuid())
    assert f"{data_dir} is a file, not a directory" in err


def test_the_fix_it_names_works(tmp_path: Path) -> None:
    """The memory backend it suggests (by the environment variable it names) starts at once."""
    (tmp_path / "not-a-dir").write_text("x")
    env = base_env(tmp_path) | {
        "CROSSFEED_DATA_DIR": str(tmp_path / "not-a-dir" / "crossfeed"),
        "CROSSFEED_STORE__BACKEND": "memory",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossfeed", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("crossfeed listening on http://127.0.0.1:"), line
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another uid")
def test_the_image_data_dir_seen_by_an_arbitrary_uid_and_group() -> None:
    """The image's /var/lib/crossfeed (uid 10001, group 0, 0770) as a container started with
    --user 12345:12345 sees it: it cannot even look inside. The store's message says so plainly
    (found by deploy/smoke.sh: a bare "[Errno 13] Permission denied" before). Checked in a forked
    child that drops to that uid, since the interpreter may not be executable by it."""
    top = Path(tempfile.mkdtemp(prefix="crossfeed-uid-"))  # pytest's own tmp dirs are 0700
    try:
        top.chmod(0o755)
        data_dir = top / "var-lib-crossfeed"
        data_dir.mkdir()
        os.chown(data_dir, 10001, 0)
        os.chmod(data_dir, 0o770)
        message = refusal_as(12345, 12345, data_dir)
    finally:
        shutil.rmtree(top)
    assert message.startswith(
        f"the SQLite response store {data_dir / 'responses.sqlite3'} cannot be created or "
        "written by this process (uid 12345, gid 12345): "
    ), message
    assert f"the directory {data_dir} is not writable" in message
    assert f"mount a writable volume at {data_dir}," in message


def refusal_as(uid: int, gid: int, data_dir: Path) -> str:
    """What opening the store in ``data_dir`` raises in a forked child running as uid:gid."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            store = SQLiteStore(StoreConfig(), data_dir=data_dir)
            try:
                store._connect()
                message = "opened"
            except StoreError as exc:
                message = str(exc)
            os.write(write, message.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    return message


def test_writability_problem_creates_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "b"
    assert writability_problem(data_dir, data_dir / "responses.sqlite3") is None
    assert not (tmp_path / "a").exists()
    (tmp_path / "f").write_text("x")
    nested = tmp_path / "f" / "x" / "y"
    problem = writability_problem(nested, nested / "responses.sqlite3")
    assert problem == f"{nested} cannot be made: {tmp_path / 'f'} is a file, not a directory"


def test_writability_problem_sees_a_read_only_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount (a container's root with --read-only and no volume): its flag says so,
    whoever runs. The mount is simulated: statvfs reports ST_RDONLY for tmp_path."""
    real = os.statvfs

    class ReadOnly:
        def __init__(self, path: str) -> None:
            self._real = real(path)

        def __getattr__(self, name: str) -> object:
            return getattr(self._real, name)

        @property
        def f_flag(self) -> int:
            return self._real.f_flag | os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: ReadOnly(p) if Path(p) == tmp_path else real(p))
    data_dir = tmp_path / "crossfeed-data"
    assert writability_problem(data_dir, data_dir / "responses.sqlite3") == (
        f"{data_dir} cannot be made: {tmp_path} is on a read-only filesystem"
    )
