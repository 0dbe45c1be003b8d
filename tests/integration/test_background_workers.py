"""Background runs on one node with ``serve --workers 2`` and the SQLite store: every request
lands on whichever worker accepts it, so a run started on one worker is polled, resumed and
cancelled through both; and a worker killed with SIGKILL while it runs one (the supervisor starts
another) leaves a run that every reader sees end ``response.failed`` within the lease's bound."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.background import WORDS, held
from tests.support.replicas import Proc, start
from tests.support.validators import validate_responses_events, validate_responses_sse

LEASE = 2.0


@pytest.fixture
async def workers(upstream: FakeUpstream, tmp_path: Path) -> AsyncIterator[tuple[Proc, Path]]:
    data = tmp_path / "data"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[server]\ndrain_seconds = 0.5\nworkers = 2\n\n[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\n'
        f'default = true\n\n[store]\nbackend = "sqlite"\ndata_dir = "{data}"\n\n[runs]\nlease_seconds = {LEASE}\n'
        "renew_seconds = 0.5\ncancel_poll_seconds = 0.1\n"
    )
    proc = await start(cfg, {})
    yield proc, data / "responses.sqlite3"
    if proc.proc.returncode is None:
        await proc.stop()


def sdk(p: Proc) -> openai.AsyncOpenAI:
    # No keep-alive: each request is a new connection, which either worker may accept.
    http = openai.DefaultAsyncHttpxClient(limits=httpx.Limits(max_keepalive_connections=0))
    return openai.AsyncOpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0, http_client=http)


async def events_of(stream: Any) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude_unset=True) async for e in stream]


def holder_pid(db: Path, run_id: str) -> int:
    """The pid of the worker holding the run's lease (``host:pid:nonce``)."""
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT holder FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    assert row is not None and row[0], row
    return int(row[0].split(":")[1])


def worker_pids(supervisor: int) -> set[int]:
    kids = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return {int(k) for k in kids}


async def test_one_run_seen_through_both_workers(workers: tuple[Proc, Path], upstream: FakeUpstream) -> None:
    proc, db = workers
    reply, go = held()
    upstream.reply(reply)
    async with sdk(proc) as client:
        created = await client.responses.create(model="m", input="hi", background=True)
        runner = holder_pid(db, created.id)
        assert runner in worker_pids(proc.proc.pid)
        # Twenty polls on twenty connections, each accepted by whichever worker takes it: all see the run.
        polled = [await client.responses.retrieve(created.id) for _ in range(20)]
        assert {p.status for p in polled} == {"in_progress"}
        resumed = asyncio.create_task(
            events_of(await client.responses.retrieve(created.id, stream=True, starting_after=2))
        )
        await asyncio.sleep(0.3)
        assert not resumed.done()
        go.set()
        got = await asyncio.wait_for(resumed, 20)
        whole = await events_of(await client.responses.retrieve(created.id, stream=True))
        validate_responses_events(whole)
        assert got == whole[3:]
        final = await client.responses.retrieve(created.id)
        assert final.status == "completed" and final.output_text == "".join(WORDS)


async def test_cancelled_through_either_worker(workers: tuple[Proc, Path], upstream: FakeUpstream) -> None:
    proc, _ = workers
    reply, _ = held()
    upstream.reply(reply)
    async with sdk(proc) as client:
        created = await client.responses.create(model="m", input="hi", background=True)
        cancelled = await client.responses.cancel(created.id)
        assert cancelled.status == "cancelled"
        async with asyncio.timeout(10):
            while upstream.open_requests:
                await asyncio.sleep(0.05)
        assert upstream.cancelled == 1
        for _ in range(4):  # idempotent, whichever worker answers
            assert (await client.responses.cancel(created.id)).status == "cancelled"


async def _get_retrying(http: aiohttp.ClientSession, url: str, params: dict[str, str]) -> bytes:
    """GET ``url`` (200), its connection tried again while it is refused or reset. Each worker of
    ``serve --workers`` listens with ``SO_REUSEPORT``: a connection the kernel hands to the
    listening socket of a worker that was just killed, before its exit has closed that socket, is
    reset (as any client of a pool of such processes may see, and retries). The caller bounds
    the time."""
    while True:
        try:
            async with http.get(url, params=params) as r:
                assert r.status == 200
                return await r.read()
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError):
            await asyncio.sleep(0.05)


async def test_a_killed_worker_leaves_a_failed_run(workers: tuple[Proc, Path], upstream: FakeUpstream) -> None:
    proc, db = workers
    reply, _ = held()
    upstream.reply(reply)
    async with sdk(proc) as client:
        created = await client.responses.create(model="m", input="hi", background=True)
        os.kill(holder_pid(db, created.id), signal.SIGKILL)
        async with aiohttp.ClientSession() as http:
            async with asyncio.timeout(LEASE + 15):
                body = await _get_retrying(http, f"{proc.url}/v1/responses/{created.id}", {"stream": "true"})
                events = validate_responses_sse(body)
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["code"] == "server_error"
        assert (await client.responses.retrieve(created.id)).status == "failed"
        assert proc.proc.returncode is None  # the supervisor carries on (and started another worker)
