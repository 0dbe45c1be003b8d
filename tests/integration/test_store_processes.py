"""Real crossfeed processes sharing state: SQLite across a restart, Redis across two replicas."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import openai
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply

ROOT = Path(__file__).resolve().parents[2]


def reply(text: str) -> JSONReply:
    return JSONReply({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})


class Proc:
    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc, self.url = proc, url

    async def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 20)


async def start(config: Path, env: dict[str, str]) -> Proc:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(config), "--port", "0",
        cwd=ROOT, env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    assert "listening on" in line, line
    url = line.split("listening on ")[1].split()[0]
    return Proc(proc, url)


def write_config(path: Path, upstream: FakeUpstream, store: str) -> Path:
    path.write_text(f'[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\ndefault = true\n\n[store]\n{store}\n')
    return path


async def turn(url: str, text: str, previous: str | None = None) -> openai.types.responses.Response:
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
        return await c.responses.create(model="m", input=text, previous_response_id=previous, stream=False)


async def test_sqlite_survives_restart(upstream: FakeUpstream, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", upstream, f'backend = "sqlite"\ndata_dir = "{tmp_path / "data"}"')
    upstream.reply(reply("first"), reply("second"))
    p = await start(cfg, {})
    first = await turn(p.url, "hello")
    assert await p.stop() == 0
    p = await start(cfg, {})
    try:
        await turn(p.url, "again", first.id)
    finally:
        assert await p.stop() == 0
    assert upstream.requests[-1].body["messages"] == [
        {"role": "user", "content": "hello"}, {"role": "assistant", "content": "first"},
        {"role": "user", "content": "again"}]


@pytest.mark.redis
async def test_two_replicas_share_redis(upstream: FakeUpstream, tmp_path: Path, redis_url: str) -> None:
    cfg = write_config(tmp_path / "c.toml", upstream, f'backend = "redis"\nkey_prefix = "cf-test-{os.getpid()}:"')
    upstream.reply(reply("from a"), reply("from b"))
    a = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    b = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    try:
        first = await turn(a.url, "started on a")
        await turn(b.url, "continued on b", first.id)
        async with openai.AsyncOpenAI(base_url=b.url + "/v1", api_key="k") as c:
            assert (await c.responses.retrieve(first.id)).output_text == "from a"
    finally:
        assert await a.stop() == 0
        assert await b.stop() == 0
    # replica b rebuilt the whole conversation from what replica a stored in Redis
    assert upstream.requests[-1].body["messages"] == [
        {"role": "user", "content": "started on a"}, {"role": "assistant", "content": "from a"},
        {"role": "user", "content": "continued on b"}]
