"""Debugging a backend (issue 37): debug lines, recorded turns, the /v1 hint.

- ``--log-level debug``: one turn shows the upstream URL, the mapped body (the backend key and the
  client's key redacted, long strings cut to ``debug_max_chars``), the status and headers, the
  first and last chunks, and each quirk repaired by kind; at info none of it.
- ``[logging] record_dir`` / ``serve --record``: a streamed turn's files replay with
  ``crossfeed translate`` to the very bytes the client got (forward and reverse; ids and clock the
  server's own made sequential, as translate's are); through the real command line, the same
  events with the ids and timestamps aside. No secret in any file.
- A base URL without ``/v1`` in front of a backend serving ``/v1/...`` only: ``/readyz`` is not
  ready and says so with the URL that would do; a turn's 404 names the path and the hint, never
  the backend's host or port, and the log has the URL that answered.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import structlog
from aiohttp import web

from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.logs import configure_logging
from crossfeed.proxy.streaming.lifecycle import PROBE_NOT_FOUND, PROBES
from crossfeed.translators.ids import SequentialIds
from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.app_server import running_proxy
from tests.support.captures import data_objects, read_capture
from tests.support.chat_chunks import DONE, chunk
from tests.support.serve_process import SERVE, serve_process
from tests.support.validators import validate_chat_sse, validate_responses_sse
from tests.support.waiting import wait_until
from tests.support.ws import FrameRecorder, ws_url

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
GUARD = 30.0  # seconds: hang guard of every wait; what is awaited takes milliseconds
BACKEND_KEY = "sk-backend-never-logged-4f1c"
CLIENT_KEY = "sk-client-never-logged-9a2e"


def log_lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]


async def post(url: str, body: dict[str, Any], **headers: str) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, await r.read()


# -- debug lines ----------------------------------------------------------------------------------


async def test_debug_turn_shows_the_mapped_body_redacted(upstream: FakeUpstream, tmp_path: Path) -> None:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "upstream.api_key_env": "CF_TEST_BACKEND_KEY",
            "store.backend": "memory",
            "logging.debug_max_chars": 100,
        },
    )
    # a legacy function_call beside the same tool_calls fragment (llama-cpp-python): one call, and a quirk
    call = {"name": "lookup", "arguments": '{"q": "x"}'}
    stream = (
        chunk({"role": "assistant", "content": "Looking."})
        + chunk(
            {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": call}], "function_call": call}
        )
        + chunk({}, "tool_calls", usage=(5, 3))
        + DONE
    )
    long_text = "spell it out " * 40  # 520 characters: cut to 100 in the debug line
    body = {
        "model": "m",
        "input": long_text,
        "stream": True,
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
    }
    buf = io.StringIO()
    try:
        for level in ("info", "debug"):
            configure_logging(level, "json", stream=buf)
            async with running_proxy(config, environ={"CF_TEST_BACKEND_KEY": BACKEND_KEY}) as handle:
                upstream.reply(SSEReply(stream))
                status, raw = await post(
                    handle.base_url + "/responses",
                    body,
                    Authorization=f"Bearer {CLIENT_KEY}",
                    **{"X-Request-ID": level},
                )
                assert status == 200, (raw, buf.getvalue()[-3000:])
                validate_responses_sse(raw)
                assert b"response.completed" in raw
                assert await wait_until(
                    lambda level=level: any(
                        e.get("event") == "request.completed" and e.get("request_id") == level for e in log_lines(buf)
                    ),
                    GUARD,
                )
    finally:
        configure_logging("info", "json", stream=io.StringIO())
        structlog.reset_defaults()
    text = buf.getvalue()
    assert BACKEND_KEY not in text and CLIENT_KEY not in text
    lines = log_lines(buf)
    info = [e for e in lines if e.get("request_id") == "info"]
    debug = [e for e in lines if e.get("request_id") == "debug"]
    assert {e["level"] for e in info} <= {"info", "warning"}, "info logs no debug line"
    assert not [e for e in info if e["event"].startswith(("upstream.request", "upstream.first", "translation.quirk"))]
    # the anomaly count at info, as before
    assert [e for e in info if e["event"] == "translation.anomaly"] == [
        next(e for e in info if e["event"] == "translation.anomaly")
    ]
    events = {e["event"]: e for e in debug if e["level"] == "debug"}
    sent = events["upstream.request"]
    assert sent["url"] == upstream.base_url + "/chat/completions"
    assert sent["sent_headers"]["Authorization"] == "[redacted]"
    mapped = sent["body"]
    assert mapped["model"] == "m" and mapped["stream"] is True
    assert mapped["tools"][0]["function"]["name"] == "lookup"  # the chat shape crossfeed made
    content = mapped["messages"][-1]["content"]
    assert content.startswith("spell it out ") and content.endswith("...[420 more characters]"), content
    assert len(content) == 100 + len("...[420 more characters]")
    got = events["upstream.response"]
    assert got["status"] == 200 and got["response_headers"]["Content-Type"].startswith("text/event-stream")
    assert events["upstream.first_chunk"]["chunk"].startswith("data: ")
    last = events["upstream.last_chunk"]
    assert last["ending"] == "ok" and last["reads"] >= 1 and last["bytes"] == len(stream)
    assert last["chunk"].startswith("data: ") or "[DONE]" in last["chunk"]  # the last read, cut to 100 characters
    quirk = events["translation.quirk"]
    assert (quirk["kind"], quirk["count"], quirk["leg"]) == ("legacy_function_call_dropped", 1, 1)
    assert 1 <= quirk["read"] <= last["reads"] and quirk["chunk"].startswith("data: ")  # the read it was repaired in
    ordered = [e["event"] for e in debug if e["level"] == "debug"]
    assert (
        ordered.index("upstream.request") < ordered.index("upstream.response") < ordered.index("upstream.first_chunk")
    )
    assert ordered.index("translation.quirk") < ordered.index("upstream.last_chunk")
    # what the backend got carried the key: only the logs hide it
    assert upstream.requests[-1].headers["Authorization"] == f"Bearer {BACKEND_KEY}"


# -- recorded turns -------------------------------------------------------------------------------


def translate(*args: str) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
    r = subprocess.run(
        [sys.executable, "-m", "crossfeed", "translate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def replay(turn: Path) -> bytes:
    """Run the command turn.json names, in the turn's directory."""
    meta = orjson.loads((turn / "turn.json").read_bytes())
    words = meta["replay"].split()
    assert words[:2] == ["crossfeed", "translate"], meta["replay"]
    return translate(*(str(turn / w) if (turn / w).exists() else w for w in words[2:]))


def recorded(where: Path) -> Path:
    (turn,) = [p for p in where.iterdir() if p.is_dir()]
    return turn


def first_created(raw: bytes) -> int:
    return int(next(o for o in data_objects(raw) if isinstance(o, dict) and "created" in o)["created"])


async def test_record_forward_turn_replays_to_the_same_bytes(upstream: FakeUpstream, tmp_path: Path) -> None:
    capture = read_capture("chat/azure-gpt5mini-tool-call.sse")
    where = tmp_path / "turns"
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "upstream.api_key_env": "CF_TEST_BACKEND_KEY",
            "store.backend": "memory",
            "logging.record_dir": str(where),
        },
    )
    # translate numbers ids from 1 and takes created_at from the stream: the server does the same here
    async with running_proxy(
        config, environ={"CF_TEST_BACKEND_KEY": BACKEND_KEY}, ids=SequentialIds(), clock=lambda: first_created(capture)
    ) as handle:
        upstream.reply(SSEReply(capture, max_piece=41))
        body = {
            "model": "m",
            "input": f"What is the weather in Paris? (my key: {CLIENT_KEY})",  # a secret where none belongs
            "stream": True,
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ],
        }
        status, sent = await post(handle.base_url + "/responses", body, Authorization=f"Bearer {CLIENT_KEY}")
    assert status == 200, sent
    validate_responses_sse(sent)
    turn = recorded(where)
    files = {p.name for p in turn.iterdir()}
    assert files == {"request.json", "upstream-request.json", "upstream.sse", "events.sse", "turn.json"}
    assert (turn / "upstream.sse").read_bytes() == capture  # the backend's stream as it came
    assert (turn / "events.sse").read_bytes() == sent  # what the client got
    meta = orjson.loads((turn / "turn.json").read_bytes())
    assert meta["replay"] == "crossfeed translate --from chat --to responses upstream.sse --request request.json"
    assert meta["ending"] == "ok" and meta["legs"][0]["status"] == 200
    assert meta["legs"][0]["url"] == upstream.base_url + "/chat/completions"
    hidden = "What is the weather in Paris? (my key: [redacted])"
    assert orjson.loads((turn / "request.json").read_bytes())["input"] == hidden
    assert orjson.loads((turn / "upstream-request.json").read_bytes())["messages"][-1]["content"] == hidden
    for path in turn.iterdir():
        assert BACKEND_KEY.encode() not in path.read_bytes() and CLIENT_KEY.encode() not in path.read_bytes()
    assert replay(turn) == sent


RESPONSES_CAPTURE = "responses/openai-gpt5-reasoning-function-call-usage.sse"


async def test_record_reverse_turn_replays_to_the_same_bytes(upstream: FakeUpstream, tmp_path: Path) -> None:
    capture = read_capture(RESPONSES_CAPTURE)
    where = tmp_path / "turns"
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "upstream.api": "responses",
            "store.backend": "memory",
            "logging.record_dir": str(where),
        },
    )
    created = next(o["response"]["created_at"] for o in data_objects(capture) if o.get("type") == "response.created")
    async with running_proxy(config, ids=SequentialIds(), clock=lambda: int(created)) as handle:
        upstream.reply(SSEReply(capture, max_piece=53))
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "weather?"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        status, sent = await post(handle.base_url + "/chat/completions", body)
    assert status == 200, sent
    validate_chat_sse(sent)
    turn = recorded(where)
    assert (turn / "upstream.sse").read_bytes() == capture
    assert (turn / "events.sse").read_bytes() == sent
    meta = orjson.loads((turn / "turn.json").read_bytes())
    assert meta["replay"] == "crossfeed translate --from responses --to chat upstream.sse --request request.json"
    assert replay(turn) == sent


async def test_record_websocket_turn_replays_to_the_same_frames(
    upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    capture = read_capture("chat/azure-gpt5mini-tool-call.sse")
    where = tmp_path / "turns"
    config = load_config(
        None, {}, {"upstream.base_url": upstream.base_url, "store.backend": "memory", "logging.record_dir": str(where)}
    )
    try:
        async with running_proxy(config, ids=SequentialIds(), clock=lambda: first_created(capture)) as handle:
            upstream.reply(SSEReply(capture))
            buf = io.StringIO()
            configure_logging("debug", "json", stream=buf)  # debug lines and recording together
            async with ws_frames.connect(ws_url(handle.url)) as ws:
                turn = await ws.turn(model="m", input="weather in Paris?")
    finally:
        configure_logging("info", "json", stream=io.StringIO())
        structlog.reset_defaults()
    assert turn.terminal == "response.completed"
    recorded_turn = recorded(where)
    lines = (recorded_turn / "events.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line) for line in lines] == turn.events  # one frame a line, as sent
    meta = orjson.loads((recorded_turn / "turn.json").read_bytes())
    assert meta["replay"].endswith(" --jsonl") and meta["events"] == "events.jsonl"
    assert replay(recorded_turn).splitlines() == lines
    assert {"upstream.request", "upstream.first_chunk", "upstream.last_chunk"} <= {e["event"] for e in log_lines(buf)}


# -- the real command line ------------------------------------------------------------------------


def normalized(raw: bytes) -> list[Any]:
    """The events with what each run makes its own (ids, timestamps) numbered by first use."""
    names: dict[str, str] = {}

    def name(match: re.Match[bytes]) -> bytes:
        token = match.group(0).decode()
        return names.setdefault(token, f"{token.split('_')[0]}_{len(names)}").encode()

    text = re.sub(rb"\b(resp|msg|fc|rs|call|chatcmpl)_[A-Za-z0-9]+", name, raw)
    text = re.sub(rb'"(created_at|created|completed_at)":\d+', rb'"\1":0', text)
    return data_objects(text)


@pytest.fixture
async def cli_proxy(upstream: FakeUpstream, tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    where = tmp_path / "recorded"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
    env |= {"CF_TEST_BACKEND_KEY": BACKEND_KEY, "CROSSFEED_DATA_DIR": str(tmp_path / "data"), "PYTHONUNBUFFERED": "1"}
    flags = ["--upstream", upstream.base_url, "--upstream-api-key-env", "CF_TEST_BACKEND_KEY", "--record", str(where)]
    served = await serve_process([*SERVE, *flags, "--log-format", "json"], env, tmp_path / "serve.log", timeout=20)
    try:
        yield served.url, where
    finally:
        await served.stop(30)
    logged = (tmp_path / "serve.log").read_bytes()
    assert b"record.enabled" in logged and BACKEND_KEY.encode() not in logged


async def test_serve_record_flag_replays_with_translate(upstream: FakeUpstream, cli_proxy: tuple[str, Path]) -> None:
    url, where = cli_proxy
    capture = read_capture("chat/azure-gpt5mini-tool-call.sse")
    upstream.reply(SSEReply(capture))
    body = {"model": "m", "input": "weather in Paris?", "stream": True}
    status, sent = await post(url + "/v1/responses", body)
    assert status == 200, sent
    assert await wait_until(lambda: where.exists() and any((p / "turn.json").exists() for p in where.iterdir()), GUARD)
    turn = recorded(where)
    assert (turn / "upstream.sse").read_bytes() == capture
    assert (turn / "events.sse").read_bytes() == sent
    out = replay(turn)
    assert normalized(out) == normalized(sent)
    assert len(data_objects(out)) == len(data_objects(sent)) > 5
    for path in turn.iterdir():
        assert BACKEND_KEY.encode() not in path.read_bytes()


# -- a base URL without /v1 ----------------------------------------------------------------------


@pytest.fixture
async def v1_only() -> AsyncIterator[tuple[str, list[str]]]:
    """A backend that serves /v1/models and /v1/chat/completions only; 404 (plain text) elsewhere."""
    seen: list[str] = []

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk({"content": "hi"}, "stop") + DONE)
        return resp

    @web.middleware
    async def note(request: web.Request, handler: Any) -> web.StreamResponse:
        seen.append(f"{request.method} {request.path}")
        return await handler(request)

    app = web.Application(middlewares=[note])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_base_url_without_v1_gets_the_hint(v1_only: tuple[str, list[str]]) -> None:
    root, seen = v1_only
    port = root.rsplit(":", 1)[1]
    with structlog.testing.capture_logs() as logs:
        async with running_proxy({"upstream.base_url": root, "store.backend": "memory"}) as handle:
            assert await wait_until(lambda: "default" in handle.app[PROBE_NOT_FOUND], GUARD), seen
            async with aiohttp.ClientSession() as s, s.get(handle.url + "/readyz") as r:
                assert r.status == 503
                ready = await r.json()
            status, raw = await post(handle.base_url + "/responses", {"model": "m", "input": "hi", "stream": True})
            plain_status, plain = await post(
                handle.base_url + "/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
    assert ready["status"] == "not ready"
    (problem,) = ready["problems"]
    assert problem.startswith(f"upstream 'default' at {root} answered 404 to its model listing (GET {root}/models)")
    assert f"does base_url need /v1? ({root}/v1/models answers: set base_url to {root}/v1)" in problem
    # the turn's error: the path the backend did not know and the same hint; no host, no port
    assert status == 404
    error = orjson.loads(raw)["error"]
    assert error["message"].startswith("the upstream 'default' answered 404 to POST /chat/completions")
    assert "does base_url need /v1?" in error["message"] and error["code"] == "upstream_path_not_found"
    assert "127.0.0.1" not in raw.decode() and port not in raw.decode()
    # a chat request passed through unchanged gets the same
    assert plain_status == 404
    assert "POST /chat/completions" in orjson.loads(plain)["error"]["message"]
    assert "does base_url need /v1?" in orjson.loads(plain)["error"]["message"] and port not in plain.decode()
    # the operator's log has the URL that answered
    urls = [e["url"] for e in logs if e["event"] == "upstream.not_found"]
    assert urls == [root + "/chat/completions"] * 2
    assert any(e["event"] == "upstream.probe.not_found" for e in logs)
    assert "GET /v1/models" in seen and "GET /models" in seen


async def test_base_url_with_v1_is_ready(v1_only: tuple[str, list[str]]) -> None:
    root, _ = v1_only
    async with running_proxy({"upstream.base_url": root + "/v1", "store.backend": "memory"}) as handle:
        assert await wait_until(lambda: "default" in handle.app[PROBES], GUARD)
        async with aiohttp.ClientSession() as s, s.get(handle.url + "/readyz") as r:
            assert r.status == 200, await r.text()
        status, raw = await post(handle.base_url + "/responses", {"model": "m", "input": "hi", "stream": True})
        assert status == 200 and b"response.completed" in raw


async def test_a_model_404_keeps_the_backends_message(upstream: FakeUpstream) -> None:
    """A 404 that names a model is the backend's answer about the model, not about the path."""
    async with running_proxy({"upstream.base_url": upstream.base_url, "store.backend": "memory"}) as handle:
        error = {"message": "The model `m` does not exist.", "type": "invalid_request_error", "code": "model_not_found"}
        upstream.reply(JSONReply({"error": error}, status=404))
        status, raw = await post(handle.base_url + "/responses", {"model": "m", "input": "hi", "stream": True})
    assert status == 404
    assert orjson.loads(raw)["error"] == {**error, "param": None}
