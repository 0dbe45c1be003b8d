"""A tool output must answer a call: one whose ``call_id`` answers no call of the resolved history
(the stored response ``previous_response_id`` names, the response a WebSocket remembers, or an
earlier item of the same input) is the 400 OpenAI answers, naming ``input[i].call_id``, and never
reaches the backend as an orphan ``tool`` message. Streamed, non-streamed and over WebSocket,
through the official SDK (every body and frame validated by the ``captured`` / ``ws_frames``
fixtures); the outputs that do answer a call (function, custom, Codex's local_shell_call) pass.
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import ProxyHandle
from tests.support.chat_chunks import DONE, chunk
from tests.support.ws import FrameRecorder, ws_url

pytestmark = pytest.mark.timeout(60)

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
ORPHAN = {"type": "function_call_output", "call_id": "call_nope", "output": "sunny"}


def text_reply(text: str) -> SSEReply:
    body = chunk({"role": "assistant", "content": ""}) + chunk({"content": text}) + chunk({}, "stop")
    return SSEReply(body + chunk(None, usage=(9, 3)) + DONE, max_piece=17)


def tool_reply(call_id: str) -> SSEReply:
    call = {"index": 0, "id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    body = chunk({"role": "assistant", "content": None}) + chunk({"tool_calls": [call]})
    body += chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":"Paris"}'}}]})
    return SSEReply(body + chunk({}, "tool_calls") + chunk(None, usage=(20, 8)) + DONE, max_piece=23)


def refused(exc: openai.BadRequestError) -> dict[str, Any]:
    assert exc.status_code == 400
    body = exc.body
    assert isinstance(body, dict)
    error = body.get("error", body)
    assert isinstance(error, dict)
    return error


def no_call(error: dict[str, Any], param: str, call_id: str = "call_nope", what: str = "function call") -> None:
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "tool_call_not_found", param)
    assert error["message"].startswith(f"No tool call found for {what} output with call_id {call_id}.")


@pytest.mark.parametrize("stream", [True, False])
async def test_an_output_answering_no_call_of_the_input_is_a_400(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}
    answer = {"type": "function_call_output", "call_id": "call_1", "output": "rain"}
    inp = [{"role": "user", "content": "Weather?"}, call, answer, ORPHAN]
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=inp, tools=TOOLS, stream=stream)
    no_call(refused(info.value), "input[3].call_id")
    # the output before its call answers nothing yet
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=[inp[0], answer, call], tools=TOOLS, stream=stream)
    no_call(refused(info.value), "input[1].call_id", "call_1")
    assert upstream.requests == []  # nothing reached the backend


@pytest.mark.parametrize("stream", [True, False])
async def test_a_custom_tool_output_answering_no_call_is_a_400(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    """A custom_tool_call_output is checked as a function_call_output is: one answering no call (a
    function call of another id does not count) is refused, naming its input[i].call_id."""
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}
    orphan = {"type": "custom_tool_call_output", "call_id": "ct_nope", "output": "patched"}
    inp = [{"role": "user", "content": "Patch it."}, call, orphan]
    tools = [*TOOLS, {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}]
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(model="m", input=inp, tools=tools, stream=stream)
    no_call(refused(info.value), "input[2].call_id", "ct_nope", "custom tool call")
    assert upstream.requests == []


async def test_outputs_answering_calls_of_the_input_pass(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    """Function and custom tool calls, and Codex's local_shell_call (answered by a
    function_call_output), each with its output after it."""
    upstream.reply(text_reply("Done."))
    inp = [
        {"role": "user", "content": "Patch it, then run it."},
        {"type": "custom_tool_call", "call_id": "ct_1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "patched"},
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "sh_1",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        {"type": "function_call_output", "call_id": "sh_1", "output": "a.txt"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
    ]
    tools = [*TOOLS, {"type": "custom", "name": "apply_patch", "description": "Apply a patch"}]
    stream = await client.responses.create(model="m", input=inp, tools=tools, stream=True)
    assert [e async for e in stream][-1].response.output_text == "Done."
    sent = upstream.requests[0].body["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in sent if m["role"] == "tool"] == [
        ("tool", "ct_1"),
        ("tool", "sh_1"),
        ("tool", "call_1"),
    ]


@pytest.mark.parametrize("stream", [True, False])
async def test_outputs_checked_against_the_stored_response(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.reply(tool_reply("call_w1"), text_reply("Sunny in Paris."))
    opening = await client.responses.create(model="m", input="Weather in Paris?", tools=TOOLS, stream=True)
    first = [e async for e in opening][-1].response
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(
            model="m", input=[ORPHAN], tools=TOOLS, previous_response_id=first.id, stream=stream
        )
    no_call(refused(info.value), "input[0].call_id")
    assert len(upstream.requests) == 1
    answer = {"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}
    second = await client.responses.create(
        model="m", input=[answer], tools=TOOLS, previous_response_id=first.id, stream=True
    )
    assert [e async for e in second][-1].response.output_text == "Sunny in Paris."
    assert upstream.requests[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}


async def test_over_websocket_against_the_remembered_response(
    proxy: ProxyHandle, upstream: FakeUpstream, ws_frames: FrameRecorder
) -> None:
    """The compliance suite's "failed continuation evicts the cache": the orphan output is an
    error frame naming it; the remembered response is forgotten (the retry is
    previous_response_not_found); a continuation answering the call passes."""
    upstream.reply(tool_reply("call_w1"), tool_reply("call_w2"), text_reply("Sunny."))
    async with ws_frames.connect(ws_url(proxy.url)) as ws:
        first = await ws.turn(model="m", input="Weather in Paris?", tools=TOOLS, store=False)
        prev = first.response["id"]
        failed = await ws.turn(model="m", input=[ORPHAN], tools=TOOLS, store=False, previous_response_id=prev)
        retry = await ws.turn(model="m", input="Try again.", tools=TOOLS, store=False, previous_response_id=prev)
        again = await ws.turn(model="m", input="Weather in Paris?", tools=TOOLS, store=False)
        answer = {"type": "function_call_output", "call_id": "call_w2", "output": "sunny"}
        done = await ws.turn(
            model="m", input=[answer], tools=TOOLS, store=False, previous_response_id=again.response["id"]
        )
    assert failed.errors[0]["status"] == 400
    no_call(failed.error, "input[0].call_id")
    assert retry.error["code"] == "previous_response_not_found"
    assert done.text == "Sunny."
    assert len(upstream.requests) == 3
    assert orjson.loads(upstream.requests[2].body["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }
    assert upstream.requests[2].body["messages"][-1] == {"role": "tool", "tool_call_id": "call_w2", "content": "sunny"}
    assert ws_frames.validate() == (3, 2)
