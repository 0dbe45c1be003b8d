"""Non-streaming forward bodies: ``chat.completion`` -> Responses ``Response`` (translators/forward/body.py).

Expected values come from the wire facts in docs/wire-facts.md, not from the code's output: finish
reasons and usage ("Non-streamed bodies", "Finish reasons"), the Response object and its output
items, id prefixes ("Ids"), failure shape ("Failures"), reasoning spellings ("Reasoning fields").
Output items are compared without their ``id`` (checked apart: unique, with the wire prefix);
reasoning items are compared by their text, since the wire facts allow it as ``content``
reasoning_text or ``summary`` summary_text.

The last section checks the module's promise: the non-streaming Response is the object the
terminal event of the equivalent stream carries (``ChatToResponsesStream``), given the same
injected id factory and clock.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import pytest

from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.forward.body import chat_completion_to_response
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import NO_TOOLS, BackendProfile, ToolContext
from tests.support.chat_chunks import chat_chunk
from tests.support.validators import validate_responses_events

REQUEST: dict[str, Any] = {"model": "gpt-test", "input": "hi"}
NOW = 1_700_000_000
PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+hello "world" ✓\n*** End Patch\n'
CUSTOM = ToolContext(custom_tools=frozenset({"apply_patch"}))

# docs/wire-facts.md, Ids
PREFIX = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_", "custom_tool_call": "ctc_"}
# docs/wire-facts.md, Output items: items that carry a status, and its values
ITEM_STATUSES = {"in_progress", "completed", "incomplete"}
STATUS_ITEMS = ("message", "function_call", "custom_tool_call")


def clock() -> int:
    return NOW


class Prefixed:
    """Equal to any non-empty id with this prefix (generated ids are opaque: docs/wire-facts.md, Ids)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith(self.prefix) and len(other) > len(self.prefix)

    def __repr__(self) -> str:
        return f"<{self.prefix}…>"


class OneOf:
    """Equal to any of the given values (where the wire facts leave a choice)."""

    def __init__(self, *values: object) -> None:
        self.values = values

    def __eq__(self, other: object) -> bool:
        return other in self.values

    def __repr__(self) -> str:
        return f"<one of {self.values!r}>"


# -- building completions -------------------------------------------------------------------------


def completion(
    message: dict[str, Any] | None = None,
    finish: str | None = "stop",
    usage: dict[str, Any] | None = None,
    **choice: Any,
) -> dict[str, Any]:
    """A ``chat.completion`` body (docs/wire-facts.md, Non-streamed bodies) with one choice."""
    body: dict[str, Any] = {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1,
        "model": "backend-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, **(message or {})},
                "finish_reason": finish,
                "logprobs": None,
                **choice,
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def tool_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
    return call


def translate(body: Any, request: dict[str, Any] = REQUEST, **kw: Any) -> dict[str, Any]:
    return chat_completion_to_response(body, request, ids=SequentialIds(), now=clock, **kw)


# -- expected output items (docs/wire-facts.md, Output items) -------------------------------------


def text(value: str, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": value, "annotations": annotations or [], "logprobs": []}


def refusal(value: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": value}


def message(*parts: dict[str, Any], status: object = "completed") -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "status": status, "content": list(parts)}


def call(call_id: object, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments, "status": status}


def custom(call_id: object, name: str, input_: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "custom_tool_call", "call_id": call_id, "name": name, "input": input_, "status": status}


def reasoning(value: str) -> dict[str, Any]:
    return {"type": "reasoning", "text": value}


def reasoning_text_of(item: dict[str, Any]) -> str:
    parts = item.get("content") or []
    found = "".join(p["text"] for p in parts if p.get("type") == "reasoning_text")
    return found or "".join(p["text"] for p in item["summary"] if p.get("type") == "summary_text")


def shape(item: dict[str, Any]) -> dict[str, Any]:
    if item["type"] == "reasoning":
        return reasoning(reasoning_text_of(item))
    return {k: v for k, v in item.items() if k != "id"}


def well_formed(resp: dict[str, Any]) -> None:
    """What every Response must satisfy, whatever the answer (docs/wire-facts.md, The Response object,
    Output items, Ids)."""
    assert resp["object"] == "response"
    assert resp["id"] == Prefixed("resp_")
    assert resp["created_at"] == NOW
    assert isinstance(resp["model"], str) and resp["model"]
    assert resp["status"] in ("completed", "incomplete", "failed")
    assert "output_text" not in resp  # an SDK convenience property, never on the wire
    assert isinstance(resp["output"], list)
    ids = [item["id"] for item in resp["output"]]
    assert len(set(ids)) == len(ids)
    call_ids = [item["call_id"] for item in resp["output"] if "call_id" in item]
    assert len(set(call_ids)) == len(call_ids)
    for item in resp["output"]:
        assert item["id"] == Prefixed(PREFIX[item["type"]])
        if item["type"] in STATUS_ITEMS or "status" in item:  # reasoning items may omit it (1.4)
            assert item["status"] in ITEM_STATUSES - {"in_progress"}
        if item["type"] == "reasoning":
            assert isinstance(item["summary"], list)  # R, even when the text is in content
        if item["type"] in ("function_call", "custom_tool_call"):
            assert item["call_id"] == Prefixed("")
    if resp["status"] == "completed":
        assert resp["error"] is None and resp["incomplete_details"] is None
        assert all(item.get("status", "completed") == "completed" for item in resp["output"])
    if resp["status"] != "failed":
        usage = resp["usage"]
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            assert isinstance(usage[key], int) and usage[key] >= 0
        assert isinstance(usage["input_tokens_details"]["cached_tokens"], int)
        assert isinstance(usage["input_tokens_details"]["cache_write_tokens"], int)
        assert isinstance(usage["output_tokens_details"]["reasoning_tokens"], int)


# -- finish_reason -> status (docs/wire-facts.md, Non-streamed bodies, Finish reasons) ------------


@dataclass(frozen=True)
class Row:
    body: dict[str, Any]
    status: str
    reason: str | None
    output: list[dict[str, Any]]
    tools: ToolContext = NO_TOOLS


WEATHER = tool_call("call_a", "get_weather", '{"city":"Paris"}')
CLOCK_CALL = tool_call("call_b", "get_time", '{"tz":"CET"}')

FINISH_ROWS: dict[str, Row] = {
    "stop": Row(completion({"content": "Hello!"}, "stop"), "completed", None, [message(text("Hello!"))]),
    "tool_calls": Row(
        completion({"tool_calls": [WEATHER, CLOCK_CALL]}, "tool_calls"),
        "completed",
        None,
        [call("call_a", "get_weather", '{"city":"Paris"}'), call("call_b", "get_time", '{"tz":"CET"}')],
    ),
    "tool_calls, content empty string": Row(
        completion({"content": "", "tool_calls": [WEATHER]}, "tool_calls"),
        "completed",
        None,
        [call("call_a", "get_weather", '{"city":"Paris"}')],
    ),
    "text then tool call": Row(
        completion({"content": "Let me check.", "tool_calls": [WEATHER]}, "tool_calls"),
        "completed",
        None,
        [message(text("Let me check.")), call("call_a", "get_weather", '{"city":"Paris"}')],
    ),
    "legacy function_call": Row(
        completion({"function_call": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}, "function_call"),
        "completed",
        None,
        [call(Prefixed("call_"), "get_weather", '{"city":"Oslo"}')],
    ),
    "length": Row(
        completion({"content": "Once upon a"}, "length"),
        "incomplete",
        "max_output_tokens",
        [message(text("Once upon a"), status="incomplete")],
    ),
    "length while reasoning": Row(
        completion({"reasoning_content": "First, I"}, "length"),
        "incomplete",
        "max_output_tokens",
        [reasoning("First, I")],
    ),
    "content_filter, nothing said": Row(completion({}, "content_filter"), "incomplete", "content_filter", []),
    "content_filter after text": Row(
        completion({"content": "Here is how to"}, "content_filter"),
        "incomplete",
        "content_filter",
        [message(text("Here is how to"), status=OneOf("completed", "incomplete"))],
    ),
    "unknown reason": Row(completion({"content": "ok"}, "end_turn"), "completed", None, [message(text("ok"))]),
    "refusal": Row(
        completion({"refusal": "I can't help with that."}, "stop"),
        "completed",
        None,
        [message(refusal("I can't help with that."))],
    ),
    "custom tool": Row(
        completion({"tool_calls": [tool_call("call_p", "apply_patch", json.dumps({"input": PATCH}))]}, "tool_calls"),
        "completed",
        None,
        [custom("call_p", "apply_patch", PATCH)],
        CUSTOM,
    ),
    "custom tool and function": Row(
        completion(
            {
                "tool_calls": [
                    tool_call("call_p", "apply_patch", json.dumps({"input": PATCH})),
                    tool_call("call_x", "exec_command", '{"cmd":"ls"}'),
                ]
            },
            "tool_calls",
        ),
        "completed",
        None,
        [custom("call_p", "apply_patch", PATCH), call("call_x", "exec_command", '{"cmd":"ls"}')],
        CUSTOM,
    ),
    "custom tool name without the tool context": Row(
        completion({"tool_calls": [tool_call("call_p", "apply_patch", '{"input":"x"}')]}, "tool_calls"),
        "completed",
        None,
        [call("call_p", "apply_patch", '{"input":"x"}')],
    ),
}


@pytest.mark.parametrize("row", list(FINISH_ROWS.values()), ids=list(FINISH_ROWS))
def test_finish_reason_and_output(row: Row) -> None:
    resp = translate(row.body, tools=row.tools)
    well_formed(resp)
    assert resp["status"] == row.status
    assert resp["incomplete_details"] == (None if row.reason is None else {"reason": row.reason})
    assert resp["error"] is None
    assert [shape(item) for item in resp["output"]] == row.output


def test_insufficient_system_resource_fails_with_partial_output() -> None:
    # A failure, not a success (docs/wire-facts.md, Finish reasons); failed carries the output, unfinished
    # items incomplete (Failures).
    resp = translate(completion({"content": "Partial"}, "insufficient_system_resource"))
    well_formed(resp)
    assert resp["status"] == "failed"
    assert resp["error"]["code"] and resp["error"]["message"]
    assert [shape(item) for item in resp["output"]] == [message(text("Partial"), status="incomplete")]


def test_status_on_every_item_that_has_one() -> None:
    body = completion(
        {
            "reasoning_content": "Plan.",
            "content": "Working on it.",
            "tool_calls": [tool_call("call_p", "apply_patch", json.dumps({"input": PATCH})), WEATHER],
        },
        "tool_calls",
    )
    resp = translate(body, tools=CUSTOM)
    well_formed(resp)
    assert [item["type"] for item in resp["output"]] == ["reasoning", "message", "custom_tool_call", "function_call"]
    assert [item.get("status") for item in resp["output"][1:]] == ["completed"] * 3


def test_truncated_answer_marks_the_cut_message_incomplete() -> None:
    resp = translate(completion({"reasoning_content": "Plan.", "content": "The answer is"}, "length"))
    well_formed(resp)
    assert resp["output"][-1]["type"] == "message"
    assert resp["output"][-1]["status"] == "incomplete"


# -- tool calls -----------------------------------------------------------------------------------


def test_tool_call_without_id_gets_a_call_id() -> None:
    resp = translate(completion({"tool_calls": [tool_call(None, "f", "{}")]}, "tool_calls"))
    well_formed(resp)
    assert resp["output"][0]["call_id"] == Prefixed("call_")


def test_repeated_tool_call_ids_are_made_unique() -> None:
    # Strict clients throw on two items with one call_id (docs/wire-facts.md, What the SDK accumulators check).
    resp = translate(
        completion({"tool_calls": [tool_call("call_0", "f", "{}"), tool_call("call_0", "g", "{}")]}, "tool_calls")
    )
    well_formed(resp)
    names = [item["name"] for item in resp["output"]]
    assert names == ["f", "g"]
    assert resp["output"][0]["call_id"] == "call_0"
    assert resp["output"][1]["call_id"] not in ("call_0", "")


def test_object_arguments_become_a_json_string() -> None:
    resp = translate(completion({"tool_calls": [tool_call("c1", "f", {"city": "Zürich", "n": [1, 2]})]}, "tool_calls"))
    arguments = resp["output"][0]["arguments"]
    assert isinstance(arguments, str)
    assert json.loads(arguments) == {"city": "Zürich", "n": [1, 2]}


def test_namespaced_tool_call_carries_its_namespace() -> None:
    tools = ToolContext(namespaced={"multi_agent__wait": ("multi_agent", "wait")})
    body = completion({"tool_calls": [tool_call("c1", "multi_agent__wait", "{}")]}, "tool_calls")
    resp = translate(body, tools=tools)
    item = resp["output"][0]
    assert (item["type"], item["name"], item["namespace"]) == ("function_call", "wait", "multi_agent")


def test_annotations_are_flattened() -> None:
    nested = {
        "type": "url_citation",
        "url_citation": {"start_index": 0, "end_index": 9, "title": "Docs", "url": "https://example.com"},
    }
    resp = translate(completion({"content": "See docs.", "annotations": [nested]}))
    flat = {"type": "url_citation", "start_index": 0, "end_index": 9, "title": "Docs", "url": "https://example.com"}
    assert [shape(item) for item in resp["output"]] == [message(text("See docs.", [flat]))]


# -- usage (docs/wire-facts.md, Non-streamed bodies, The Response object) -------------------------


def usage(inp: int, out: int, total: int, cached: int = 0, write: int = 0, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": write},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": total,
    }


USAGE_ROWS: dict[str, tuple[dict[str, Any] | None, dict[str, Any]]] = {
    "full": (
        {
            "prompt_tokens": 120,
            "completion_tokens": 45,
            "total_tokens": 165,
            "prompt_tokens_details": {"cached_tokens": 100},
            "completion_tokens_details": {"reasoning_tokens": 30},
        },
        usage(120, 45, 165, cached=100, reasoning_tokens=30),
    ),
    "cache writes": (
        {
            "prompt_tokens": 80,
            "completion_tokens": 2,
            "total_tokens": 82,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 64},
        },
        usage(80, 2, 82, write=64),
    ),
    "no details": ({"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}, usage(5, 7, 12)),
    "null details": (
        {
            "prompt_tokens": 5,
            "completion_tokens": 7,
            "total_tokens": 12,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        usage(5, 7, 12),
    ),
    "no total": ({"prompt_tokens": 5, "completion_tokens": 7}, usage(5, 7, 12)),
    "missing": (None, usage(0, 0, 0)),
}


@pytest.mark.parametrize(("chat_usage", "expected"), list(USAGE_ROWS.values()), ids=list(USAGE_ROWS))
def test_usage_mapping(chat_usage: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    resp = translate(completion({"content": "hi"}, usage=chat_usage))
    well_formed(resp)
    assert resp["usage"] == expected


def test_null_usage_is_like_missing_usage() -> None:
    body = completion({"content": "hi"})
    body["usage"] = None
    assert translate(body)["usage"] == usage(0, 0, 0)


def test_usage_kept_on_incomplete() -> None:
    resp = translate(
        completion({"content": "a"}, "length", {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19})
    )
    assert resp["status"] == "incomplete"
    assert resp["usage"] == usage(3, 16, 19)


# -- reasoning (docs/wire-facts.md, Reasoning fields) ---------------------------------------------


@pytest.mark.parametrize("spelling", ["reasoning_content", "reasoning"])
def test_reasoning_becomes_the_first_item(spelling: str) -> None:
    resp = translate(completion({spelling: "Six times seven.", "content": "42"}))
    well_formed(resp)
    assert [shape(item) for item in resp["output"]] == [reasoning("Six times seven."), message(text("42"))]
    assert resp["output"][0].get("encrypted_content") is None  # not asked for


def test_openrouter_reasoning_details() -> None:
    details = [
        {"type": "reasoning.text", "text": "Think", "signature": "sig"},
        {"type": "reasoning.encrypted", "data": "opaque"},
    ]
    resp = translate(completion({"reasoning_details": details, "content": "Done"}))
    assert [shape(item) for item in resp["output"]] == [reasoning("Think"), message(text("Done"))]


def test_reasoning_in_two_spellings_is_not_doubled() -> None:
    resp = translate(
        completion(
            {
                "reasoning_content": "abc",
                "reasoning": "abc",
                "reasoning_details": [{"type": "reasoning.text", "text": "abc"}],
                "content": "x",
            }
        )
    )
    assert [shape(item) for item in resp["output"]] == [reasoning("abc"), message(text("x"))]


def test_reasoning_then_tool_call_without_text() -> None:
    resp = translate(
        completion({"reasoning_content": "Need weather.", "content": "", "tool_calls": [WEATHER]}, "tool_calls")
    )
    well_formed(resp)
    assert [shape(item) for item in resp["output"]] == [
        reasoning("Need weather."),
        call("call_a", "get_weather", '{"city":"Paris"}'),
    ]


def test_sealed_reasoning_when_asked() -> None:
    resp = translate(
        completion({"reasoning_content": "secret plan", "content": "ok"}),
        seal_reasoning=lambda t, details: "sealed:" + t[::-1],
    )
    assert resp["output"][0]["encrypted_content"] == "sealed:nalp terces"
    assert "encrypted_content" not in resp["output"][1]


@pytest.mark.parametrize(
    ("think_tags", "expected"),
    [(True, [reasoning("plan"), message(text("answer"))]), (False, [message(text("<think>plan</think>\n\nanswer"))])],
    ids=["on", "off"],
)
def test_think_tags(think_tags: bool, expected: list[dict[str, Any]]) -> None:
    resp = translate(
        completion({"content": "<think>plan</think>\n\nanswer"}), profile=BackendProfile(think_tags=think_tags)
    )
    assert [shape(item) for item in resp["output"]] == expected


# -- the envelope (docs/wire-facts.md, The Response object) ---------------------------------------


def test_response_echoes_the_request() -> None:
    request = {
        **REQUEST,
        "instructions": "Be brief.",
        "metadata": {"ticket": "7"},
        "temperature": 0.2,
        "max_output_tokens": 300,
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
    }
    resp = translate(completion({"content": "ok"}), request)
    well_formed(resp)
    assert (resp["instructions"], resp["metadata"], resp["temperature"], resp["max_output_tokens"]) == (
        "Be brief.",
        {"ticket": "7"},
        0.2,
        300,
    )
    # echoed complete, as the Open Responses schema has it (strict: the API's default, true)
    assert resp["tools"] == [{"type": "function", "name": "f", "description": None, "parameters": {}, "strict": True}]
    assert resp["completed_at"] == resp["created_at"] and (resp["presence_penalty"], resp["frequency_penalty"]) == (
        0,
        0,
    )


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "text_"),
    [
        (
            {"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}},
            "overloaded",
            "The server is overloaded",
        ),
        ({"error": {"message": "Rate limit reached", "type": "requests", "code": 429}}, None, "Rate limit reached"),
        ({"error": {"message": "Bad things", "type": "server_error", "code": None}}, None, "Bad things"),
        ({"error": "upstream exploded"}, None, "upstream exploded"),
        (
            {**completion({"content": "ignored"}), "error": {"message": "late failure", "code": "server_error"}},
            "server_error",
            "late failure",
        ),
    ],
    ids=["string code", "numeric code", "null code", "string error", "error beside choices"],
)
def test_error_in_a_200_body_fails(body: dict[str, Any], code: str | None, text_: str) -> None:
    resp = translate(body)
    well_formed(resp)
    assert resp["status"] == "failed"
    assert resp["incomplete_details"] is None
    assert resp["output"] == []
    assert resp["error"]["message"] == text_
    assert isinstance(resp["error"]["code"], str) and resp["error"]["code"]  # wire: code is a string
    if code is not None:
        assert resp["error"]["code"] == code


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": []},
        {"choices": None},
        {"choices": "x"},
        {"choices": [None]},
        {"choices": ["x"]},
        [],
        "text",
        None,
    ],
    ids=[
        "empty",
        "no choices",
        "null choices",
        "string choices",
        "null choice",
        "string choice",
        "list",
        "string",
        "null",
    ],
)
def test_no_usable_choice_is_an_upstream_protocol_error(body: Any) -> None:
    with pytest.raises(UpstreamProtocolError):
        translate(body)


@pytest.mark.parametrize("bad", ["hello", 5, True, ["x"]], ids=["string", "int", "bool", "list"])
def test_message_that_is_not_an_object_is_an_upstream_protocol_error(bad: Any) -> None:
    """Was a ValueError/TypeError escaping as a 500 internal_error; now the 502 a body without
    a usable choice gets, naming the problem."""
    body = completion()
    body["choices"][0]["message"] = bad
    with pytest.raises(UpstreamProtocolError, match="message that is not an object"):
        translate(body)


# -- agreement with the stream machine ------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One chat answer, to be sent both as a stream and as a body."""

    status: str
    types: tuple[str, ...]  # expected output item types (keeps the comparison honest)
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    content: str | None = None
    refusal: str | None = None
    calls: tuple[tuple[str | None, str, str], ...] = ()
    annotations: tuple[dict[str, Any], ...] = ()
    finish: str | None = "stop"
    usage: dict[str, Any] | None = None
    groq_usage: bool = False  # the stream reports usage in x_groq (Groq), the body at the top
    logprobs: bool = False
    pieces: int = 3  # fragments per streamed string
    tools: ToolContext = NO_TOOLS
    think_tags: bool = False
    seal: bool = False


def cut(value: str, n: int) -> list[str]:
    size = max(1, -(-len(value) // n))
    return [value[i : i + size] for i in range(0, len(value), size)]


def logprob(token: str) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": -0.25,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": token.upper(), "logprob": -2.0, "bytes": list(token.upper().encode())}],
    }


def as_chunks(a: Answer) -> list[dict[str, Any]]:
    """The stream an OpenAI-style server sends for the answer (docs/wire-facts.md, Chat framing and Deltas)."""

    chunk = functools.partial(chat_chunk, model="backend-model", id="chatcmpl-abc", logprobs=None, null_usage=True)

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({a.reasoning_field: p}) for p in cut(a.reasoning or "", a.pieces)]
    for p in cut(a.content or "", a.pieces):
        chunks.append(
            chunk({"content": p}, logprobs={"content": [logprob(p)], "refusal": None} if a.logprobs else None)
        )
    chunks += [chunk({"refusal": p}) for p in cut(a.refusal or "", a.pieces)]
    if a.annotations:
        chunks.append(chunk({"annotations": list(a.annotations)}))
    for index, (call_id, name, arguments) in enumerate(a.calls):
        first, *rest = cut(arguments, a.pieces) or [""]
        head: dict[str, Any] = {"index": index, "type": "function", "function": {"name": name, "arguments": first}}
        if call_id is not None:
            head["id"] = call_id
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in rest]
    chunks.append(chunk({}, a.finish))
    if a.usage is not None and a.groq_usage:
        chunks.append({**chunk(None), "x_groq": {"id": "req_1", "usage": a.usage}})
    elif a.usage is not None:
        chunks.append({**chunk(None), "usage": a.usage})
    return chunks


def as_completion(a: Answer) -> dict[str, Any]:
    """The same answer as a ``chat.completion`` body (docs/wire-facts.md, Non-streamed bodies)."""
    msg: dict[str, Any] = {"content": a.content, "refusal": a.refusal}
    if a.reasoning is not None:
        msg[a.reasoning_field] = a.reasoning
    if a.annotations:
        msg["annotations"] = list(a.annotations)
    if a.calls:
        msg["tool_calls"] = [tool_call(i, n, args) for i, n, args in a.calls]
    lp = {"content": [logprob(p) for p in cut(a.content or "", a.pieces)], "refusal": None} if a.logprobs else None
    return completion(msg, a.finish, a.usage, logprobs=lp)


def options(a: Answer) -> dict[str, Any]:
    return {
        "tools": a.tools,
        "profile": BackendProfile(think_tags=a.think_tags),
        "seal_reasoning": (lambda t, details: f"sealed({len(t)},{len(details or ())}):{t[::-1]}") if a.seal else None,
    }


def streamed(a: Answer) -> dict[str, Any]:
    machine = ChatToResponsesStream(REQUEST, ids=SequentialIds(), now=clock, **options(a))
    events = machine.start()
    for c in as_chunks(a):
        events += machine.feed(c)
        if machine.done:
            break
    if not machine.done:
        events += machine.finish()
    validate_responses_events(events)
    final = machine.final_response
    assert final is not None
    assert events[-1]["response"] is final
    return final


USAGE = {
    "prompt_tokens": 31,
    "completion_tokens": 17,
    "total_tokens": 48,
    "prompt_tokens_details": {"cached_tokens": 16},
    "completion_tokens_details": {"reasoning_tokens": 9},
}
URL = {
    "type": "url_citation",
    "url_citation": {"start_index": 4, "end_index": 11, "title": "Example", "url": "https://example.com/a"},
}

ANSWERS: dict[str, Answer] = {
    "text": Answer("completed", ("message",), content="The quick brown fox.", usage=USAGE),
    "reasoning then text": Answer(
        "completed",
        ("reasoning", "message"),
        reasoning="Think it through.",
        content="Forty-two.",
        usage=USAGE,
        seal=True,
    ),
    "vllm reasoning, parallel calls": Answer(
        "completed",
        ("reasoning", "function_call", "function_call"),
        reasoning="Two lookups.",
        reasoning_field="reasoning",
        calls=(("call_1", "get_weather", '{"city":"Paris"}'), ("call_2", "get_time", '{"tz":"Europe/Paris"}')),
        finish="tool_calls",
        usage=USAGE,
    ),
    "text then call": Answer(
        "completed",
        ("message", "function_call"),
        content="Checking.",
        calls=(("call_1", "lookup", '{"q":"x"}'),),
        finish="tool_calls",
    ),
    "call without id": Answer(
        "completed",
        ("function_call", "function_call"),
        calls=((None, "f", "{}"), (None, "g", '{"a":1}')),
        finish="tool_calls",
    ),
    "custom tool and function": Answer(
        "completed",
        ("custom_tool_call", "function_call"),
        calls=(("call_p", "apply_patch", json.dumps({"input": PATCH})), ("call_x", "exec_command", '{"cmd":"ls"}')),
        finish="tool_calls",
        tools=CUSTOM,
        pieces=7,
    ),
    "length": Answer("incomplete", ("message",), content="Once upon a time there", finish="length", usage=USAGE),
    "length while reasoning": Answer("incomplete", ("reasoning",), reasoning="First I need to", finish="length"),
    "content filter": Answer(
        "incomplete", ("message",), content="Here is", refusal="I can't continue.", finish="content_filter"
    ),
    "refusal": Answer("completed", ("message",), refusal="I can't help with that."),
    "annotations": Answer("completed", ("message",), content="See Example docs.", annotations=(URL,)),
    "logprobs": Answer("completed", ("message",), content="Hello there world", logprobs=True),
    "think tags": Answer(
        "completed",
        ("reasoning", "message"),
        content="<think>Plan: add.</think>\n\n4",
        think_tags=True,
        pieces=9,
        seal=True,
    ),
    "unknown finish": Answer("completed", ("message",), content="ok", finish="eos"),
    "no usage": Answer("completed", ("message",), content="ok"),
    "groq usage": Answer("completed", ("message",), content="fast", usage=USAGE, groq_usage=True),
    "out of resources": Answer(
        "failed", ("message",), content="Partial", finish="insufficient_system_resource", usage=USAGE
    ),
    "context length (Mistral)": Answer(
        "incomplete", ("message",), content="Once upon", finish="model_length", usage=USAGE
    ),
    "error finish (Mistral)": Answer("failed", ("message",), content="Partial", finish="error", usage=USAGE),
    "aborted (vLLM)": Answer("failed", ("reasoning",), reasoning="First I", finish="abort"),
}


@pytest.mark.parametrize("answer", list(ANSWERS.values()), ids=list(ANSWERS))
def test_body_agrees_with_the_stream(answer: Answer) -> None:
    from_stream = streamed(answer)
    from_body = chat_completion_to_response(
        as_completion(answer), REQUEST, ids=SequentialIds(), now=clock, **options(answer)
    )
    well_formed(from_body)
    assert from_body["status"] == answer.status
    assert tuple(item["type"] for item in from_body["output"]) == answer.types
    # The parts the brief names first, for a readable failure...
    for key in ("status", "incomplete_details", "error", "usage"):
        assert from_body[key] == from_stream[key], key
    assert [shape(i) for i in from_body["output"]] == [shape(i) for i in from_stream["output"]]
    # ...then the whole object: same injected ids and clock, so the same ids and timestamps too.
    assert from_body == from_stream


def test_usage_of_the_agreement_answers_is_mapped() -> None:
    # Guards the agreement table itself: usage is not trivially zero on both sides.
    resp = chat_completion_to_response(as_completion(ANSWERS["text"]), REQUEST, ids=SequentialIds(), now=clock)
    assert resp["usage"] == usage(31, 17, 48, cached=16, reasoning_tokens=9)
    assert streamed(ANSWERS["groq usage"])["usage"] == usage(31, 17, 48, cached=16, reasoning_tokens=9)


def test_error_body_agrees_with_the_stream_error_chunk() -> None:
    error = {"message": "The model is overloaded", "type": "server_error", "code": "overloaded"}
    machine = ChatToResponsesStream(REQUEST, ids=SequentialIds(), now=clock)
    events = machine.start() + machine.feed({"error": error})
    validate_responses_events(events)
    from_body = translate({"error": error})
    assert from_body["status"] == "failed"
    assert from_body == machine.final_response
