"""The command line in a subprocess, as a person runs it: ``python -m crossfeed ...`` from the
repository with an environment of its own (none of the caller's ``CROSSFEED_*``), and ``serve``
started on port 0 and found from its listening line."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from tests.support.paths import ROOT

SECRET = "sk-this-value-must-never-be-printed"
# serve's first line on stdout: its URL (127.0.0.1 unless --host) and port
LISTENING = re.compile(r"crossfeed listening on (http://[^ ]+:(\d+)) -> ")


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
    env["CROSSFEED_DATA_DIR"] = str(tmp_path / "data")  # the SQLite store stays inside the test
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cli(
    *args: str, env: dict[str, str], stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crossfeed", *args],
        check=False,
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


class Server:
    def __init__(self, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = open(tmp_path / "serve.err", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "crossfeed", "serve", "--host", "127.0.0.1", "--port", "0", *args],
            cwd=ROOT,
            env=env or base_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        self.line = self._read_line(20)
        m = LISTENING.match(self.line)
        assert m, f"unexpected first line: {self.line!r}"
        self.port = int(m.group(2))

    def _read_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and not select.select([fd], [], [], 0)[0]):
                raise AssertionError(f"no listening line (exit {self.proc.poll()}): {buf!r}")
            if select.select([fd], [], [], min(left, 0.5))[0]:
                piece = os.read(fd, 4096)
                if not piece:
                    raise AssertionError(f"serve closed stdout: {buf!r}")
                buf += piece
        return buf.decode().splitlines()[0]

    def get(self, path: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
            return resp.status, resp.read()

    def stop(self, sig: int, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
            self.log.close()
