"""The server's JSON log to a file is written in batches (proxy/runtime/logs.py, ``BatchedLines``): a
request's summary line still reaches the file within a fraction of a second while the server
runs, a warning goes out at once, and the lines of the last moments are written at shutdown."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import aiohttp

from tests.faults.fault_upstream import FaultUpstream
from tests.faults.harness import ENDPOINT, ProxyProcess, request_body
from tests.support.waiting import wait_until

GUARD = 20.0


def events(proxy: ProxyProcess) -> list[str]:
    return [json.loads(line).get("event", "") for line in proxy.logs().splitlines() if line.startswith("{")]


async def test_summary_lines_reach_the_file_while_running_and_at_shutdown(tmp_path: Path) -> None:
    async with FaultUpstream() as up:
        proxy = ProxyProcess(tmp_path, up.base_url)
        await proxy.start()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD)) as s:
                for _ in range(3):
                    async with s.post(
                        proxy.url + ENDPOINT["forward"],
                        headers=proxy.auth,
                        json=request_body("forward", "fault:ok", True),
                    ) as r:
                        assert r.status == 200
                        await r.read()
                # while the server runs: the batch goes out on its timer (0.1 s), not at exit
                assert await wait_until(lambda: events(proxy).count("request.completed") == 3, GUARD), events(proxy)
                async with s.post(
                    proxy.url + ENDPOINT["forward"], headers=proxy.auth, json=request_body("forward", "fault:ok", False)
                ) as r:
                    assert r.status == 200
        finally:
            code = await proxy.stop(signal.SIGTERM, timeout=15.0)
        assert code == 0
        logged = events(proxy)
        # the fourth request's line and the shutdown lines were written before the process ended
        assert logged.count("request.completed") == 4
        assert logged[-1] == "server.stopped", logged[-5:]
