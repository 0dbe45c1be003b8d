"""Pools on real servers: two llama.cpp ``llama-server`` replicas of the tiny scripted model
(tests/fakes/tiny_model.py) in one pool, the official SDK in front of crossfeed.

Each replica sits behind a small recording relay (``Relay``): it forwards every chat call to its
server and keeps the request bodies and the text it passed on, so a test reads what each replica
was asked and said. The tiny model answers its ten tokens in milliseconds, faster than a kill can
land between two of them: the relay of the replica that takes a turn's first call SIGKILLs its
server after the answer's third chunk of text or reasoning and drops the connection there, which
is what crossfeed would see had the server died at that point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from crossfeed.proxy.runtime.config import load_config
from tests.fakes import llama_servers as ls
from tests.fakes.tiny_model import REASONING, SCRIPTS, TEXT_ANSWER, THOUGHT, THOUGHT_ANSWER
from tests.faults.pool_harness import ask, pool_config
from tests.support.app_server import running_proxy
from tests.support.clients import sdk_client

MODEL = "tiny"
KILL_AFTER = 3  # chunks of text or reasoning the dying replica passes on


class Relay:
    """A recording HTTP relay in front of one real server (see the module's text)."""

    def __init__(self, server: ls.RunningServer, plan: dict[str, bool]) -> None:
        self.server = server
        self.plan = plan  # {"kill": True} until a relay has killed its server
        self.bodies: list[dict[str, Any]] = []
        self.texts: list[str] = []  # per call, the text passed on
        self.reasonings: list[str] = []  # per call, the reasoning passed on (reasoning_content)
        self.killed = False
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _other(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.texts.append("")
        self.reasonings.append("")
        assert self._session is not None
        async with self._session.post(self.server.url + "/chat/completions", json=body) as up:
            if not body.get("stream"):
                answer = await up.json()
                self.texts[-1] = answer["choices"][0]["message"].get("content") or ""
                return web.json_response(answer, status=up.status)
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            kill = self.plan.pop("kill", False)
            chunks = 0
            async for line in up.content:
                text, thought = _delta(line)
                if text or thought:
                    if kill and chunks == KILL_AFTER:
                        os.kill(self.server.pid, signal.SIGKILL)
                        self.killed = True
                        assert request.transport is not None
                        request.transport.abort()  # the replica is gone: its answer stops here
                        raise asyncio.CancelledError
                    chunks += 1
                    self.texts[-1] += text
                    self.reasonings[-1] += thought
                await resp.write(line)
            await resp.write_eof()
            return resp


def _delta(line: bytes) -> tuple[str, str]:
    """A streamed chunk's text and reasoning (each "" when it has none)."""
    if not line.startswith(b"data: {"):
        return "", ""
    choices = orjson.loads(line[6:]).get("choices") or [{}]
    delta = choices[0].get("delta") or {}
    return delta.get("content") or "", delta.get("reasoning_content") or ""


@pytest.fixture
def two_servers(llama_bins: ls.Binaries, tiny_gguf: Path, tmp_path: Path) -> Iterator[list[ls.RunningServer]]:
    with ExitStack() as stack:
        servers = []
        for i in range(2):
            log_dir = tmp_path / f"replica-{i}"
            log_dir.mkdir()
            servers.append(stack.enter_context(ls.llama_server(llama_bins, tiny_gguf, log_dir)))
        yield servers


@asynccontextmanager
async def relays(servers: list[ls.RunningServer], *, kill: bool = False) -> AsyncIterator[list[Relay]]:
    plan = {"kill": True} if kill else {}
    made = [Relay(s, plan) for s in servers]
    for r in made:
        await r.start()
    try:
        yield made
    finally:
        for r in made:
            await r.close()


async def test_a_ten_turn_chain_stays_on_one_real_replica(two_servers, tmp_path, captured) -> None:
    async with relays(two_servers) as (r0, r1):
        config = pool_config(tmp_path, [r0.base_url, r1.base_url], model=MODEL, store="sqlite")
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured, timeout=60)
            final, headers = await ask(client, "Say hello", model=MODEL, max_output_tokens=32, temperature=0)
            seen = [headers["x-crossfeed-replica"]]
            for _ in range(9):
                final, headers = await ask(
                    client, "Say hello", model=MODEL, previous_response_id=final.id, max_output_tokens=32, temperature=0
                )
                assert final.status == "completed"
                seen.append(headers["x-crossfeed-replica"])
            await client.close()
    assert len(seen) == 10 and len(set(seen)) == 1
    assert sorted([len(r0.bodies), len(r1.bodies)]) == [0, 10]  # the servers' own count of calls
    busy = r0 if r0.bodies else r1
    assert len(busy.bodies[-1]["messages"]) == 19  # the whole chain: 9 answers and 10 questions


@pytest.mark.parametrize("store", [True, False], ids=["stored chain", "unstored chain, session-id"])
async def test_a_ten_turn_chain_on_a_socket_stays_on_one_real_replica(
    two_servers, tmp_path, captured, ws_frames, store
) -> None:
    """The same chain over the SDK's WebSocket (``client.responses.connect()``). Stored, each turn
    reads its replica from the record of the response it continues; unstored (as Codex sends its
    turns, with a ``session-id`` on the handshake), from the socket's remembered response."""
    async with relays(two_servers) as (r0, r1):
        config = pool_config(tmp_path, [r0.base_url, r1.base_url], model=MODEL, store="sqlite")
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured, timeout=60)
            headers = {} if store else {"session-id": f"real-pool-{uuid.uuid4().hex}"}
            async with client.responses.connect(extra_headers=headers) as conn:
                ws = ws_frames.attach(conn, "real pool")
                previous = None
                for _ in range(10):
                    turn, parsed = await ws.turn(
                        model=MODEL,
                        input="Say hello",
                        previous_response_id=previous,
                        store=store,
                        max_output_tokens=32,
                        temperature=0,
                    )
                    assert turn.terminal == "response.completed", turn.events[-1:]
                    previous = parsed[-1].response.id
            await client.close()
    assert sorted([len(r0.bodies), len(r1.bodies)]) == [0, 10]  # the servers' own count of calls
    busy = r0 if r0.bodies else r1
    assert len(busy.bodies[-1]["messages"]) == 19  # the whole chain: 9 answers and 10 questions
    assert all(busy.texts)  # every turn's answer came from the real server


@pytest.mark.parametrize("prefill", ["trailing_assistant", "continue_final_message"])
async def test_a_replica_killed_mid_answer_is_continued_by_the_other(two_servers, tmp_path, captured, prefill) -> None:
    """llama-server takes both forms of the prefill (it reads ``continue_final_message`` too). The
    tiny model goes on where the prefill stops (tiny_model.PREFILLABLE), so the Response is the
    model's uninterrupted answer, each part said once."""
    dead, alive, final, _ = await _killed(two_servers, tmp_path, captured, "Say hello", 32, prefill=prefill)
    first_part, second_part = dead.texts[0], alive.texts[0]
    if prefill == "trailing_assistant":  # llama-server repeats the prefill first: crossfeed drops it
        assert second_part.startswith(first_part)
        second_part = second_part[len(first_part) :]
    assert first_part == "".join(SCRIPTS["text"][:KILL_AFTER]) and second_part
    asked = alive.bodies[0]["messages"]
    assert asked[:-1] == dead.bodies[0]["messages"]
    assert asked[-1] == {"role": "assistant", "content": first_part}  # the prefill
    assert alive.bodies[0].get("continue_final_message") is (True if prefill == "continue_final_message" else None)
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == first_part + second_part == TEXT_ANSWER


async def _killed(
    servers: list[ls.RunningServer], tmp_path: Path, captured: Any, question: str, tokens: int, **keys: Any
) -> tuple[Relay, Relay, Any, dict[str, str]]:
    """``question`` asked through a pool (``keys`` on it) whose first replica the relay kills
    mid-answer: the dead relay, the living one, the Response, its headers."""
    async with relays(servers, kill=True) as pair:
        config = pool_config(tmp_path, [r.base_url for r in pair], model=MODEL, continue_on_failure=True, **keys)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured, timeout=60)
            final, headers = await ask(client, question, model=MODEL, max_output_tokens=tokens, temperature=0)
            await client.close()
    dead = next(r for r in pair if r.killed)
    alive = next(r for r in pair if not r.killed)
    assert _dead(dead.server.pid) and not _dead(alive.server.pid)
    assert headers["x-crossfeed-replica"] == f"gpu/{pair.index(dead)}"  # the answer began there
    return dead, alive, final, headers


async def _killed_mid_reasoning(
    servers: list[ls.RunningServer], tmp_path: Path, captured: Any, **keys: Any
) -> tuple[Relay, Relay, Any, dict[str, str]]:
    """The reasoning script asked through a pool (``keys`` on it) whose first replica is killed
    after three reasoning chunks: the dead relay, the living one, the Response, its headers."""
    dead, alive, final, headers = await _killed(servers, tmp_path, captured, "Please think first", 64, **keys)
    assert (
        dead.reasonings[0] == "".join(REASONING[1 : 1 + KILL_AFTER]) and not dead.texts[0]
    )  # "<think>\n": the parser's
    assert alive.bodies[0]["messages"][:-1] == dead.bodies[0]["messages"]
    return dead, alive, final, headers


async def _prompt(server: ls.RunningServer, body: dict[str, Any]) -> str:
    """The prompt the server makes of a chat request (its ``/apply-template``)."""
    async with aiohttp.ClientSession() as http:
        async with http.post(server.url.removesuffix("/v1") + "/apply-template", json=body) as r:
            return str((await r.json())["prompt"])


@pytest.mark.parametrize("prefill", ["trailing_assistant", "continue_final_message"])
async def test_a_replica_killed_mid_reasoning_is_continued_by_the_other(
    two_servers, tmp_path, captured, prefill
) -> None:
    """The tiny model's reasoning script (a question saying "think"): llama-server's Qwen3-Coder
    parser streams its ``<think>`` block as ``reasoning_content``; the relay kills the first
    replica after three reasoning chunks. With ``reasoning_prefill = "think_tag"`` (the default)
    the other is asked to go on from ``"<think>\\n"`` + that reasoning, as assistant content. This
    llama-server takes it in both forms (the ``enable_thinking`` refusal is gone from this build),
    renders the content after an empty, closed think block of its own and so streams the rest as
    raw content: the reasoning going on, ``</think>``, the answer (``trailing_assistant`` first
    repeats the prefill, ``<think>`` and all; ``continue_final_message`` does not). crossfeed
    reads it as one reasoning item, then the message."""
    dead, alive, final, _ = await _killed_mid_reasoning(two_servers, tmp_path, captured, prefill=prefill)
    thought = dead.reasonings[0]
    asked = alive.bodies[0]
    assert asked["messages"][-1] == {"role": "assistant", "content": "<think>\n" + thought}  # the prefill
    if prefill == "trailing_assistant":  # llama-server used to refuse a prefill with thinking on
        assert asked["chat_template_kwargs"] == {"enable_thinking": False}
        assert "continue_final_message" not in asked
    else:
        assert asked["continue_final_message"] is True and asked["add_generation_prompt"] is False
        assert "chat_template_kwargs" not in asked
    # the prompt it made of that: its own closed, empty block, then the prefill as the answer's start
    prompt = await _prompt(alive.server, asked)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n<think>\n" + thought)
    said = alive.texts[0]
    if prefill == "trailing_assistant":  # llama-server repeats the prefill first: crossfeed drops it
        assert said.startswith("<think>\n" + thought)
        said = said[len("<think>\n" + thought) :]
    rest, answer = said.split("</think>", 1)
    assert rest and answer.strip() and not alive.reasonings[0]
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert [c.text for c in final.output[0].content or []] == [thought + rest]
    assert final.output_text == answer.strip()
    # the model's whole script, as llama-server itself parses it when nothing breaks
    assert thought + rest == THOUGHT and final.output_text == THOUGHT_ANSWER


@pytest.mark.parametrize("prefill", ["trailing_assistant", "continue_final_message"])
async def test_a_replica_killed_mid_reasoning_is_continued_from_the_reasoning_field(
    two_servers, tmp_path, captured, prefill
) -> None:
    """``reasoning_prefill = "reasoning_field"``: the other replica is asked with the partial
    reasoning as the assistant message's ``reasoning_content`` and empty content, thinking left
    on. This llama-server continues the thought natively: its prompt ends with ``<think>\\n`` +
    the reasoning (no block closed before it) and the rest streams back as ``reasoning_content``
    (``trailing_assistant`` first repeats the prefill there, the first new words in the same
    delta; ``continue_final_message`` does not), then the answer as content. The Response is the
    uninterrupted one: the same reasoning item and message."""
    dead, alive, final, _ = await _killed_mid_reasoning(
        two_servers, tmp_path, captured, prefill=prefill, reasoning_prefill="reasoning_field"
    )
    thought = dead.reasonings[0]
    asked = alive.bodies[0]
    assert asked["messages"][-1] == {"role": "assistant", "content": "", "reasoning_content": thought}
    assert "chat_template_kwargs" not in asked
    assert asked.get("continue_final_message") is (True if prefill == "continue_final_message" else None)
    prompt = await _prompt(alive.server, asked)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n" + thought)
    assert "</think>" not in prompt.rsplit("<|im_start|>assistant\n", 1)[1]  # no empty, closed block
    went_on = alive.reasonings[0]
    if prefill == "trailing_assistant":  # repeated in the reasoning field: crossfeed drops it
        assert went_on.startswith(thought)
        went_on = went_on[len(thought) :]
    assert went_on and alive.texts[0] == THOUGHT_ANSWER  # the answer as content, no think tags
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert [c.text for c in final.output[0].content or []] == [thought + went_on] == [THOUGHT]
    assert final.output_text == THOUGHT_ANSWER
    # the same as the server's own answer when nothing breaks
    async with aiohttp.ClientSession() as http:
        plain = {k: v for k, v in dead.bodies[0].items() if k not in ("stream", "stream_options")}
        async with http.post(alive.server.url + "/chat/completions", json=plain) as r:
            whole = (await r.json())["choices"][0]["message"]
    assert (whole["reasoning_content"], whole["content"]) == (THOUGHT, THOUGHT_ANSWER)


def _dead(pid: int) -> bool:
    """The process has exited (a zombie until its parent, the server fixture, reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] in "ZX"
    except (OSError, IndexError):
        return True


async def test_two_crossfeed_instances_on_one_redis_agree_on_the_real_replica(
    two_servers, tmp_path, captured, redis_url
) -> None:
    """A chain whose turns alternate between two crossfeed processes' apps on one Redis store:
    every turn on the replica its first turn had (the affinity is in the store)."""
    async with relays(two_servers) as (r0, r1):
        text = "\n".join(
            [
                "[store]",
                'backend = "redis"',
                f'redis_url = "{redis_url}"',
                f'key_prefix = "cf-pool-real-{uuid.uuid4().hex}:"',
                "[[upstreams]]",
                'name = "gpu"',
                f'models = ["{MODEL}"]',
                f'base_urls = ["{r0.base_url}", "{r1.base_url}"]',
                "",
            ]
        )
        path = tmp_path / "redis-pool.toml"
        path.write_text(text)
        config = load_config(path, {})
        async with running_proxy(config) as one, running_proxy(config) as two:
            a, b = sdk_client(one.base_url, captured, timeout=60), sdk_client(two.base_url, captured, timeout=60)
            await ask(a, "Say hello", model=MODEL, max_output_tokens=32)  # one's turn-taking moves on
            final, headers = await ask(b, "Say hello", model=MODEL, max_output_tokens=32)
            seen = [headers["x-crossfeed-replica"]]
            for n in range(1, 10):
                final, headers = await ask(
                    a if n % 2 else b, "Say hello", model=MODEL, previous_response_id=final.id, max_output_tokens=32
                )
                assert final.status == "completed"
                seen.append(headers["x-crossfeed-replica"])
            await a.close()
            await b.close()
    assert len(set(seen)) == 1
    chosen = r0 if seen[0] == "gpu/0" else r1
    assert len(chosen.bodies) >= 10 and len(chosen.bodies[-1]["messages"]) == 19
