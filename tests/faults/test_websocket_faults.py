"""WebSocket mode's protocol faults, with raw aiohttp WebSocket clients (proxy/http/websocket.py).

Every frame any socket here receives goes through the ``ws_frames`` validator (tests/support/ws.py):
each response through the strict stream validator, each request-level error frame for its exact
shape. After every bad frame the same socket must still serve a normal turn. Waits are polled
conditions (``wait_until``) or hang guards, never sleeps; nothing measures speed.

SIGTERM with 20 open sockets runs crossfeed as a real subprocess (tests/faults/harness.py).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from crossfeed.proxy.http.websocket import SOCKETS
from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.logs import configure_logging
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.faults.fault_upstream import FAULTS, FaultUpstream, paced
from tests.faults.harness import ProxyProcess, check_envelope
from tests.support.app_server import ProxyHandle, running_proxy, start_proxy
from tests.support.chat_chunks import chunk
from tests.support.waiting import wait_until
from tests.support.ws import FrameRecorder, RawWS, Turn, is_request_error, ws_url
from tests.support.ws_replies import MODEL, error_reply, midstream_failure, plain, text_reply, user

pytestmark = pytest.mark.timeout(90)

GUARD = 30.0  # seconds: hang guard of every wait; what is awaited takes milliseconds
ROUTE = "/v1/responses (websocket)"


def held_reply(*pieces: str) -> tuple[SSEReply, asyncio.Event]:
    """A text reply whose backend stops writing after the first text chunk until the gate opens."""
    reply, gate = text_reply(*pieces), asyncio.Event()
    reply.holds = {len(chunk({"role": "assistant", "content": ""}) + chunk({"content": pieces[0]})): gate}
    return reply, gate


async def read_until(ws: RawWS, kind: str) -> list[dict[str, Any]]:
    frames = []
    for _ in range(1000):
        frames.append(await ws.recv())
        if frames[-1]["type"] == kind:
            return frames
    raise AssertionError(f"no {kind} in 1000 frames")


async def normal_turn(ws: RawWS, upstream: FakeUpstream, text: str = "Still fine.") -> None:
    """The socket still serves a turn after a fault."""
    upstream.reply(text_reply(text))
    turn = await ws.turn(model=MODEL, input="are you there?")
    assert turn.terminal == "response.completed" and turn.text == text, turn
    assert upstream.requests[-1].body["messages"] == [user("are you there?")]


def upgrade_headers(**extra: str) -> dict[str, str]:
    return {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        **extra,
    }


async def http_get(url: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, await r.read(), dict(r.headers)


BAD_FRAMES = {  # name -> (payload, status, code, param)
    "not-json": ("{not json", 400, "invalid_json", None),
    "json-array": ("[1, 2]", 400, "invalid_type", None),
    "binary": (b'{"type": "response.create", "model": "gpt-4o"}', 400, "invalid_frame", None),
    "unknown-type": ('{"type": "session.update"}', 400, "invalid_value", "type"),
    "cancel-nothing": ('{"type": "response.cancel"}', 400, "response_not_found", "response_id"),
    "steer-no-target": (
        '{"type": "response.steer", "input": "x"}',
        400,
        "missing_required_parameter",
        "previous_response_id",
    ),
    "steer-stream-id": (
        '{"type": "response.steer", "previous_response_id": "resp_1", "input": "x", "stream_id": "a"}',
        400,
        "unknown_parameter",
        "stream_id",
    ),
    "stream-id-not-string": (
        '{"type": "response.create", "model": "gpt-4o", "stream_id": 7}',
        400,
        "invalid_type",
        "stream_id",
    ),
    "missing-type": ('{"model": "gpt-4o", "input": "x"}', 400, "missing_required_parameter", "type"),
    "number-type": ('{"type": 7}', 400, "missing_required_parameter", "type"),
    "missing-model": ('{"type": "response.create", "input": "x"}', 400, "missing_required_parameter", "model"),
    "generate-not-bool": (
        '{"type": "response.create", "model": "gpt-4o", "generate": "no"}',
        400,
        "invalid_type",
        "generate",
    ),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
async def test_bad_frame_gets_an_error_frame_and_the_socket_stays_usable(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, name: str
) -> None:
    payload, status, code, param = BAD_FRAMES[name]
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await (ws.ws.send_bytes(payload) if isinstance(payload, bytes) else ws.ws.send_str(payload))
        refused = await ws.read_turn()
        assert (refused.error["status"], refused.error["code"], refused.error["param"]) == (status, code, param)
        assert upstream.requests == []
        await normal_turn(ws, upstream)
    assert ws_frames.validate() == (1, 1)


@pytest.mark.parametrize("proxy_overrides", [{"server.max_body_bytes": 4096}])
@pytest.mark.parametrize("size", [4097, 2 * 4096], ids=["just-over", "twice"])
async def test_frame_over_max_body_bytes(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, size: int
) -> None:
    """Over ``max_body_bytes`` and up to twice it: an error frame, and the socket goes on."""
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await ws.ws.send_str(padded_create(size))
        refused = await ws.read_turn()
        assert (refused.error["status"], refused.error["code"]) == (413, "request_too_large")
        await normal_turn(ws, upstream)
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("proxy_overrides", [{"server.max_body_bytes": 4096}])
async def test_frame_over_twice_max_body_bytes_closes_with_1009(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    """Past twice the limit aiohttp reads no further (the memory bound): 1009, message too big,
    and the server goes on serving new sockets."""
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await ws.ws.send_str(padded_create(2 * 4096 + 1))
        assert await ws.closed() == 1009
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await normal_turn(ws, upstream)
    assert len(upstream.requests) == 1


def padded_create(size: int) -> str:
    frame = json.dumps({"type": "response.create", "model": MODEL, "input": ""})
    frame = frame[:-2] + "x" * (size - len(frame)) + frame[-2:]
    assert len(frame) == size
    return frame


@pytest.mark.parametrize(
    "key,value",
    [("stream", False), ("stream_options", {"include_usage": True}), ("background", False), ("background", True)],
)
async def test_http_only_params_are_refused_by_name(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, key: str, value: Any
) -> None:
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        refused = await ws.turn(model=MODEL, input="hi", **{key: value})
        assert (refused.error["status"], refused.error["param"]) == (400, key)
        assert refused.error["code"] == "unsupported_parameter" and f"`{key}`" in refused.error["message"]
        await normal_turn(ws, upstream)
    assert len(upstream.requests) == 1


async def test_stream_true_is_accepted_and_the_backend_streams(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    """Codex sends ``stream: true`` in every frame: it says what is so anyway."""
    upstream.reply(text_reply("Streamed."))
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        turn = await ws.turn(model=MODEL, input="hi", stream=True)
    assert turn.text == "Streamed."
    (request,) = upstream.requests
    assert request.body["stream"] is True and request.body["stream_options"] == {"include_usage": True}
    assert ws_frames.validate() == (1, 0)


async def test_second_create_while_one_is_in_flight(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    reply, gate = held_reply("Only ", "one ", "answer.")
    upstream.reply(reply, text_reply("Continued."))
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await ws.create(model=MODEL, input="first")
        head = await read_until(ws, "response.output_text.delta")  # the backend now holds the stream
        await ws.create(model=MODEL, input="second")
        refused = await ws.recv()
        assert is_request_error(refused) and refused["status"] == 409
        assert refused["error"]["code"] == "response_already_in_progress"
        gate.set()
        first = Turn(head + (await ws.read_turn()).events)
        assert first.terminal == "response.completed" and first.text == "Only one answer."
        assert len(upstream.requests) == 1 and upstream.requests[0].body["messages"] == [user("first")]
        # nothing changed: the connection still remembers the first response
        later = await ws.turn(model=MODEL, input="third", store=False, previous_response_id=first.response["id"])
    assert later.text == "Continued."
    assert plain(upstream.requests[1].body["messages"]) == [
        ("user", "first"),
        ("assistant", "Only one answer."),
        ("user", "third"),
    ]
    assert ws_frames.validate() == (2, 1)


async def test_client_gone_mid_response_closes_the_backend_request(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    reply, gate = held_reply("never ", "finished")
    upstream.reply(reply)
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await ws.create(model=MODEL, input="hi")
        await read_until(ws, "response.output_text.delta")
        assert upstream.open_requests == 1
        ws.log.allow_cut()  # this client leaves before the terminal event
    # the backend's request is cancelled (about at once; the guard is the "within a second")
    assert await wait_until(lambda: upstream.open_requests == 0, 1.5), "backend request still open"
    assert upstream.cancelled == 1 and not gate.is_set()
    assert await wait_until(lambda: not proxy.app[SOCKETS], GUARD)


@pytest.mark.parametrize("status", [400, 429, 500, 503])
async def test_backend_error_before_the_stream(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, status: int
) -> None:
    upstream.reply(error_reply(status, f"backend says no ({status})"))
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        refused = await ws.turn(model=MODEL, input="hi")
        assert refused.error["status"] == status and refused.error["message"] == f"backend says no ({status})"
        await normal_turn(ws, upstream)
    assert ws_frames.validate() == (1, 1)


TRUNCATED = SSEReply(chunk({"role": "assistant", "content": ""}) + chunk({"content": "cut "}), seed=5, max_piece=11)


@pytest.mark.parametrize("reply", [midstream_failure("the backend broke"), TRUNCATED], ids=["error-object", "cut"])
async def test_backend_failing_mid_response(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder, reply: SSEReply
) -> None:
    upstream.reply(reply)
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        failed = await ws.turn(model=MODEL, input="hi")
        assert failed.types()[-2:] == ["error", "response.failed"] and failed.errors == []
        assert sum(t in ("response.completed", "response.failed", "response.incomplete") for t in failed.types()) == 1
        assert failed.response["error"]["message"]
        await normal_turn(ws, upstream)  # nothing else of the failed response follows
    assert ws_frames.validate() == (2, 0)


@pytest.mark.parametrize("proxy_overrides", [{"server.websocket": False}])
async def test_websocket_off_answers_426(proxy: ProxyHandle, upstream: FakeUpstream) -> None:
    status, body, _ = await http_get(proxy.base_url + "/responses", upgrade_headers())
    assert status == 426
    assert check_envelope(body, status)["code"] == "websocket_disabled"
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await s.ws_connect(ws_url(proxy.url))
    assert info.value.status == 426 and upstream.requests == []


async def test_plain_get_is_405(proxy: ProxyHandle) -> None:
    status, body, headers = await http_get(proxy.base_url + "/responses", {})
    assert status == 405 and "POST" in headers.get("Allow", "")
    check_envelope(body, status)


async def test_inbound_keys_checked_in_the_handshake(
    upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    config = load_config(
        None,
        {},
        {"upstream.base_url": upstream.base_url, "store.backend": "memory", "server.inbound_keys_env": "CF_WS_KEYS"},
    )
    async with running_proxy(config, environ={"CF_WS_KEYS": "k-good"}) as handle:
        for auth in ({"Authorization": "Bearer k-wrong"}, {}):
            status, body, _ = await http_get(handle.base_url + "/responses", upgrade_headers(**auth))
            assert status == 401 and check_envelope(body, status)["code"] == "invalid_api_key"
        good = {"Authorization": "Bearer k-good"}
        async with ws_frames.connect(ws_url(handle.url, "/responses"), headers=good) as ws:  # the path without /v1
            await normal_turn(ws, upstream, "Authorised.")
    assert len(upstream.requests) == 1 and ws_frames.validate() == (1, 0)


@pytest.mark.parametrize("proxy_overrides", [{"server.websocket_max_seconds": 0.5}])
async def test_connection_lifetime_limit(proxy: ProxyHandle, ws_frames: FrameRecorder) -> None:
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        ended = await ws.read_turn()
        assert (ended.error["code"], ended.error["status"]) == ("websocket_connection_limit_reached", 400)
        assert await ws.closed() == 1000
    assert ws_frames.validate() == (0, 1)


@pytest.mark.parametrize("proxy_overrides", [{"server.websocket_max_seconds": 1.0}])
async def test_lifetime_limit_ends_a_response_in_flight_properly(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    """A response still streaming when the lifetime runs out gets ``error`` + ``response.failed``
    (code ``websocket_connection_limit_reached``), then the limit's error frame, then 1000."""
    reply, gate = held_reply("partial ", "never sent")
    upstream.reply(reply)
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        await ws.create(model=MODEL, input="a long answer")
        cut = await ws.read_turn()  # the gate stays shut: only the limit ends it
        assert cut.terminal == "response.failed"
        assert cut.response["error"]["code"] == "websocket_connection_limit_reached"
        assert "partial" in json.dumps(cut.response["output"]) and "never sent" not in json.dumps(cut.events)
        ended = await ws.read_turn()
        assert ended.error["code"] == "websocket_connection_limit_reached"
        assert await ws.closed() == 1000
    gate.set()
    await wait_until(lambda: upstream.open_requests == 0, timeout=GUARD)
    assert ws_frames.validate() == (1, 1)


async def test_summary_line_and_metrics_per_turn(upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    try:
        async with running_proxy({"upstream.base_url": upstream.base_url, "store.backend": "memory"}) as handle:
            upstream.reply(text_reply("Counted.", usage=(9, 2)))
            async with ws_frames.connect(ws_url(handle.url), headers={"X-Request-ID": "ws-sum-1"}) as ws:
                assert (await ws.turn(model="m", input="a")).text == "Counted."
                assert (await ws.turn(model="m", input="b", previous_response_id="resp_gone")).error["status"] == 400

            def lines() -> list[dict[str, Any]]:
                return [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]

            assert await wait_until(lambda: any(e.get("event") == "websocket.closed" for e in lines()), GUARD)
            async with aiohttp.ClientSession() as s, s.get(handle.url + "/metrics") as r:
                metrics = await r.text()
    finally:
        structlog.reset_defaults()
    done = {e["request_id"]: e for e in lines() if e.get("event") == "request.completed" and e.get("route") == ROUTE}
    assert set(done) == {"ws-sum-1.1", "ws-sum-1.2"}, done
    assert (done["ws-sum-1.1"]["status"], done["ws-sum-1.1"]["terminal"]) == (200, "completed")
    assert done["ws-sum-1.1"]["usage"] == {"in": 9, "out": 2} and done["ws-sum-1.1"]["model"] == "m"
    assert done["ws-sum-1.2"]["status"] == 400
    (closed,) = [e for e in lines() if e.get("event") == "websocket.closed"]
    assert closed["turns"] == 2 and closed["request_id"] == "ws-sum-1"
    assert f'crossfeed_requests_total{{key="none",model="m",route="{ROUTE}",status="200"}} 1.0' in metrics
    assert f'crossfeed_requests_total{{key="none",model="m",route="{ROUTE}",status="400"}} 1.0' in metrics
    assert f'crossfeed_terminal_events_total{{route="{ROUTE}",terminal="completed"}} 1.0' in metrics
    assert 'route="/v1/responses",' not in metrics  # the socket itself is no request of the HTTP route
    assert ws_frames.validate() == (1, 1)


async def raw_upgrade(url: str, path: str = "/v1/responses") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A socket upgraded by hand (no client library): the request line, the 101 read back."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = "".join(f"{k}: {v}\r\n" for k, v in upgrade_headers(Host=f"{host}:{port}").items())
    writer.write(f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), GUARD)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return reader, writer


def masked_text_frame(text: str) -> bytes:
    """One client text frame (FIN, opcode 1), masked as RFC 6455 requires of clients."""
    payload, mask = text.encode(), os.urandom(4)
    assert len(payload) < 126
    return bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def logged_proxy(upstream: FakeUpstream) -> tuple[ProxyHandle, Callable[[], list[dict[str, Any]]]]:
    """crossfeed in front of ``upstream`` with its JSON log lines kept: the handle, and a function
    that returns the lines so far (the caller cleans up and resets structlog)."""
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    handle = await start_proxy({"upstream.base_url": upstream.base_url, "store.backend": "memory"})
    return handle, lambda: [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]


@pytest.mark.parametrize("mid_turn", [False, True], ids=["idle", "mid-response"])
async def test_socket_dropped_without_a_close_frame_is_no_5xx(upstream: FakeUpstream, mid_turn: bool) -> None:
    """Codex never sends a close frame: it drops the TCP connection. That is the client leaving,
    logged as 101 with ``ending: client_disconnected`` (and a cut turn as ``client_disconnected``
    too), never as a 500; a socket closed properly logs 101 with ``ending: closed``."""
    handle, lines = await logged_proxy(upstream)
    try:
        reply, _gate = held_reply("never ", "finished")
        upstream.reply(reply)
        _reader, writer = await raw_upgrade(handle.url)
        if mid_turn:
            writer.write(masked_text_frame('{"type":"response.create","model":"m","input":"hi"}'))
            await writer.drain()
            assert await wait_until(lambda: upstream.open_requests == 1, GUARD)
        writer.transport.abort()  # no close frame, no FIN handshake: the connection is just gone
        assert await wait_until(lambda: any(e.get("event") == "websocket.closed" for e in lines()), GUARD)
        # a proper client, for contrast: close frame 1000
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url(handle.url)) as ws:
            await ws.close()
        assert await wait_until(lambda: len([e for e in lines() if e.get("event") == "websocket.closed"]) == 2, GUARD)
        async with aiohttp.ClientSession() as s, s.get(handle.url + "/metrics") as r:
            metrics = await r.text()
    finally:
        await handle.stop()
        structlog.reset_defaults()
    dropped, closed = [e for e in lines() if e.get("event") == "websocket.closed"]
    assert (dropped["status"], dropped["ending"]) == (101, "client_disconnected"), dropped
    assert (closed["status"], closed["ending"], closed["close_code"]) == (101, "closed", 1000), closed
    assert not [e for e in lines() if isinstance(e.get("status"), int) and e["status"] >= 500], lines()
    assert not [e for e in lines() if e.get("level") in ("error", "critical")], lines()
    if mid_turn:
        (turn,) = [e for e in lines() if e.get("event") == "request.completed" and e.get("route") == ROUTE]
        assert turn["terminal"] == "client_disconnected" and turn["status"] < 500, turn
        assert upstream.cancelled == 1
    assert 'status="5' not in metrics


@pytest.mark.parametrize("stream", [False, True], ids=["waiting-for-the-answer", "mid-stream"])
async def test_http_client_gone_is_no_5xx(upstream: FakeUpstream, stream: bool) -> None:
    """The same over HTTP: a client that leaves while its answer is being made is the client's
    doing. Before any byte went out the line says 499 (client closed request); mid-stream the
    200 already sent stands; both with ``terminal: client_disconnected``, and no 5xx anywhere."""
    handle, lines = await logged_proxy(upstream)
    try:
        reply, _gate = held_reply("never ", "finished")
        upstream.reply(reply)
        host, port = handle.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        body = json.dumps({"model": "m", "input": "hi", "stream": stream}).encode()
        writer.write(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        assert await wait_until(lambda: upstream.open_requests == 1, GUARD)
        if stream:
            await asyncio.wait_for(reader.readuntil(b"\n\n"), GUARD)  # the headers and a first event
        writer.transport.abort()
        assert await wait_until(lambda: any(e.get("event") == "request.completed" for e in lines()), GUARD)
        assert await wait_until(lambda: upstream.open_requests == 0, GUARD)
        async with aiohttp.ClientSession() as s, s.get(handle.url + "/metrics") as r:
            metrics = await r.text()
    finally:
        await handle.stop()
        structlog.reset_defaults()
    (done,) = [e for e in lines() if e.get("event") == "request.completed"]
    assert (done["status"], done["terminal"]) == ((200 if stream else 499), "client_disconnected"), done
    assert not [e for e in lines() if e.get("level") in ("error", "critical")], lines()
    assert 'status="5' not in metrics


# -- SIGTERM with 20 open sockets -------------------------------------------------------------------

# As in test_soak_shutdown.py, each case far from its boundary whatever the machine's speed:
# `fault:paced` lasts 30 s against a 2 s drain (crossfeed ends every response itself), `paced_5s`
# about 5 s against a 60 s drain (every response ends normally).
CASES = {"fault:paced": 2.0, "fault:paced_5s": 60.0}  # model -> drain_seconds
SOCKETS_OPEN = 20


@pytest.fixture
def paced_5s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAULTS, "paced_5s", paced(0.25, 20))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", list(CASES), ids=["responses-outlive-drain", "responses-end-within-drain"])
async def test_sigterm_with_20_open_sockets(
    tmp_path: Path, ws_frames: FrameRecorder, model: str, paced_5s: None
) -> None:
    drain = CASES[model]
    started, opened = asyncio.Event(), []

    async def one(n: int) -> tuple[str, int | None]:
        async with ws_frames.connect(ws_url(proxy.url), headers=proxy.auth, label=f"socket {n}") as ws:
            await ws.create(model=model, input="Say hello")
            head = await read_until(ws, "response.output_text.delta")
            opened.append(n)
            if len(opened) == SOCKETS_OPEN:
                started.set()
            turn = Turn(head + (await ws.read_turn(timeout=drain + GUARD)).events)
            error = turn.response.get("error") or {}
            ending = turn.terminal + (f":{error.get('code')}" if turn.terminal == "response.failed" else "")
            return ending, await ws.closed(timeout=drain + GUARD)

    async with FaultUpstream() as up:
        proxy = ProxyProcess(tmp_path, up.base_url, drain=drain)
        await proxy.start()
        tasks = [asyncio.ensure_future(one(n)) for n in range(SOCKETS_OPEN)]
        try:
            try:
                await asyncio.wait_for(started.wait(), GUARD)
            except TimeoutError:
                raise AssertionError(f"only {len(opened)} of {SOCKETS_OPEN} responses started") from None
            assert up.inflight == SOCKETS_OPEN
            proxy.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            try:
                results = await asyncio.wait_for(asyncio.gather(*tasks), drain + 2 * GUARD)
                code = await asyncio.wait_for(proxy.proc.wait(), drain + GUARD)  # type: ignore[union-attr]
            except TimeoutError:
                raise AssertionError(f"sockets or process still open long after SIGTERM (drain {drain:g}s)") from None
        finally:
            for task in tasks:
                task.cancel()
            await proxy.stop(timeout=5)
        endings = Counter(ending for ending, _ in results)
        print(
            f"\nsigterm[websocket/{model}]: endings {dict(endings)}, close codes "
            f"{dict(Counter(c for _, c in results))}, exit {code}"
        )
        assert code == 0, f"crossfeed exited {code} after SIGTERM"
        assert [c for _, c in results] == [1001] * SOCKETS_OPEN
        if model == "fault:paced":
            assert set(endings) == {"response.failed:server_shutting_down"}, endings
        else:
            assert set(endings) == {"response.completed"}, endings
        assert await up.wait_idle(GUARD), "upstream requests left open after shutdown"
    assert ws_frames.validate() == (SOCKETS_OPEN, 0)
    proxy.assert_no_secrets()
