"""Compaction through the official SDK: the trigger, replay, /compact, server-side compaction,
token counting, and histories a "system first" chat template accepts.

The fake backend records what crossfeed asked it; every SSE body the SDK reads passes the strict
validator (the ``captured`` fixture) and every WebSocket frame too (``ws_frames``).
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest

from crossfeed.proxy.keys import SEAL
from crossfeed.translators.forward.compaction import COMPACTION_PROMPT, SUMMARY_PREFIX
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import ProxyHandle
from tests.support.chat_chunks import DONE, chunk
from tests.support.open_responses import check_compact
from tests.support.validators import validate_responses_sse
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

SUMMARY = "The user wants a haiku about rust; one draft was written and rejected as too long."
TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]
HISTORY: list[dict[str, Any]] = [
    {"role": "developer", "content": "You are a poet."},
    {"role": "user", "content": "Write a haiku about rust."},
    {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd":"ls"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "poem.txt"},
    {"role": "assistant", "content": "Too long a draft."},
]


def text_sse(text: str, usage: tuple[int, int] = (120, 30), reasoning: str = "") -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    if reasoning:
        body += chunk({"reasoning_content": reasoning})
    body += b"".join(chunk({"content": text[i : i + 7]}) for i in range(0, len(text), 7))
    return SSEReply(body + chunk({}, "stop") + chunk(None, usage=usage) + DONE, max_piece=19)


def text_json(text: str, usage: tuple[int, int] = (120, 30)) -> JSONReply:
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
    )


def raw_client(proxy: ProxyHandle) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=proxy.base_url, timeout=30)


def sealed_summary(proxy: ProxyHandle, item: Any) -> str | None:
    token = item["encrypted_content"] if isinstance(item, dict) else item.encrypted_content
    return proxy.app[SEAL].open_summary(token)  # type: ignore[no-any-return]


# ------------------------------------------------------------------------- compaction v2 (trigger)


async def test_streamed_trigger_answers_one_sealed_compaction_item(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    upstream.reply(text_sse(SUMMARY, reasoning="Let me summarise."))
    stream = await client.responses.create(
        model="m", tools=TOOLS, store=False, stream=True, input=[*HISTORY, {"type": "compaction_trigger"}]
    )
    events = [e async for e in stream]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1].response
    assert [o.type for o in final.output] == ["compaction"]
    item = final.output[0]
    assert item.id.startswith("cmp_") and item.encrypted_content.startswith("cfc1.")
    assert SUMMARY not in item.encrypted_content
    assert sealed_summary(proxy, item) == SUMMARY
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (120, 30)
    sent = upstream.requests[0].body
    assert "tools" not in sent and "tool_choice" not in sent and sent["stream"] is True
    assert sent["messages"][0] == {"role": "system", "content": "You are a poet."}
    assert sent["messages"][-1] == {"role": "user", "content": COMPACTION_PROMPT}
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_trigger_without_streaming(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    upstream.reply(text_json("<think>hmm</think>" + SUMMARY, usage=(80, 12)))
    resp = await client.responses.create(model="m", input=[*HISTORY, {"type": "compaction_trigger"}])
    assert resp.status == "completed" and [o.type for o in resp.output] == ["compaction"]
    assert sealed_summary(proxy, resp.output[0]) == SUMMARY
    assert resp.usage is not None and resp.usage.total_tokens == 92
    assert upstream.requests[0].body["stream"] is False


async def test_replay_puts_the_summary_in_place_of_the_history(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.reply(text_sse(SUMMARY), text_json("Rust sleeps on iron."))
    stream = await client.responses.create(model="m", stream=True, input=[*HISTORY, {"type": "compaction_trigger"}])
    item = [e async for e in stream][-1].response.output[0]
    # what Codex sends next: its context again, then the compaction item, then what follows
    follow = [HISTORY[0], HISTORY[1], item.model_dump(exclude_none=True), {"role": "user", "content": "Shorter."}]
    resp = await client.responses.create(model="m", input=follow)
    assert resp.output_text == "Rust sleeps on iron."
    assert upstream.requests[1].body["messages"] == [
        {"role": "system", "content": "You are a poet."},
        {"role": "user", "content": "Write a haiku about rust."},
        {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{SUMMARY}"},
        {"role": "user", "content": "Shorter."},
    ]


async def test_replay_drops_what_the_summary_stands_for(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    token = proxy.app[SEAL].seal_summary(SUMMARY)
    older = proxy.app[SEAL].seal_summary("an older summary")
    upstream.reply(text_json("ok"))
    await client.responses.create(
        model="m",
        input=[
            {"type": "compaction", "encrypted_content": older},
            *HISTORY,
            {"type": "compaction", "id": "cmp_x", "encrypted_content": token},
            {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "done"},
        ],
        tools=TOOLS,
    )
    assert upstream.requests[0].body["messages"] == [
        {"role": "system", "content": "You are a poet."},
        {"role": "user", "content": "Write a haiku about rust."},
        {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{SUMMARY}"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "shell", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "done"},
    ]


@pytest.mark.parametrize(
    "token",
    [
        "cfc1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # forged
        "gAAAAABo-openai-own-compaction-blob",  # OpenAI's own
        "",  # empty
    ],
)
async def test_a_token_crossfeed_cannot_open_is_a_400_naming_the_item(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, token: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(
            model="m", input=[{"role": "user", "content": "hi"}, {"type": "compaction", "encrypted_content": token}]
        )
    err = info.value.body
    assert isinstance(err, dict) and err["param"] == "input[1].encrypted_content"
    assert err["code"] in ("invalid_encrypted_content", "invalid_value")
    assert err["code"] == "invalid_encrypted_content" or token == ""
    assert upstream.requests == []


async def test_tampered_reasoning_or_foreign_key_tokens_do_not_open(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    seal = proxy.app[SEAL]
    good = seal.seal_summary(SUMMARY)
    tampered = good[:-6] + ("A" if good[-6] != "A" else "B") + good[-5:]
    reasoning = seal.seal("some reasoning")  # a reasoning token cannot pass for a summary
    from crossfeed.proxy.state.reasoning_seal import ReasoningSeal

    foreign = ReasoningSeal("another replica's key").seal_summary(SUMMARY)
    for token in (tampered, reasoning, "cfc1." + reasoning[4:], foreign):
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(model="m", input=[{"type": "compaction", "encrypted_content": token}])
        assert info.value.body["code"] == "invalid_encrypted_content"  # type: ignore[index]
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([{"type": "compaction_trigger"}, {"role": "user", "content": "hi"}], "input[0]"),
        (
            [{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}, {"type": "compaction_trigger"}],
            "input[1]",
        ),
        ([{"type": "compaction", "encrypted_content": 7}], "input[0].encrypted_content"),
        ([{"type": "compaction"}], "input[0].encrypted_content"),
    ],
)
async def test_bad_compaction_input_is_a_400_naming_the_param(
    proxy: ProxyHandle, upstream: FakeUpstream, items: list[Any], param: str
) -> None:
    async with raw_client(proxy) as http:
        for stream in (False, True):
            r = await http.post("/responses", json={"model": "m", "input": items, "stream": stream})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == param
    assert upstream.requests == []


async def test_backend_failure_while_summarising_fails_the_response_and_stores_nothing(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    cut = chunk({"role": "assistant", "content": ""}) + chunk({"content": "The user wan"})  # no finish, no [DONE]
    upstream.reply(SSEReply(cut), SSEReply(chunk({"role": "assistant", "content": ""}) + chunk({}, "stop") + DONE))
    for expected in ("upstream_truncated", "empty_summary"):
        async with raw_client(proxy) as http:
            r = await http.post(
                "/responses", json={"model": "m", "stream": True, "input": [*HISTORY, {"type": "compaction_trigger"}]}
            )
        events = validate_responses_sse(r.content)
        assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error", "response.failed"]
        final = events[-1]["response"]
        assert final["output"] == [] and final["error"]["code"] == expected
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(final["id"])


async def test_backend_error_status_before_the_summary_keeps_its_status(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.reply(
        JSONReply({"error": {"message": "context length exceeded", "type": "invalid_request_error"}}, status=400)
    )
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", stream=True, input=[*HISTORY, {"type": "compaction_trigger"}])
    assert "context length exceeded" in str(info.value)


@pytest.mark.parametrize("proxy_overrides", [{"upstream.context_window": 50}])
async def test_history_longer_than_the_backend_context_is_a_400(
    proxy: ProxyHandle, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    async with raw_client(proxy) as http:
        r = await http.post(
            "/responses", json={"model": "m", "stream": True, "input": [*HISTORY * 5, {"type": "compaction_trigger"}]}
        )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert upstream.requests == []


async def test_trigger_over_websocket(proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder) -> None:
    upstream.reply(text_sse(SUMMARY), text_sse("Iron dreams of red."))
    url = proxy.url.replace("http", "ws") + "/v1/responses"
    async with ws_frames.connect(url) as ws:
        turn = await ws.turn(
            type="response.create", model="m", store=False, input=[*HISTORY, {"type": "compaction_trigger"}]
        )
        assert turn.terminal == "response.completed"
        assert [i["type"] for i in turn.response["output"]] == ["compaction"]
        item = turn.response["output"][0]
        assert sealed_summary(proxy, item) == SUMMARY
        nxt = await ws.turn(
            type="response.create",
            model="m",
            store=False,
            input=[HISTORY[1], item, {"role": "user", "content": "again"}],
        )
        assert nxt.text == "Iron dreams of red."
    assert upstream.requests[1].body["messages"][1]["content"].startswith(SUMMARY_PREFIX)


# ------------------------------------------------------------------------------------ /compact


async def test_sdk_compact_then_create_from_its_output(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    upstream.reply(text_json(SUMMARY, usage=(200, 40)), text_sse("A short haiku."))
    compacted = await client.responses.compact(model="m", input=HISTORY, instructions="Be brief.")
    assert compacted.object == "response.compaction"
    assert [(o.type, getattr(o, "role", None)) for o in compacted.output] == [("message", "user"), ("compaction", None)]
    assert sealed_summary(proxy, compacted.output[-1]) == SUMMARY
    assert compacted.usage.input_tokens == 200 and compacted.usage.output_tokens == 40
    asked = upstream.requests[0].body
    assert asked["stream"] is False and asked["messages"][-1]["content"] == COMPACTION_PROMPT
    assert asked["messages"][0] == {"role": "system", "content": "Be brief.\n\nYou are a poet."}
    # (the SDK types compact's output messages as output messages, so the user message's input_text
    # content makes pydantic warn when dumped: the SDK's typing, not the wire)
    nxt = [o.model_dump(exclude_none=True, warnings=False) for o in compacted.output] + [
        {"role": "user", "content": "Now shorter."}
    ]
    stream = await client.responses.create(model="m", input=nxt, stream=True)
    assert [e async for e in stream][-1].response.output_text == "A short haiku."
    assert upstream.requests[1].body["messages"] == [
        {"role": "user", "content": "Write a haiku about rust."},
        {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{SUMMARY}"},
        {"role": "user", "content": "Now shorter."},
    ]


async def test_compact_from_a_stored_response(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    upstream.reply(text_json("Rust: red and slow."), text_json(SUMMARY))
    first = await client.responses.create(model="m", input="Write a haiku about rust.")
    compacted = await client.responses.compact(model="m", previous_response_id=first.id)
    assert [o.type for o in compacted.output] == ["message", "compaction"]
    assert [m["role"] for m in upstream.requests[1].body["messages"]] == ["user", "assistant", "user"]


async def test_compact_output_is_an_open_responses_compact_resource(proxy: ProxyHandle, upstream: FakeUpstream) -> None:
    """Every message of the compacted window says its status (the schema's ``Message`` needs
    one; the compliance suite's ``output.0: Invalid input``), from the input, a string input and
    a stored response's history alike."""
    upstream.reply(text_json("Rust: red and slow."), text_json(SUMMARY), text_json(SUMMARY))
    async with raw_client(proxy) as http:
        first = (await http.post("/responses", json={"model": "m", "input": "Write a haiku about rust."})).json()
        answers = [
            await http.post("/responses/compact", json={"model": "m", "input": HISTORY}),
            await http.post(
                "/responses/compact",
                json={"model": "m", "previous_response_id": first["id"], "input": "And one in French."},
            ),
        ]
    for r in answers:
        assert r.status_code == 200, r.text
        body = r.json()
        check_compact(body)
        messages = [o for o in body["output"] if o["type"] == "message"]
        assert messages and all(m["status"] == "completed" and m["role"] == "user" for m in messages)
    assert len(answers[1].json()["output"]) == 3


async def test_compact_needs_a_model(proxy: ProxyHandle, upstream: FakeUpstream) -> None:
    async with raw_client(proxy) as http:
        r = await http.post("/responses/compact", json={"input": "hi"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    assert upstream.requests == []


# ------------------------------------------------------------------------ server-side compaction


async def test_context_management_compacts_first_then_answers(
    client: openai.AsyncOpenAI, proxy: ProxyHandle, upstream: FakeUpstream
) -> None:
    upstream.reply(text_sse(SUMMARY, usage=(300, 50)), text_sse("Red bloom on iron.", usage=(90, 8)))
    stream = await client.responses.create(
        model="m",
        stream=True,
        tools=TOOLS,
        input=HISTORY,
        context_management=[{"type": "compaction", "compact_threshold": 20}],
    )
    events = [e async for e in stream]
    types = [e.type for e in events]
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
    ]
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert [o.type for o in final.output] == ["compaction", "message"] and final.output_text == "Red bloom on iron."
    assert final.usage is not None and final.usage.input_tokens == 390 and final.usage.output_tokens == 58
    assert len(upstream.requests) == 2
    assert upstream.requests[0].body["messages"][-1]["content"] == COMPACTION_PROMPT
    answer = upstream.requests[1].body
    assert answer["messages"] == [
        {"role": "system", "content": "You are a poet."},
        {"role": "user", "content": "Write a haiku about rust."},
        {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{SUMMARY}"},
    ]
    assert [t["function"]["name"] for t in answer["tools"]] == ["shell"]
    # stored: a continuation sends the compacted window, not the old history
    upstream.reply(text_json("Yes."))
    await client.responses.create(model="m", previous_response_id=final.id, input="Is it done?")
    assert [m["content"][:20] for m in upstream.requests[2].body["messages"]] == [
        "You are a poet.",
        "Write a haiku about ",
        SUMMARY_PREFIX[:20],
        "Red bloom on iron.",
        "Is it done?",
    ]


async def test_context_management_below_the_threshold_does_not_compact(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.reply(text_json("Fine."))
    resp = await client.responses.create(
        model="m", input="hi", context_management=[{"type": "compaction", "compact_threshold": 100000}]
    )
    assert [o.type for o in resp.output] == ["message"] and len(upstream.requests) == 1


async def test_context_management_without_streaming(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(text_json(SUMMARY), text_json("Red bloom."))
    resp = await client.responses.create(
        model="m", input=HISTORY, context_management=[{"type": "compaction", "compact_threshold": 1}]
    )
    assert [o.type for o in resp.output] == ["compaction", "message"] and resp.output_text == "Red bloom."


async def test_answer_leg_failing_ends_the_stream_with_one_failed_event(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy: ProxyHandle
) -> None:
    upstream.reply(
        text_sse(SUMMARY), JSONReply({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
    )
    async with raw_client(proxy) as http:
        r = await http.post(
            "/responses",
            json={
                "model": "m",
                "stream": True,
                "input": HISTORY,
                "context_management": [{"type": "compaction", "compact_threshold": 1}],
            },
        )
    events = validate_responses_sse(r.content)
    assert events[-1]["type"] == "response.failed" and "overloaded" in events[-1]["response"]["error"]["message"]
    assert sum(e["type"] in ("response.completed", "response.failed", "response.incomplete") for e in events) == 1


# ------------------------------------------------------------------------------- token counting


async def test_input_tokens_estimate(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    small = await client.responses.input_tokens.count(model="m", input="hi")
    large = await client.responses.input_tokens.count(model="m", input=HISTORY, tools=TOOLS)
    assert small.object == "response.input_tokens" and 0 < small.input_tokens < large.input_tokens
    assert (await client.responses.input_tokens.count(input="hi")).input_tokens == small.input_tokens
    assert upstream.requests == []


@pytest.mark.parametrize("proxy_overrides", [{"upstream.tokenizer": "vllm"}])
async def test_input_tokens_from_a_vllm_tokenizer(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    upstream.reply(JSONReply({"count": 4242, "max_model_len": 8192, "tokens": []}))
    counted = await client.responses.input_tokens.count(model="m", input="hi", instructions="Be brief.")
    assert counted.input_tokens == 4242
    asked = upstream.requests[0]
    assert asked.path == "/tokenize" and asked.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


@pytest.mark.parametrize("proxy_overrides", [{"upstream.tokenizer": "llama.cpp"}])
async def test_threshold_decided_by_a_llama_cpp_tokenizer(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    upstream.reply(
        JSONReply({"prompt": "<|im_start|>user\nhi<|im_end|>"}),
        JSONReply({"tokens": [1, 2, 3, 4, 5]}),
        text_json("Fine."),
    )
    resp = await client.responses.create(
        model="m", input="hi", context_management=[{"type": "compaction", "compact_threshold": 5}]
    )
    assert [o.type for o in resp.output] == ["message"]  # 5 tokens is not over 5
    assert [r.path for r in upstream.requests] == ["/apply-template", "/tokenize", "/v1/chat/completions"]


@pytest.mark.parametrize("proxy_overrides", [{"upstream.tokenizer": "vllm"}])
async def test_a_tokenizer_that_fails_falls_back_to_the_estimate(
    proxy: ProxyHandle, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    upstream.reply(JSONReply({"error": "no"}, status=404))
    async with raw_client(proxy) as http:
        r = await http.post("/responses/input_tokens", json={"model": "m", "input": "hi"})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0
    assert r.headers["x-crossfeed-token-count"] == "estimate"


# --------------------------------------------------------------- histories templates accept


def system_first(reply: JSONReply) -> Any:
    """A backend whose chat template is Qwen's: a system message anywhere but first is an error."""

    def answer(req: Recorded) -> JSONReply:
        messages = req.body["messages"]
        if any(m["role"] == "system" for m in messages[1:]):
            return JSONReply(
                {"error": {"message": "System message must be at the beginning.", "type": "invalid_request_error"}},
                status=400,
            )
        return reply

    return answer


CODEX_LIKE = [
    {"role": "developer", "content": "You are Codex."},
    {"role": "developer", "content": "<permissions/>"},
    {"role": "user", "content": "fix it"},
    {"role": "assistant", "content": "Done."},
    {"role": "developer", "content": "<model_switch/>"},
    {"role": "user", "content": "thanks"},
]


async def test_default_merges_system_messages_for_a_system_first_template(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    upstream.reply(system_first(text_json("You are welcome.")))
    resp = await client.responses.create(model="m", input=CODEX_LIKE, instructions="Base.")
    assert resp.output_text == "You are welcome."
    assert upstream.requests[0].body["messages"] == [
        {"role": "system", "content": "Base.\n\nYou are Codex.\n\n<permissions/>\n\n<model_switch/>"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "thanks"},
    ]


@pytest.mark.parametrize("proxy_overrides", [{"upstream.system_messages": "user"}])
async def test_system_messages_as_user_messages(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    upstream.reply(system_first(text_json("ok")))
    await client.responses.create(model="m", input=CODEX_LIKE)
    assert [m["role"] for m in upstream.requests[0].body["messages"]] == [
        "system",
        "user",
        "user",
        "assistant",
        "user",
        "user",
    ]


@pytest.mark.parametrize("proxy_overrides", [{"upstream.system_messages": "keep"}])
async def test_keep_sends_them_in_place_and_such_a_template_refuses(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    upstream.reply(system_first(text_json("ok")))
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=CODEX_LIKE)
    assert "System message must be at the beginning" in str(info.value)


@pytest.mark.parametrize("proxy_overrides", [{"upstream.compaction_prompt": "Summarise for a lawyer."}])
async def test_the_prompt_is_configurable_per_upstream(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, proxy_overrides: dict[str, Any]
) -> None:
    upstream.reply(text_sse(SUMMARY), text_json(SUMMARY))
    stream = await client.responses.create(model="m", stream=True, input=[*HISTORY, {"type": "compaction_trigger"}])
    assert [e async for e in stream][-1].type == "response.completed"
    await client.responses.compact(model="m", input=HISTORY)
    assert [r.body["messages"][-1]["content"] for r in upstream.requests] == ["Summarise for a lawyer."] * 2


async def test_server_side_compaction_over_websocket(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_sse(SUMMARY), text_sse("Red bloom."))
    async with ws_frames.connect(proxy.url.replace("http", "ws") + "/v1/responses") as ws:
        turn = await ws.turn(
            type="response.create",
            model="m",
            input=HISTORY,
            context_management=[{"type": "compaction", "compact_threshold": 1}],
        )
    assert [i["type"] for i in turn.response["output"]] == ["compaction", "message"]
    assert "response.compaction.compacting" in turn.types()
