"""``python -m crossfeed serve`` as a real process, for the tests that need one (workers, replicas,
the command line): started with ``--port 0``, its URL read from the line it prints first.

The in-process app is tests/support/app_server.py; this is for what only a process shows.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE = (sys.executable, "-m", "crossfeed", "serve", "--port", "0")


@dataclass
class ServedProcess:
    proc: asyncio.subprocess.Process
    url: str  # http://127.0.0.1:PORT, from the "listening on" line
    line: str  # that first line of stdout
    log: Path  # stderr: the log lines
    _log_file: IO[bytes]

    def children(self) -> list[int]:
        """The worker processes under ``serve --workers N``."""
        return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]

    def lines(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def stop(self, timeout: float = 40.0) -> int:
        """SIGTERM (the drain), then its exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        finally:
            self._log_file.close()


async def serve_process(cmd: list[str], env: dict[str, str], log: Path, timeout: float = 60.0) -> ServedProcess:
    """Starts ``cmd`` (a serve command line with ``--port 0``) in the repository with ``env``,
    stderr to ``log``; fails the test with the log's tail if no "listening on" line comes."""
    log_file = log.open("wb")
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=log_file
    )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode()
    except TimeoutError:
        line = ""
    if "listening on " not in line:
        await asyncio.sleep(0.5)
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        log_file.close()
        pytest.fail(f"crossfeed did not start ({' '.join(cmd[:6])} ...): {line!r}\n{log.read_text()[-3000:]}")
    return ServedProcess(proc, line.split("listening on ")[1].split()[0], line, log, log_file)
