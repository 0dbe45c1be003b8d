"""A crossfeed replica as a real process (``python -m crossfeed serve --config FILE --port 0``) for the
tests that need several sharing a store: ``start`` returns once it listens; ``Proc.stop`` sends
SIGTERM and returns its exit code."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.support.paths import ROOT


class Proc:
    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc, self.url = proc, url

    async def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 20)


async def start(config: Path, env: dict[str, str]) -> Proc:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crossfeed",
        "serve",
        "--config",
        str(config),
        "--port",
        "0",
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    assert "listening on" in line, line
    url = line.split("listening on ")[1].split()[0]
    return Proc(proc, url)
