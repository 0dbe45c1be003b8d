"""``crossfeed serve --workers 2`` as real processes: one port, one SQLite store, one metrics view.

Which worker answered is read from the ``X-Request-ID`` header: request ids carry a random prefix
per process (proxy/runtime/observability.py). Clients here open a new connection per request, so the
kernel spreads them over both workers (SO_REUSEPORT) and follow-ups often land on the worker
that did not make the response they continue.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp
import httpx2
import openai
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply
from tests.support.chat_replies import reply, sse_reply
from tests.support.serve_process import ServedProcess, serve_process
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(240)


async def start_workers(
    tmp: Path, upstream: FakeUpstream, n: int = 2, *extra: str, python: list[str] | None = None
) -> ServedProcess:
    cfg = tmp / "c.toml"
    cfg.write_text(
        f'[server]\ndrain_seconds = 5\n\n[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\n'
        f'default = true\n\n[store]\nbackend = "sqlite"\ndata_dir = "{tmp / "data"}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}  # no reasoning key either
    cmd = [*(python or [sys.executable, "-m", "crossfeed"]), "serve", "--config", str(cfg), "--port", "0"]
    w = await serve_process([*cmd, "--workers", str(n), "--log-format", "json", *extra], env, tmp / "crossfeed.log")
    assert w.line.rstrip().endswith(f"({n} workers)"), w.line
    return w


def fresh_connections() -> httpx2.AsyncClient:
    return openai.DefaultAsyncHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0))


def worker_of(headers: httpx2.Headers) -> str:
    return headers["x-request-id"][:16]  # "req_" and the process's 12 hex digits


async def test_a_follow_up_on_the_other_worker_finds_the_response_200_times(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Saved before final, across processes on one SQLite file (WAL): as soon as a stream says
    response.completed, the follow-up (a new connection, often to the other worker) continues it.
    Then one scrape of /metrics counts the requests of both workers."""
    upstream.default = lambda req: sse_reply("ok") if req.body.get("stream") else reply("ok")
    w = await start_workers(tmp_path, upstream)
    misses, crossed, served_by = 0, 0, set()
    try:
        async with openai.AsyncOpenAI(
            base_url=w.url + "/v1", api_key="k", max_retries=0, http_client=fresh_connections()
        ) as client:
            for i in range(200):
                stream = await client.responses.create(model="m", input=f"turn {i}", stream=True)
                origin = worker_of(stream.response.headers)
                async for event in stream:
                    if event.type == "response.completed":
                        rid = event.response.id
                        break
                try:
                    raw = await client.responses.with_raw_response.create(
                        model="m", input="and then?", previous_response_id=rid
                    )
                    crossed += worker_of(raw.headers) != origin
                    served_by |= {origin, worker_of(raw.headers)}
                except openai.NotFoundError:
                    misses += 1
                await stream.close()
        async with aiohttp.ClientSession() as s, s.get(w.url + "/metrics") as r:
            metrics = await r.text()
    finally:
        code = await w.stop()
    assert misses == 0
    assert len(served_by) == 2, "one worker answered everything"
    assert crossed >= 20, f"only {crossed} of 200 follow-ups went to the other worker"
    counted = sum(
        float(m)
        for m in re.findall(
            r'^crossfeed_requests_total\{[^}]*route="/v1/responses"[^}]*status="200"[^}]*\} (\S+)$', metrics, re.M
        )
    )
    assert counted == 400, metrics  # 200 streams and 200 follow-ups, whichever worker was scraped
    assert code == 0, w.lines()[-3000:]


async def test_a_worker_that_dies_is_restarted_and_sigterm_stops_all(upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.default = lambda req: reply("ok")
    w = await start_workers(tmp_path, upstream)
    try:
        first = w.children()
        assert len(first) == 2
        os.kill(first[0], signal.SIGKILL)
        assert await wait_until(lambda: '"server.worker.restarted"' in w.lines(), 30), w.lines()[-2000:]
        assert '"server.worker.died"' in w.lines()
        assert await wait_until(lambda: len(w.children()) == 2 and first[0] not in w.children(), 10)
        new = next(pid for pid in w.children() if pid not in first)
        assert await wait_until(lambda: f'"pid":{new},"port"' in w.lines(), 30), w.lines()[-2000:]  # it listens
        # the replacement serves: enough new connections reach both workers
        served = set()
        async with openai.AsyncOpenAI(
            base_url=w.url + "/v1", api_key="k", max_retries=0, http_client=fresh_connections()
        ) as client:
            for _ in range(40):
                raw = await client.responses.with_raw_response.create(model="m", input="hi")
                served.add(worker_of(raw.headers))
        assert len(served) == 2
        workers = w.children()
    finally:
        code = await w.stop()
    assert code == 0, w.lines()[-3000:]
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived the supervisor"
    assert '"server.stopped"' in w.lines()


async def test_workers_do_not_outlive_a_killed_supervisor(upstream: FakeUpstream, tmp_path: Path) -> None:
    w = await start_workers(tmp_path, upstream)
    workers = w.children()
    w.proc.kill()
    await w.proc.wait()
    assert await wait_until(
        lambda: all(
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text() for pid in workers
        ),
        30,
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--workers", "2"],
            {"CROSSFEED_STORE__BACKEND": "memory"},
            'server.workers = 2 with store.backend = "memory"',
        ),
        (["--workers", "0"], {}, "server.workers (from --workers): must be a number of processes from 1 to 256"),
        (["--workers", "lots"], {}, "got 'lots'"),
        (["--workers", "2"], {"CROSSFEED_SERVER__INBOUND_KEYS_ENV": "CF_UNSET_KEYS"}, "$CF_UNSET_KEYS"),
    ],
    ids=["memory-store", "zero", "not-a-number", "keys-unset"],
)
async def test_workers_misconfigured_refuse_to_start_once(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    """One message from the supervisor (not one per worker), exit 2, no worker started."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_") and k != "CF_UNSET_KEYS"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crossfeed",
        "serve",
        "--port",
        "0",
        *args,
        cwd=ROOT,
        env={**base, "CROSSFEED_DATA_DIR": str(tmp_path), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, (out, err)
    text = err.decode()
    assert message in text and text.count("crossfeed:") == 1, text
    assert b"listening" not in out


def reasoned(text: str, reasoning: str) -> JSONReply:
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text, "reasoning_content": reasoning},
                }
            ],
        }
    )


async def test_reasoning_sealed_by_one_worker_opens_on_the_other(upstream: FakeUpstream, tmp_path: Path) -> None:
    """No [reasoning] key configured: the workers still share one (the supervisor's), so a
    stateless client's encrypted_content, sealed by one worker, is replayed by the other."""
    upstream.default = lambda req: reasoned("ok", "thought about it")
    w = await start_workers(tmp_path, upstream)
    try:
        async with openai.AsyncOpenAI(
            base_url=w.url + "/v1", api_key="k", max_retries=0, http_client=fresh_connections()
        ) as client:
            first = await client.responses.with_raw_response.create(
                model="m", input="hi", store=False, include=["reasoning.encrypted_content"]
            )
            made_by, response = worker_of(first.headers), first.parse()
            items = [i.model_dump(exclude_none=True) for i in response.output]
            assert any(i["type"] == "reasoning" and i.get("encrypted_content") for i in items), items
            for _ in range(40):  # new connections until one reaches the other worker
                upstream.requests.clear()
                again = await client.responses.with_raw_response.create(
                    model="m",
                    input=[{"role": "user", "content": "hi"}, *items, {"role": "user", "content": "and?"}],
                    store=False,
                )
                if worker_of(again.headers) != made_by:
                    break
            else:
                raise AssertionError("40 new connections all reached the same worker")
        sent = upstream.requests[-1].body["messages"]
        assert any(m.get("reasoning_content") == "thought about it" for m in sent), sent
    finally:
        assert await w.stop() == 0


async def test_without_so_reuseport_the_workers_share_one_listening_socket(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The fallback of platforms without SO_REUSEPORT, forced here: the supervisor listens and the
    workers accept on the socket they inherit (--listen-fd); both serve, SIGTERM stops all."""
    upstream.default = lambda req: reply("ok")
    forced = [
        sys.executable,
        "-c",
        "import sys; import crossfeed.proxy.cli.workers as w; w.REUSE_PORT = False; "
        "from crossfeed.proxy.cli.main import main; sys.exit(main(sys.argv[1:]))",
    ]
    w = await start_workers(tmp_path, upstream, 2, python=forced)
    try:
        served = set()
        async with openai.AsyncOpenAI(
            base_url=w.url + "/v1", api_key="k", max_retries=0, http_client=fresh_connections()
        ) as client:
            for _ in range(60):
                raw = await client.responses.with_raw_response.create(model="m", input="hi")
                served.add(worker_of(raw.headers))
                if len(served) == 2:
                    break
        assert len(served) == 2, "one worker accepted every connection"
        assert '"balancing":"shared socket"' in w.lines()
    finally:
        assert await w.stop() == 0
