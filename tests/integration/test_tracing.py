"""OpenTelemetry tracing (proxy/runtime/tracing.py): what a collector gets from crossfeed.

A local OTLP/HTTP receiver (tests/fakes/otlp.py) decodes the protobuf the SDK's exporter sends.
The proxy runs with the standard variables pointing at it; the spans are read once the proxy
has stopped (its cleanup flushes them). Each test checks the tree: the turn's server span is a
child of the client's ``traceparent``, every other span is under it, and the ``traceparent``
the fake backend (or the MCP server) saw names the span of that call.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.fakes.otlp import OtlpReceiver, Span
from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.faults.pool_harness import MODEL, error_reply, pool_config, replicas, served
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.serve_process import SERVE, serve_process
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
SECRET = "sk-upstream-secret-0123456789"


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    await receiver.start()
    yield receiver
    await receiver.close()


@contextlib.asynccontextmanager
async def traced(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, overrides: dict[str, Any], **env: str
) -> AsyncIterator[ProxyHandle]:
    """The proxy with tracing on (the SDK reads the process environment, the app its own)."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url, "OTEL_BSP_SCHEDULE_DELAY": "50", **env}
    for name in (
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
        "OTEL_SDK_DISABLED",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with running_proxy(overrides, environ={**env, "UPKEY": SECRET}) as handle:
        yield handle


def settings(upstream: FakeUpstream, tmp_path: Any, **more: Any) -> dict[str, Any]:
    return {
        "upstream.base_url": upstream.base_url,
        "upstream.api_key_env": "UPKEY",
        "store.data_dir": str(tmp_path / "data"),
        **more,
    }


@dataclass
class ServedUrl:
    url: str


async def post(proxy: ProxyHandle | ServedUrl, body: dict[str, Any], path: str = "/v1/responses") -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.url + path, json=body, headers={"traceparent": TRACEPARENT}) as r,
    ):
        return r.status, await r.read()


def answer(text: str, usage: tuple[int, int] = (90, 12)) -> SSEReply:
    return SSEReply(
        chunk({"role": "assistant", "content": ""})
        + chunk({"content": text}, "stop")
        + chunk(None, usage=usage)
        + DONE,
        max_piece=23,
    )


def call(name: str, args: dict[str, Any]) -> SSEReply:
    raw = orjson.dumps(args).decode()
    tool_call = {"index": 0, "id": "call_0", "type": "function", "function": {"name": name, "arguments": raw}}
    body = chunk({"role": "assistant", "content": ""}) + chunk({"tool_calls": [tool_call]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(50, 5)) + DONE, max_piece=31)


def chat_json(text: str, usage: tuple[int, int]) -> JSONReply:
    message = {"role": "assistant", "content": text}
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
    )


def tool_then_answer(name: str, args: dict[str, Any]) -> Any:
    """A model that calls ``name`` once, then answers with what the tool returned."""

    def reply(req: Recorded) -> SSEReply:
        last = req.body["messages"][-1]
        return answer(f"The tool said: {last['content']}") if last["role"] == "tool" else call(name, args)

    return reply


def turn_span(spans: list[Span]) -> Span:
    return turn_span_of(spans, service="crossfeed")


def turn_span_of(spans: list[Span], service: str) -> Span:
    """The turn's server span, a child of the client's traceparent."""
    servers = [s for s in spans if s.kind == "server"]
    assert len(servers) == 1, [(s.name, s.kind) for s in spans]
    turn = servers[0]
    assert (turn.trace_id, turn.parent_id) == (TRACE_ID, CLIENT_SPAN)
    assert all(s.trace_id == TRACE_ID for s in spans)
    assert turn.resource["service.name"] == service
    return turn


def parent_of(traceparent: str) -> tuple[str, str]:
    version, trace_id, span_id, flags = traceparent.split("-")
    assert (version, flags) == ("00", "01")
    return trace_id, span_id


def header(req: Recorded, name: str) -> str:
    return {k.lower(): v for k, v in req.headers.items()}[name]


async def test_a_streamed_turn(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    upstream.default = answer("Hello there.")
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path)) as proxy:
        status, raw = await post(proxy, {"model": "m", "input": "hi", "stream": True, "prompt_cache_key": "conv-1"})
        assert status == 200 and b"response.completed" in raw
    turn = turn_span(otlp.spans)
    legs = [s for s in otlp.spans if s.kind == "client"]
    assert len(legs) == 1 and len(otlp.spans) == 2
    leg = legs[0]
    assert turn.name == "chat m" and leg.name == "chat m"
    assert leg.parent_id == turn.span_id
    a = turn.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert (a["gen_ai.request.model"], a["gen_ai.response.model"]) == ("m", "m")
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (90, 12)
    assert a["gen_ai.response.finish_reasons"] == ["completed"]
    assert a["gen_ai.conversation.id"] == "conv-1"
    assert a["crossfeed.route"] == "/v1/responses" and a["crossfeed.stream"] is True
    assert 0 < a["gen_ai.response.time_to_first_chunk"] < 5
    assert "gen_ai.input.messages" not in a  # content only when the operator opts in
    b = leg.attributes
    assert (b["gen_ai.operation.name"], b["gen_ai.request.model"], b["crossfeed.upstream"]) == ("chat", "m", "default")
    assert (b["gen_ai.usage.input_tokens"], b["gen_ai.usage.output_tokens"]) == (90, 12)
    assert b["server.address"] == "127.0.0.1" and b["url.path"].endswith("/chat/completions")
    assert 0 < b["gen_ai.response.time_to_first_chunk"] <= a["gen_ai.response.time_to_first_chunk"]
    assert turn.status == leg.status == 0
    # the backend got the leg's span as its parent, in the client's trace
    assert parent_of(header(upstream.requests[0], "traceparent")) == (TRACE_ID, leg.span_id)


async def test_a_web_search_turn(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    search = FakeSearch(pages={"*": [("https://example.org/a", "A page", "What the page says.")]})
    await search.start()
    upstream.default = tool_then_answer("web_search", {"query": "what is a"})
    overrides = settings(upstream, tmp_path, **{"web_search.backend": "searxng", "web_search.url": search.url})
    try:
        async with traced(monkeypatch, otlp, overrides) as proxy:
            status, raw = await post(
                proxy, {"model": "m", "input": "a?", "stream": True, "tools": [{"type": "web_search"}]}
            )
            assert status == 200 and b"web_search_call" in raw
    finally:
        await search.close()
    turn = turn_span(otlp.spans)
    legs = sorted((s for s in otlp.spans if s.kind == "client"), key=lambda s: s.start_ns)
    tools = [s for s in otlp.spans if s.name == "execute_tool web_search"]
    assert len(legs) == 2 and len(tools) == 1 and len(otlp.spans) == 4
    assert all(s.parent_id == turn.span_id for s in [*legs, *tools])
    assert legs[0].end_ns <= tools[0].start_ns and tools[0].end_ns <= legs[1].start_ns
    t = tools[0].attributes
    assert (t["gen_ai.operation.name"], t["gen_ai.tool.name"], t["crossfeed.search.backend"]) == (
        "execute_tool",
        "web_search",
        "searxng",
    )
    assert t["crossfeed.search.results"] == 1 and tools[0].status == 0
    assert legs[0].attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]  # what the backend said
    assert legs[1].attributes["gen_ai.response.finish_reasons"] == ["stop"]
    a = turn.attributes
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (50 + 90, 5 + 12)
    assert a["crossfeed.hosted_calls"] == 1
    seen = [parent_of(header(r, "traceparent")) for r in upstream.requests]
    assert seen == [(TRACE_ID, legs[0].span_id), (TRACE_ID, legs[1].span_id)]


async def test_an_mcp_turn(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any, mcp_urls: dict[str, str]
) -> None:
    upstream.default = tool_then_answer("mcp__calc__traceparent", {})
    tool = {
        "type": "mcp",
        "server_label": "calc",
        "server_url": mcp_urls["http"],
        "require_approval": "never",
        "headers": {"Authorization": "Bearer mcp-secret-token-7f3a"},
    }
    overrides = settings(upstream, tmp_path, **{"mcp.allowed_servers": ["http://127.0.0.1:*"]})
    async with traced(monkeypatch, otlp, overrides) as proxy:
        status, raw = await post(proxy, {"model": "m", "input": "trace?", "stream": True, "tools": [tool]})
        assert status == 200 and b"response.completed" in raw
    turn = turn_span(otlp.spans)
    listing = [s for s in otlp.spans if s.name == "mcp tools/list"]
    calls = [s for s in otlp.spans if s.name == "execute_tool traceparent"]
    legs = [s for s in otlp.spans if s.kind == "client"]
    assert len(listing) == len(calls) == 1 and len(legs) == 2
    assert all(s.parent_id == turn.span_id for s in [*listing, *calls, *legs])
    c = calls[0].attributes
    assert (c["gen_ai.tool.name"], c["mcp.server.label"], c["server.address"]) == ("traceparent", "calc", "127.0.0.1")
    assert (c["gen_ai.operation.name"], c["mcp.method.name"]) == ("execute_tool", "tools/call")
    assert listing[0].attributes["mcp.method.name"] == "tools/list" and listing[0].status == 0
    # the MCP server got the tool call's span as the parent (its tool returns the header it saw)
    final = [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")][-1]
    mcp_call = next(o for o in final["response"]["output"] if o["type"] == "mcp_call")
    assert parent_of(mcp_call["output"]) == (TRACE_ID, calls[0].span_id)


async def test_a_failed_backend_call_and_the_content_opt_in(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    upstream.reply(JSONReply({"error": {"message": "overloaded", "type": "server_error"}}, status=503))
    upstream.reply(chat_json(f"Your key is {SECRET}.", (7, 5)))
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path), **env) as proxy:
        status, _ = await post(proxy, {"model": "m", "input": "hi", "stream": True})
        assert status == 503
        body = {"model": "m", "input": f"my key: {SECRET}", "instructions": "be brief", "stream": False}
        status, _ = await post(proxy, body)
        assert status == 200
    turns = sorted((s for s in otlp.spans if s.kind == "server"), key=lambda s: s.start_ns)
    legs = sorted((s for s in otlp.spans if s.kind == "client"), key=lambda s: s.start_ns)
    assert len(turns) == len(legs) == 2
    failed, ok = legs
    assert failed.status == 2 and failed.attributes["error.type"] == "upstream_error"
    assert failed.attributes["http.response.status_code"] == 503
    assert turns[0].status == 2 and "error.type" in turns[0].attributes
    assert ok.status == 0 and ok.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    a = turns[1].attributes
    assert a["gen_ai.system_instructions"] == '"be brief"'
    assert orjson.loads(a["gen_ai.input.messages"]) == "my key: [redacted]"
    output = a["gen_ai.output.messages"]
    assert "Your key is [redacted]." in output and SECRET not in output
    assert a["crossfeed.stream"] is False and a["gen_ai.response.finish_reasons"] == ["completed"]


async def test_websocket_turns_and_a_compaction(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any, ws_frames: FrameRecorder
) -> None:
    upstream.reply(answer("One."), answer("Two."), chat_json("A summary.", (300, 40)))
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path)) as proxy:
        url = proxy.url.replace("http", "ws") + "/v1/responses"
        async with ws_frames.connect(url, headers={"traceparent": TRACEPARENT}) as ws:
            for text in ("one", "two"):
                turn = await ws.turn(type="response.create", model="m", input=text, store=False)
                assert turn.terminal == "response.completed"
        status, raw = await post(proxy, {"model": "m", "input": "a long story"}, "/v1/responses/compact")
        assert status == 200 and b"compaction" in raw
    turns = sorted((s for s in otlp.spans if s.kind == "server"), key=lambda s: s.start_ns)
    assert len(turns) == 3 and all((s.trace_id, s.parent_id) == (TRACE_ID, CLIENT_SPAN) for s in turns)
    assert [s.attributes["crossfeed.route"] for s in turns] == [
        "/v1/responses (websocket)",
        "/v1/responses (websocket)",
        "/v1/responses/compact",
    ]
    assert [s.attributes["gen_ai.usage.output_tokens"] for s in turns[:2]] == [12, 12]
    legs = sorted((s for s in otlp.spans if s.kind == "client"), key=lambda s: s.start_ns)
    assert [leg.parent_id for leg in legs[:2]] == [turns[0].span_id, turns[1].span_id]
    compaction = [s for s in otlp.spans if s.name == "compaction"]
    assert len(compaction) == 1 and compaction[0].parent_id == turns[2].span_id
    assert compaction[0].attributes["gen_ai.operation.name"] == "compaction"
    summary = legs[2]
    assert summary.parent_id == compaction[0].span_id
    assert (summary.attributes["gen_ai.usage.input_tokens"], summary.attributes["crossfeed.stream"]) == (300, False)
    seen = [parent_of(header(r, "traceparent")) for r in upstream.requests]
    assert seen == [(TRACE_ID, leg.span_id) for leg in legs]


async def test_a_chat_turn_on_a_responses_backend(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    message = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]}
    response = {"id": "resp_1", "object": "response", "status": "completed", "model": "m-up", "output": [message]}
    upstream.reply(JSONReply({**response, "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}))
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path, **{"upstream.api": "responses"})) as proxy:
        status, raw = await post(
            proxy, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "/v1/chat/completions"
        )
        assert status == 200 and orjson.loads(raw)["choices"][0]["message"]["content"] == "Hi."
    turn = turn_span(otlp.spans)
    (leg,) = [s for s in otlp.spans if s.kind == "client"]
    assert leg.parent_id == turn.span_id and leg.attributes["url.path"].endswith("/responses")
    b = leg.attributes
    assert (b["gen_ai.response.model"], b["gen_ai.response.id"], b["gen_ai.response.finish_reasons"]) == (
        "m-up",
        "resp_1",
        ["completed"],
    )
    assert (b["gen_ai.usage.input_tokens"], b["gen_ai.usage.output_tokens"]) == (3, 2)
    a = turn.attributes
    assert a["crossfeed.route"] == "/v1/chat/completions" and a["gen_ai.response.model"] == "m-up"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (3, 2)
    assert parent_of(header(upstream.requests[0], "traceparent")) == (TRACE_ID, leg.span_id)


async def test_serve_as_a_process_exports_its_spans_when_it_stops(
    otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The real command line: the variables from the process environment, the spans a worker
    still holds exported on SIGTERM (the batch delay is longer than the test)."""
    upstream.default = answer("Hello.")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CROSSFEED_", "OTEL_"))}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
        "OTEL_SERVICE_NAME": "crossfeed-test",
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
        "CROSSFEED_DATA_DIR": str(tmp_path / "data"),
        "PYTHONUNBUFFERED": "1",
    }
    served = await serve_process([*SERVE, "--upstream", upstream.base_url], env, tmp_path / "serve.log")
    try:
        status, raw = await post(ServedUrl(served.url), {"model": "m", "input": "hi", "stream": True})
        assert status == 200 and b"response.completed" in raw
        assert otlp.spans == []  # held in the batch
    finally:
        assert await served.stop(30) == 0
    assert sorted(s.kind for s in otlp.spans) == ["client", "server"]
    turn = turn_span_of(otlp.spans, service="crossfeed-test")
    assert parent_of(header(upstream.requests[-1], "traceparent"))[0] == TRACE_ID == turn.trace_id


async def test_a_failure_of_tracing_never_fails_the_turn(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    from crossfeed.proxy.runtime import tracing_otel

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in tracing")

    monkeypatch.setattr(tracing_otel.LiveLeg, "_machine", broken)
    monkeypatch.setattr(tracing_otel.LiveTurn, "_content", broken)
    upstream.default = answer("Still here.")
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path), **env) as proxy:
        status, raw = await post(proxy, {"model": "m", "input": "hi", "stream": True})
        assert status == 200 and b"Still here." in raw and b"response.completed" in raw
    # both spans were still ended (the turn's without the content, the leg's without the machine's figures)
    assert sorted(s.kind for s in otlp.spans) == ["client", "server"]
    turn = turn_span(otlp.spans)
    assert "gen_ai.input.messages" not in turn.attributes and turn.attributes["gen_ai.usage.output_tokens"] == 12


async def test_a_token_count_counted_by_crossfeed(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    """A chat backend's count (its vLLM tokenizer): one server span, ``count_tokens``, with the
    count and how it was made; the tokenizer gets the span's ``traceparent``."""
    upstream.reply(JSONReply({"count": 4242, "max_model_len": 8192, "tokens": []}))
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path, **{"upstream.tokenizer": "vllm"})) as proxy:
        status, raw = await post(proxy, {"model": "m", "input": "hi"}, "/v1/responses/input_tokens")
        assert status == 200 and orjson.loads(raw)["input_tokens"] == 4242
    turn = turn_span(otlp.spans)
    assert len(otlp.spans) == 1 and turn.name == "count_tokens m"
    a = turn.attributes
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["crossfeed.route"]) == (
        "count_tokens",
        "m",
        "/v1/responses/input_tokens",
    )
    assert (a["gen_ai.usage.input_tokens"], a["crossfeed.token_count"]) == (4242, "vllm")
    assert "gen_ai.usage.output_tokens" not in a and turn.status == 0
    assert upstream.requests[0].path == "/tokenize"
    assert parent_of(header(upstream.requests[0], "traceparent")) == (TRACE_ID, turn.span_id)


async def test_a_token_count_on_a_responses_backend(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    """A Responses backend counts: its call is a client span under the turn's, and the count it
    gave is the turn's input tokens."""
    upstream.reply(JSONReply({"object": "response.input_tokens", "input_tokens": 17}))
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path, **{"upstream.api": "responses"})) as proxy:
        status, raw = await post(proxy, {"model": "m", "input": "hi"}, "/v1/responses/input_tokens")
        assert status == 200 and orjson.loads(raw) == {"object": "response.input_tokens", "input_tokens": 17}
    turn = turn_span(otlp.spans)
    (leg,) = [s for s in otlp.spans if s.kind == "client"]
    assert len(otlp.spans) == 2 and leg.parent_id == turn.span_id
    assert (turn.name, leg.name) == ("count_tokens m", "count_tokens m")
    a, b = turn.attributes, leg.attributes
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"]) == ("count_tokens", "m")
    assert (a["gen_ai.usage.input_tokens"], a["crossfeed.token_count"]) == (17, "upstream")
    assert (b["gen_ai.operation.name"], b["gen_ai.request.model"], b["gen_ai.usage.input_tokens"]) == (
        "count_tokens",
        "m",
        17,
    )
    assert b["url.path"].endswith("/responses/input_tokens") and b["crossfeed.upstream.api"] == "responses"
    assert parent_of(header(upstream.requests[0], "traceparent")) == (TRACE_ID, leg.span_id)


# -- the standard variables: headers and sampler ---------------------------------------------------


async def test_the_exporter_sends_the_otlp_headers(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    """``OTEL_EXPORTER_OTLP_HEADERS`` (a collector's tenant and key: W3C baggage format, values
    percent-encoded) reach the collector with the spans."""
    upstream.default = answer("Hello.")
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "x-collector-tenant=team-a,authorization=Basic%20dGVuYW50OmtleQ=="}
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path), **env) as proxy:
        status, _ = await post(proxy, {"model": "m", "input": "hi", "stream": True})
        assert status == 200
    assert sorted(s.kind for s in otlp.spans) == ["client", "server"]
    assert otlp.headers and all(
        (h.get("x-collector-tenant"), h.get("authorization")) == ("team-a", "Basic dGVuYW50OmtleQ==")
        for h in otlp.headers
    )


async def test_the_always_off_sampler_exports_no_span(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    """``OTEL_TRACES_SAMPLER=always_off``: the turn runs, nothing is exported; the backend still
    gets a ``traceparent`` in the client's trace (not sampled)."""
    upstream.default = answer("Hello.")
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path), OTEL_TRACES_SAMPLER="always_off") as proxy:
        for _ in range(3):
            status, raw = await post(proxy, {"model": "m", "input": "hi", "stream": True})
            assert status == 200 and b"response.completed" in raw
    assert otlp.spans == [] and otlp.requests == 0
    version, trace_id, _, flags = header(upstream.requests[-1], "traceparent").split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "00")


# -- a chain's turns: one conversation id ----------------------------------------------------------


def response_id(raw: bytes) -> str:
    for line in raw.splitlines():
        if line.startswith(b"data: ") and b'"response.created"' in line:
            return str(orjson.loads(line[6:])["response"]["id"])
    raise AssertionError(raw[:500])


async def test_a_chains_turns_share_its_conversation_id(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, upstream: FakeUpstream, tmp_path: Any
) -> None:
    """No conversation, no session header, no cache key: a turn of its own is named by its
    response, and the turns continuing it (``previous_response_id``, however far down the chain)
    carry the same ``gen_ai.conversation.id``, as the inspector groups them."""
    upstream.default = answer("Hello.")
    async with traced(monkeypatch, otlp, settings(upstream, tmp_path)) as proxy:
        ids: list[str] = []
        for n in range(3):
            body: dict[str, Any] = {"model": "m", "input": f"turn {n}", "stream": True}
            if ids:
                body["previous_response_id"] = ids[-1]
            status, raw = await post(proxy, body)
            assert status == 200
            ids.append(response_id(raw))
        status, raw = await post(proxy, {"model": "m", "input": "another", "stream": True})  # a chain of its own
        assert status == 200
        other = response_id(raw)
    turns = sorted((s for s in otlp.spans if s.kind == "server"), key=lambda s: s.start_ns)
    assert len(turns) == 4 and len(set(ids)) == 3
    assert [s.attributes.get("gen_ai.conversation.id") for s in turns] == [ids[0], ids[0], ids[0], other]


# -- a pool's failover: one span per replica asked -------------------------------------------------


@pytest.mark.parametrize("failure", ["503", "refused"])
async def test_a_failover_is_two_client_spans_under_the_turn(
    monkeypatch: pytest.MonkeyPatch, otlp: OtlpReceiver, tmp_path: Any, failure: str
) -> None:
    """A pooled upstream whose first replica answers 503 (or refuses the connection) and whose
    second answers: two client spans under the one server span, the first failed; each replica
    that got a request got its own span's ``traceparent``."""
    async with replicas(2) as (first, second):
        second.default = answer("from the second")
        # a pool's first call goes to its second replica (ties in turn: proxy/runtime/pool.py), so
        # the failing replica is listed second: asked first, then the healthy one
        config = pool_config(tmp_path, [second.base_url, first.base_url], failures_before_cooldown=5)
        async with traced(monkeypatch, otlp, config) as proxy:
            # the first replica fails once the proxy has started (its start-up probe found it up)
            if failure == "503":
                first.default = error_reply(503)
            else:
                await first.close()
            status, raw = await post(proxy, {"model": MODEL, "input": "hi", "stream": True})
            assert status == 200 and b"from the second" in raw and b"response.completed" in raw
        asked_first = served([first])[0]
    turn = turn_span(otlp.spans)
    legs = sorted((s for s in otlp.spans if s.kind == "client"), key=lambda s: s.start_ns)
    assert len(legs) == 2 and all(leg.parent_id == turn.span_id for leg in legs)
    failed, ok = legs
    assert failed.status == 2 and ok.status == 0 and turn.status == 0
    assert failed.attributes["error.type"] and ok.attributes["crossfeed.ending"] == "ok"
    if failure == "503":
        assert asked_first == 1 and failed.attributes["http.response.status_code"] == 503
        assert parent_of(header(first.requests[-1], "traceparent")) == (TRACE_ID, failed.span_id)
    assert served([second]) == [1]
    assert parent_of(header(second.requests[-1], "traceparent")) == (TRACE_ID, ok.span_id)
    assert failed.attributes["server.port"] != ok.attributes["server.port"]
