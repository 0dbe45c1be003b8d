"""Real crossfeed processes sharing state: SQLite across a restart, Redis across two replicas."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.chat_replies import reply, sse_reply
from tests.support.replicas import start

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, upstream: FakeUpstream, store: str) -> Path:
    path.write_text(
        f'[[upstreams]]\nname = "fake"\nbase_url = "{upstream.base_url}"\ndefault = true\n\n[store]\n{store}\n'
    )
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
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "again"},
    ]


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
        {"role": "user", "content": "started on a"},
        {"role": "assistant", "content": "from a"},
        {"role": "user", "content": "continued on b"},
    ]


@pytest.mark.redis
async def test_a_conversation_is_shared_by_two_replicas(upstream: FakeUpstream, tmp_path: Path, redis_url: str) -> None:
    """Created on a, continued on b (its turn appended there), read back on a, deleted on b."""
    cfg = write_config(tmp_path / "c.toml", upstream, f'backend = "redis"\nkey_prefix = "cf-conv-{os.getpid()}:"')
    upstream.reply(reply("Hello Ada."))
    a = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    b = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    try:
        async with (
            openai.AsyncOpenAI(base_url=a.url + "/v1", api_key="k", max_retries=0) as on_a,
            openai.AsyncOpenAI(base_url=b.url + "/v1", api_key="k", max_retries=0) as on_b,
        ):
            conv = await on_a.conversations.create(items=[{"type": "message", "role": "user", "content": "I am Ada."}])
            answer = await on_b.responses.create(model="m", input="Hi!", conversation=conv.id)
            assert answer.output_text == "Hello Ada."
            items = [i async for i in on_a.conversations.items.list(conv.id, order="asc")]
            assert [i.role for i in items] == ["user", "user", "assistant"]  # type: ignore[union-attr]
            assert (await on_b.conversations.delete(conv.id)).deleted
            with pytest.raises(openai.NotFoundError):
                await on_a.conversations.retrieve(conv.id)
    finally:
        assert await a.stop() == 0
        assert await b.stop() == 0
    assert upstream.requests[-1].body["messages"] == [
        {"role": "user", "content": "I am Ada."},
        {"role": "user", "content": "Hi!"},
    ]


class SlowLink:
    """A TCP relay on loopback that holds every chunk a client sends for ``delay`` seconds before
    passing it on: replica A's Redis is then slow to write to, as a busy or distant one is."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target, self.delay = target, delay
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
            try:
                while data := await src.read(65536):
                    if delay:
                        await asyncio.sleep(delay)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, self.delay), pipe(up_reader, writer, 0))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.mark.timeout(240)
async def test_a_follow_up_on_another_replica_finds_the_response_at_once(
    upstream: FakeUpstream, tmp_path: Path, redis_url: str
) -> None:
    """Saved before final: as soon as replica A's stream says response.completed, replica B
    continues it, 200 times in a row, and never answers 404. A reaches Redis through a link that
    holds each write 30 ms, so a save still on its way when the terminal event left would be
    missed by B every time (it was: the save used to run after the terminal event)."""
    cfg = write_config(tmp_path / "c.toml", upstream, f'backend = "redis"\nkey_prefix = "cf-final-{os.getpid()}:"')
    upstream.default = lambda req: sse_reply("ok") if req.body.get("stream") else reply("ok")
    host, port = redis_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    link = SlowLink((host, int(port)), 0.03)
    slow_url = f"redis://127.0.0.1:{await link.start()}/" + redis_url.rsplit("/", 1)[1]
    a = await start(cfg, {"CROSSFEED_REDIS_URL": slow_url})
    b = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    misses = 0
    try:
        async with (
            openai.AsyncOpenAI(base_url=a.url + "/v1", api_key="k", max_retries=0) as ca,
            openai.AsyncOpenAI(base_url=b.url + "/v1", api_key="k", max_retries=0) as cb,
        ):
            for i in range(200):
                stream = await ca.responses.create(model="m", input=f"turn {i}", stream=True)
                async for event in stream:
                    if event.type == "response.completed":
                        rid = event.response.id
                        break
                try:
                    await cb.responses.create(model="m", input="and then?", previous_response_id=rid)
                except openai.NotFoundError:
                    misses += 1
                await stream.close()
    finally:
        assert await a.stop() == 0
        assert await b.stop() == 0
        await link.close()
    assert misses == 0


@pytest.mark.redis
async def test_a_conversation_outlives_the_replica_that_made_it(
    upstream: FakeUpstream, tmp_path: Path, redis_url: str
) -> None:
    """Replica a creates a conversation and serves a turn of it, then dies (SIGKILL); replica b
    continues it with the whole history and lists every item."""
    cfg = write_config(tmp_path / "c.toml", upstream, f'backend = "redis"\nkey_prefix = "cf-conv-kill-{os.getpid()}:"')
    upstream.reply(reply("Hello Ada."), reply("You are Ada."))
    a = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    b = await start(cfg, {"CROSSFEED_REDIS_URL": redis_url})
    try:
        async with openai.AsyncOpenAI(base_url=a.url + "/v1", api_key="k", max_retries=0) as on_a:
            conv = await on_a.conversations.create(items=[{"type": "message", "role": "user", "content": "I am Ada."}])
            await on_a.responses.create(model="m", input="Hi!", conversation=conv.id)
        a.proc.kill()
        await asyncio.wait_for(a.proc.wait(), 20)
        async with openai.AsyncOpenAI(base_url=b.url + "/v1", api_key="k", max_retries=0) as on_b:
            answer = await on_b.responses.create(model="m", input="Who am I?", conversation=conv.id)
            assert answer.output_text == "You are Ada."
            items = [i async for i in on_b.conversations.items.list(conv.id, order="asc")]
        assert [i.role for i in items] == ["user", "user", "assistant", "user", "assistant"]  # type: ignore[union-attr]
    finally:
        assert await b.stop() == 0
    assert upstream.requests[-1].body["messages"] == [
        {"role": "user", "content": "I am Ada."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "Who am I?"},
    ]
