"""The live translation inspector (issue 37) over real sockets: its key, its turns, its live feed,
its test cases, its bounds. The browser's view of the same is tests/e2e/test_inspector_browser.py.

- Start-up: on without a key, with a key that is also a client key, or with several workers: a
  ``ConfigError`` naming the setting. Without the admin key every data route is a 401 that carries
  no data; a client key does not open it, and the admin key is no client key.
- A streamed tool call (the official SDK), a WebSocket turn, a web-search turn and a turn on a
  backend with a quirk: each is listed with its session, both requests and what changed, the
  backend's chunks beside the events in time order, the quirk marked, timings; no secret anywhere.
- The live feed shows a slow stream's chunks while it runs, before its end.
- "Save as test case": the file replays with ``crossfeed translate --case --check``.
- The ring keeps at most ``turns`` turns and ``memory_bound`` bytes under a soak of many turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from crossfeed.proxy.app import create_app
from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.inspector import INSPECTOR
from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.inspector_turns import (
    ADMIN_KEY,
    BACKEND_KEY,
    CLIENT_KEY,
    ENVIRON,
    PAGES,
    quirk_turn,
    replay_case,
    search_turn,
    settings,
    slow_stream,
    slow_turn,
    streamed_tool_call,
    text_stream,
    websocket_turn,
)
from tests.support.validators import validate_responses_sse
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)
GUARD = 30.0
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
async def search() -> AsyncIterator[FakeSearch]:
    fake = FakeSearch(pages=dict(PAGES))
    await fake.start()
    yield fake
    await fake.close()


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers or {}) as r:
        raw = await r.read()
        return r.status, orjson.loads(raw) if r.content_type == "application/json" else raw


async def turns_of(handle: ProxyHandle) -> list[dict[str, Any]]:
    status, body = await get(handle.url + "/inspector/api/turns", ADMIN)
    assert status == 200, body
    return body["turns"]


async def detail(handle: ProxyHandle, turn_id: str) -> dict[str, Any]:
    status, body = await get(f"{handle.url}/inspector/api/turns/{turn_id}", ADMIN)
    assert status == 200, body
    return body


# -- start-up and the key --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("more", "environ", "message"),
    [
        ({}, {**ENVIRON, "CF_INSPECTOR_KEY": ""}, "inspector.admin_key_env"),
        ({}, {**ENVIRON, "CF_INSPECTOR_KEY": CLIENT_KEY}, "holds a client key"),
    ],
)
def test_start_refuses_an_open_or_shared_key(
    upstream: FakeUpstream, more: dict[str, Any], environ: dict[str, str], message: str
) -> None:
    config = load_config(None, {}, settings(upstream, **more))
    with pytest.raises(ConfigError, match=message):
        create_app(config, environ=environ)


def test_config_needs_a_key_and_one_worker(upstream: FakeUpstream) -> None:
    with pytest.raises(ConfigError, match="admin_key_env"):
        load_config(None, {}, {"inspector.enabled": True})
    with pytest.raises(ConfigError, match=r"inspector\.enabled"):
        load_config(None, {}, settings(upstream, **{"server.workers": 2, "store.backend": "sqlite"}))
    off = load_config(None, {}, {"upstream.base_url": upstream.base_url, "store.backend": "memory"})
    assert INSPECTOR not in create_app(off, environ={})


async def test_no_data_without_the_admin_key(upstream: FakeUpstream) -> None:
    async with running_proxy(settings(upstream), environ=ENVIRON) as handle:
        await quirk_turn(upstream, handle.base_url)
        (turn,) = await turns_of(handle)
        routes = [
            "/inspector/api/turns",
            f"/inspector/api/turns/{turn['id']}",
            f"/inspector/api/turns/{turn['id']}/case",
            "/inspector/api/live",
        ]
        for route in routes:
            for headers in ({}, {"Authorization": f"Bearer {CLIENT_KEY}"}, {"Authorization": "Bearer wrong"}):
                status, body = await get(handle.url + route, headers)
                assert status == 401, (route, headers, body)
                assert body["error"]["code"] == "invalid_api_key"
                assert turn["id"] not in orjson.dumps(body).decode() and "resp_" not in orjson.dumps(body).decode()
        # the page itself is static: it holds no turn
        status, page = await get(handle.url + "/inspector")
        assert status == 200 and b"crossfeed inspector" in page and turn["request_id"].encode() not in page
        status, script = await get(handle.url + "/inspector/static/app.js")
        assert status == 200 and b"textContent" in script
        assert (await get(handle.url + "/inspector/static/../inspector.py"))[0] == 404
        # the admin key is not a client key
        async with (
            aiohttp.ClientSession() as s,
            s.post(handle.base_url + "/responses", json={"model": "m", "input": "x"}, headers=ADMIN) as r,
        ):
            assert r.status == 401


# -- what a turn shows -----------------------------------------------------------------------------


async def test_turns_show_requests_chunks_events_and_quirks(upstream: FakeUpstream, search: FakeSearch) -> None:
    async with running_proxy(settings(upstream, search), environ=ENVIRON) as handle:
        first = await streamed_tool_call(upstream, handle.base_url)
        await quirk_turn(upstream, handle.base_url, previous=first)
        await websocket_turn(upstream, handle.url)
        await search_turn(upstream, handle.base_url)
        listed = await turns_of(handle)
        assert [t["transport"] for t in listed] == ["http", "http", "websocket", "http"]
        assert all(t["ending"] == "ok" for t in listed), listed
        tool, quirk, ws, searched = [await detail(handle, t["id"]) for t in listed]

    # both requests, and what changed between them
    assert tool["client_request"]["input"] == "What changed in Rust 1.80?"
    assert tool["upstream_request"]["messages"][0] == {"role": "system", "content": "Use the tool."}
    changes = {c["field"]: c["change"] for c in tool["changes"]}
    assert changes["input"] == changes["instructions"] == "mapped" and changes["stream_options"] == "added"
    # the chain: the second turn continues the first, its history resolved from the store
    assert tool["response_id"] == first and quirk["previous_response_id"] == first
    assert quirk["session"] == tool["session"] == f"chain {first}"
    assert any(
        c["field"] == "previous_response_id" and "resolved from the store" in c["detail"] for c in quirk["changes"]
    )
    assert len(quirk["upstream_request"]["messages"]) > 1  # the earlier turn's messages
    # chunks beside events, in time, and the chunks are the backend's bytes
    for turn in (tool, quirk, ws, searched):
        times = [c["t"] for c in turn["chunks"]] + [e["t"] for e in turn["events"]]
        assert times and all(t >= 0 for t in times)
        assert [c["t"] for c in turn["chunks"]] == sorted(c["t"] for c in turn["chunks"])
        t = turn["timings"]
        assert 0 <= t["upstream_sent_ms"] <= t["backend_first_byte_ms"] <= t["end_ms"]
        assert t["first_event_ms"] is not None and t["crossfeed_added_ms"] is not None
    assert "".join(c["data"] for c in tool["chunks"]).count("data: ") == 6
    assert '"arguments":" 1.80\\"}"' in "".join(c["data"] for c in tool["chunks"])
    assert "response.function_call_arguments.done" in "".join(e["data"] for e in tool["events"])
    # the quirk marked where it was repaired
    (mark,) = quirk["quirk_marks"]
    assert mark["kind"] == "legacy_function_call_dropped" and mark["count"] == 1 and mark["leg"] == 1
    assert not tool["quirk_marks"]
    # the WebSocket turn: decoded frames, one JSON document a line
    frames = [orjson.loads(line) for e in ws["events"] for line in e["data"].splitlines()]
    assert frames[0]["type"] == "response.created" and frames[-1]["type"] == "response.completed"
    # the web-search turn: two backend calls, the search call in the events
    assert [leg["index"] for leg in searched["leg_calls"]] == [1, 2]
    assert {c["leg"] for c in searched["chunks"]} == {1, 2}
    assert "web_search_call" in "".join(e["data"] for e in searched["events"])
    (run,) = searched["tool_runs"]  # the search crossfeed ran between the two legs
    assert run["name"] == "web_search" and "rust 1.80" in run["arguments"] and "LazyCell" in run["result"]
    assert searched["leg_calls"][0]["at"] <= run["t"] <= searched["leg_calls"][1]["at"]
    # no secret anywhere
    shown = orjson.dumps([tool, quirk, ws, searched]).decode()
    assert BACKEND_KEY not in shown and CLIENT_KEY not in shown and ADMIN_KEY not in shown


async def test_the_live_feed_shows_a_slow_stream_while_it_runs(upstream: FakeUpstream) -> None:
    async with running_proxy(settings(upstream), environ=ENVIRON) as handle:
        hold = asyncio.Event()
        seen: list[dict[str, Any]] = []
        async with aiohttp.ClientSession() as s, s.get(handle.url + "/inspector/api/live", headers=ADMIN) as feed:
            assert feed.status == 200 and feed.content_type == "text/event-stream"

            async def read() -> None:
                async for line in feed.content:
                    if line.startswith(b"data: "):
                        seen.append(orjson.loads(line[6:]))

            reader = asyncio.create_task(read())
            turn = asyncio.create_task(slow_turn(upstream, handle.base_url, hold))
            try:
                # while the backend holds the second half: the turn is listed open, its first chunks shown
                assert await wait_until(lambda: any(m["kind"] == "chunk" for m in seen), GUARD)
                assert await wait_until(lambda: any(m["kind"] == "event" for m in seen), GUARD)
                assert not turn.done()
                opened = [m["turn"] for m in seen if m["kind"] == "turn"]
                assert opened and opened[-1]["ending"] is None
                hold.set()
                raw = await asyncio.wait_for(turn, GUARD)
                assert await wait_until(
                    lambda: any(m["kind"] == "turn" and m["turn"]["ending"] == "ok" for m in seen), GUARD
                )
            finally:
                hold.set()
                reader.cancel()
        assert seen[0]["kind"] == "hello"
        shown = "".join(m["data"] for m in seen if m["kind"] == "chunk")
        assert shown.encode() == slow_stream()  # every byte the backend sent, in order
        sent = "".join(m["data"] for m in seen if m["kind"] == "event")
        assert sent.encode() == raw  # every byte the client got, in order, as it went out


# -- test cases ------------------------------------------------------------------------------------


replay = replay_case


async def test_saved_case_replays_to_the_same_events(upstream: FakeUpstream, tmp_path: Path) -> None:
    async with running_proxy(settings(upstream), environ=ENVIRON) as handle:
        await streamed_tool_call(upstream, handle.base_url)
        await quirk_turn(upstream, handle.base_url)
        await websocket_turn(upstream, handle.url)
        cases = []
        for turn in await turns_of(handle):
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"{handle.url}/inspector/api/turns/{turn['id']}/case", headers=ADMIN) as r,
            ):
                assert r.status == 200
                assert r.headers["Content-Disposition"].startswith('attachment; filename="crossfeed-case-')
                path = tmp_path / f"{turn['id']}.json"
                path.write_bytes(await r.read())
                cases.append(path)
    for path in cases:
        case = orjson.loads(path.read_bytes())
        assert case["complete"] and case["from"] == "chat" and case["to"] == "responses"
        done = replay(path)
        assert done.returncode == 0, done.stderr
        assert "the replay matches the" in done.stderr
    # a case whose events were changed is caught
    case = orjson.loads(cases[0].read_bytes())
    case["events"] = case["events"].replace("lookup", "looked")
    cases[0].write_bytes(orjson.dumps(case))
    done = replay(cases[0])
    assert done.returncode == 1 and "differs" in done.stderr, done.stderr


# -- bounds ----------------------------------------------------------------------------------------


async def test_the_ring_stays_within_its_bounds(upstream: FakeUpstream) -> None:
    more = {"inspector.turns": 8, "inspector.max_turn_bytes": 4096, "inspector.max_body_chars": 200}
    async with running_proxy(settings(upstream, **more), environ=ENVIRON) as handle:
        ring = handle.app[INSPECTOR]
        bound = handle.config.inspector.memory_bound
        long_text = "a long answer " * 2000  # 28 KB a turn: past the per-turn limit
        async with aiohttp.ClientSession() as s:
            for n in range(60):
                upstream.reply(SSEReply(text_stream(long_text if n % 2 else "short"), max_piece=997))
                body = {"model": "m", "input": "x" * (20000 if n % 3 == 0 else 10), "stream": True}
                async with s.post(
                    handle.base_url + "/responses", json=body, headers={"Authorization": f"Bearer {CLIENT_KEY}"}
                ) as r:
                    assert r.status == 200
                    await r.read()
                assert len(ring.turns) <= 8 and ring.held() <= bound
        listed = await turns_of(handle)
        assert len(listed) == 8 and listed[-1]["request_id"] != listed[0]["request_id"]
        big = await detail(handle, listed[-1]["id"])  # an odd turn: a long answer, cut
        assert big["dropped_bytes"] > 0 and big["kept_bytes"] <= 4096
        assert ring.held() <= bound


async def test_an_mcp_turn_shows_its_call_and_hides_the_server_token(
    upstream: FakeUpstream, mcp_urls: dict[str, str]
) -> None:
    from tests.fakes.mcp_server import TEST_TOKEN

    def model(req: Any) -> SSEReply:
        if req.body["messages"][-1]["role"] == "tool":
            return SSEReply(text_stream("It is 42."), max_piece=23)
        args = orjson.dumps({"a": 2, "b": 40}).decode()
        call = {
            "index": 0,
            "id": "call_m",
            "type": "function",
            "function": {"name": "mcp__calc__add", "arguments": args},
        }
        return SSEReply(
            chunk({"role": "assistant", "content": ""}) + chunk({"tool_calls": [call]}) + chunk({}, "tool_calls") + DONE
        )

    tool = {
        "type": "mcp",
        "server_label": "calc",
        "server_url": mcp_urls["http"],
        "require_approval": "never",
        "headers": {"Authorization": f"Bearer {TEST_TOKEN}"},
    }
    upstream.default = model
    more = {"mcp.allowed_servers": ["http://127.0.0.1:*"], "mcp.call_timeout_seconds": 5}
    async with running_proxy(settings(upstream, **more), environ=ENVIRON) as handle:
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                handle.base_url + "/responses",
                json={"model": "m", "input": "2+40?", "stream": True, "tools": [tool]},
                headers={"Authorization": f"Bearer {CLIENT_KEY}"},
            ) as r,
        ):
            raw = await r.read()
            assert r.status == 200
        validate_responses_sse(raw)
        (turn,) = await turns_of(handle)
        shown = await detail(handle, turn["id"])
    assert [leg["index"] for leg in shown["leg_calls"]] == [1, 2]
    (run,) = shown["tool_runs"]
    assert run["name"] == "mcp__calc__add" and '"a": 2' in run["arguments"].replace('"a":2', '"a": 2')
    assert "42" in run["result"]
    assert "mcp_call" in "".join(e["data"] for e in shown["events"])
    assert shown["client_request"]["tools"][0]["headers"] == {"Authorization": "[redacted]"}
    assert TEST_TOKEN not in orjson.dumps(shown).decode()


async def test_a_reverse_turn_is_shown_and_its_case_replays(upstream: FakeUpstream, tmp_path: Path) -> None:
    """A chat client in front of a Responses backend: the backend's Responses events beside the
    chat chunks sent, and a case that replays ``--from responses --to chat``."""
    from tests.support.responses_replies import answer

    upstream.reply(SSEReply(b"".join(answer(["Hel", "lo ", "there."])), max_piece=53))
    more = {"upstream.api": "responses"}
    async with running_proxy(settings(upstream, **more), environ=ENVIRON) as handle:
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                handle.base_url + "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
                headers={"Authorization": f"Bearer {CLIENT_KEY}"},
            ) as r,
        ):
            raw = await r.read()
            assert r.status == 200
        (turn,) = await turns_of(handle)
        shown = await detail(handle, turn["id"])
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"{handle.url}/inspector/api/turns/{turn['id']}/case", headers=ADMIN) as r,
        ):
            case = tmp_path / "reverse.json"
            case.write_bytes(await r.read())
    assert shown["path"] == "/responses" and shown["upstream_request"]["input"]
    assert {c["field"]: c["change"] for c in shown["changes"]}["messages"] == "mapped"
    assert "response.output_text.delta" in "".join(c["data"] for c in shown["chunks"])
    assert "".join(e["data"] for e in shown["events"]).encode() == raw
    saved = orjson.loads(case.read_bytes())
    assert (saved["from"], saved["to"]) == ("responses", "chat")
    done = replay(case)
    assert done.returncode == 0, done.stderr


async def test_a_whole_answer_is_listed_too(upstream: FakeUpstream) -> None:
    """``stream: false``: the body sent, the backend's answer and the Response the client got."""
    from tests.support.chat_replies import json_text

    upstream.reply(json_text("A whole answer."))
    async with running_proxy(settings(upstream), environ=ENVIRON) as handle:
        client = openai.AsyncOpenAI(base_url=handle.base_url, api_key=CLIENT_KEY, max_retries=0)
        got = await client.responses.create(model="m", input="all at once", store=True)
        (turn,) = await turns_of(handle)
        shown = await detail(handle, turn["id"])
        status, case = await get(f"{handle.url}/inspector/api/turns/{turn['id']}/case", ADMIN)
    assert turn["stream"] is False and turn["ending"] == "completed" and turn["response_id"] == got.id
    assert shown["upstream_request"]["messages"] == [{"role": "user", "content": "all at once"}]
    (answer,) = shown["chunks"]
    assert orjson.loads(answer["data"])["choices"][0]["message"]["content"] == "A whole answer."
    (sent,) = shown["events"]
    assert orjson.loads(sent["data"])["id"] == got.id
    assert BACKEND_KEY not in orjson.dumps(shown).decode() and CLIENT_KEY not in orjson.dumps(shown).decode()
    assert status == 200 and not case["complete"] and "stream false" in case["notes"][0]
