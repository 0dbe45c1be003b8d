"""ResponsesToChatStream: one test (or table row) per mapping rule, plus a round-trip property:
random chat answers rendered as Responses events by a tiny local generator come back intact."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.sse import render_chat
from tests.support.validators import accumulate_chat, validate_chat_chunks, validate_chat_sse

NOW = 1_700_000_000
USAGE = {
    "input_tokens": 11,
    "input_tokens_details": {"cached_tokens": 3},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 5},
    "total_tokens": 18,
}


# ---------------------------------------------------------------- event builders


def resp(status: str = "in_progress", **kw: Any) -> dict:
    r = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1234,
        "status": status,
        "model": "up-model",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    r.update(kw)
    return r


def created(**kw: Any) -> dict:
    return {"type": "response.created", "response": resp(**kw)}


def completed(**kw: Any) -> dict:
    return {"type": "response.completed", "response": resp("completed", **{"usage": USAGE, **kw})}


def incomplete(reason: Any) -> dict:
    return {
        "type": "response.incomplete",
        "response": resp("incomplete", usage=USAGE, incomplete_details={"reason": reason} if reason else None),
    }


def added(oi: int, item: dict) -> dict:
    return {"type": "response.output_item.added", "output_index": oi, "item": item}


def item_done(oi: int, item: dict) -> dict:
    return {"type": "response.output_item.done", "output_index": oi, "item": item}


def ev(kind: str, oi: int = 0, **kw: Any) -> dict:
    return {"type": f"response.{kind}", "output_index": oi, "item_id": f"it_{oi}", **kw}


def text_delta(d: str, oi: int = 0, ci: int = 0, **kw: Any) -> dict:
    return ev("output_text.delta", oi, content_index=ci, delta=d, **{"logprobs": [], **kw})


def fc(call_id: str = "call_a", name: str = "f", args: str = "") -> dict:
    return {
        "id": "fc_" + call_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "status": "in_progress",
    }


def ctc(call_id: str = "call_c", name: str = "patch", inp: str = "") -> dict:
    return {
        "id": "ctc_" + call_id,
        "type": "custom_tool_call",
        "call_id": call_id,
        "name": name,
        "input": inp,
        "status": "in_progress",
    }


def machine(include_usage: bool = True, wire: bool = False, **opts: Any) -> ResponsesToChatStream:
    return ResponsesToChatStream(
        include_usage=include_usage,
        options=BackendProfile(**opts),
        ids=SequentialIds(),
        now=lambda: NOW,
        model="req-model",
        wire=wire,
    )


def render_sse(chunks: list[dict]) -> bytes:
    """The client body, as ``translators.sse.render_chat`` writes it: one ``data:`` frame per
    chunk, then ``data: [DONE]`` when the stream ended cleanly. A stream that ends in an error
    frame stops there (the validator accepts it with or without a following [DONE])."""
    body = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    if chunks and not chunks[-1].get("error"):
        body += b"data: [DONE]\n\n"
    return body


_FROM_INCLUDE_USAGE = object()


def run(
    events: list,
    *,
    include_usage: bool = True,
    finish: bool = True,
    expect_usage: Any = _FROM_INCLUDE_USAGE,
    **opts: Any,
) -> tuple[list[dict], ResponsesToChatStream]:
    """Feed ``events``, finish the machine and check the whole client stream with the strict
    chat validator (as SSE bytes). ``expect_usage`` defaults to ``include_usage``; pass None
    where the upstream itself may lack usage (then no usage chunk can be sent). The same events
    through a wire-mode machine (text chunks as finished frames) must render the same bytes."""
    m = machine(include_usage, **opts)
    wired = machine(include_usage, wire=True, **opts)
    out: list[dict] = []
    wire_out: list[Any] = []
    for e in events:
        out += m.feed(e)
        wire_out += wired.feed(e)
    if finish:
        out += m.finish()
        wire_out += wired.finish()
    assert render_chat(wire_out) == render_chat(out)
    if finish:
        assert m.done
        usage = include_usage if expect_usage is _FROM_INCLUDE_USAGE else expect_usage
        assert validate_chat_sse(render_sse(out), expect_usage=usage) == out
    return out, m


def deltas(out: list[dict]) -> list[dict]:
    return [c["choices"][0]["delta"] for c in out if c.get("choices")]


def finish_of(out: list[dict]) -> str | None:
    reasons = [c["choices"][0]["finish_reason"] for c in out if c.get("choices")]
    return next((r for r in reasons if r is not None), None)


# ---------------------------------------------------------------- identity and role


def test_created_fixes_id_model_created_and_role_is_sent_once() -> None:
    out, m = run([created(), text_delta("a"), text_delta("b"), completed()])
    validate_chat_chunks(out, expect_usage=True)
    assert {(c["id"], c["model"], c["created"], c["object"]) for c in out} == {
        ("chatcmpl-0001", "up-model", 1234, "chat.completion.chunk")
    }
    assert deltas(out)[0] == {"role": "assistant", "content": ""}
    assert sum("role" in d for d in deltas(out)) == 1
    assert m.phase == "done" and m.done and m.finish_reason == "stop"


@pytest.mark.parametrize(
    ("events", "content"),
    [
        ([text_delta("hi")], ""),  # OpenAI's text streams start {"role", "content": ""}
        ([added(0, fc()), ev("function_call_arguments.delta", delta="{}")], None),  # its tool calls: null
        ([added(0, ctc())], None),
        ([ev("reasoning_text.delta", content_index=0, delta="hmm"), text_delta("hi", oi=1)], None),
        ([ev("refusal.delta", content_index=0, delta="no")], None),
        ([], ""),  # an empty answer: the role, then the finish chunk
    ],
    ids=["text", "call", "custom-call", "reasoning-then-text", "refusal", "empty"],
)
def test_the_role_chunk_goes_just_before_the_answer_with_null_content_unless_text(
    events: list[dict], content: str | None
) -> None:
    """The role chunk waits for the first chunk of the answer: ``content: ""`` only when that is
    text, so a tool-only answer opens no empty text part in a client (the AI SDK)."""
    m = machine()
    assert m.feed(created()) == [] and m.feed({"type": "response.in_progress", "response": resp()}) == []
    out, _ = run([created(), *events, completed()], expect_usage=True)
    assert deltas(out)[0] == {"role": "assistant", "content": content}
    assert sum("role" in d for d in deltas(out)) == 1 and len(deltas(out)) >= 2


def test_created_at_missing_uses_the_clock_and_later_lifecycle_events_change_nothing() -> None:
    later = {"type": "response.in_progress", "response": resp(model="other", created_at=99)}
    out, _ = run([created(created_at=None), later, text_delta("x"), completed(model="other")])
    assert {(c["model"], c["created"]) for c in out} == {("up-model", NOW)}


@pytest.mark.parametrize("created_at", [2**63, 1e19, -(2**63) - 1, 2**70])
def test_a_creation_time_no_chunk_can_carry_uses_the_clock(created_at: float) -> None:
    """A chunk's ``created`` is a 64-bit integer: a time beyond it (orjson parses an integer
    past 64 bits as a float) is counted and replaced, never a stream that cannot be rendered."""
    out, m = run([created(created_at=created_at), text_delta("x"), completed()])
    assert {c["created"] for c in out} == {NOW}
    assert m.diagnostics.get("created_at_out_of_range") == 1
    _, kept = run([created(created_at=2**63 - 1), text_delta("x"), completed()])
    assert "created_at_out_of_range" not in kept.diagnostics


def test_stream_without_lifecycle_events_starts_on_first_content() -> None:
    out, _m = run([text_delta("hi"), completed()])
    assert deltas(out)[:2] == [{"role": "assistant", "content": ""}, {"content": "hi"}]
    assert out[0]["model"] == "req-model"
    validate_chat_chunks(out, expect_usage=True)


def test_phase_moves_waiting_streaming_done() -> None:
    m = machine()
    assert m.phase == "waiting" and not m.done
    m.feed(created())
    assert m.phase == "streaming"
    m.feed(completed())
    assert m.phase == "done" and m.done


# ---------------------------------------------------------------- text, refusal, reasoning


@pytest.mark.parametrize(
    "event, expected",
    [
        (text_delta("Hello"), {"content": "Hello"}),
        (ev("refusal.delta", content_index=0, delta="No."), {"refusal": "No."}),
        (ev("reasoning_text.delta", content_index=0, delta="hmm"), {"reasoning_content": "hmm"}),
        (ev("reasoning_summary_text.delta", summary_index=0, delta="plan"), {"reasoning_content": "plan"}),
    ],
)
def test_delta_events_map_to_delta_fields(event: dict, expected: dict) -> None:
    out, _ = run([created(), event, completed()])
    assert deltas(out)[1] == expected


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content", "thinking"])
def test_reasoning_field_is_configurable(field: str) -> None:
    out, _ = run([created(), ev("reasoning_text.delta", content_index=0, delta="r")], reasoning_field=field)
    assert deltas(out)[1] == {field: "r"}


@pytest.mark.parametrize(
    "kind",
    [
        "output_text.delta",
        "refusal.delta",
        "reasoning_text.delta",
        "reasoning_summary_text.delta",
        "function_call_arguments.delta",
    ],
)
def test_empty_deltas_emit_nothing(kind: str) -> None:
    m = machine()
    m.feed(created())
    m.feed(added(0, fc()))
    assert m.feed(ev(kind, content_index=0, summary_index=0, delta="")) == []


def test_logprobs_map_to_choice_logprobs() -> None:
    lp = [{"token": "Hi", "logprob": -0.5, "top_logprobs": [{"token": "Hey", "logprob": -1.5}]}]
    out, _ = run([created(), text_delta("Hi", logprobs=lp)])
    assert out[1]["choices"][0]["logprobs"] == {
        "content": [
            {
                "token": "Hi",
                "logprob": -0.5,
                "bytes": None,
                "top_logprobs": [{"token": "Hey", "logprob": -1.5, "bytes": None}],
            }
        ],
        "refusal": None,
    }
    assert out[0]["choices"][0]["logprobs"] is None


def test_summary_parts_and_reasoning_items_are_separated_by_a_blank_line() -> None:
    out, _ = run(
        [
            created(),
            ev("reasoning_summary_text.delta", 0, summary_index=0, delta="A"),
            ev("reasoning_summary_text.delta", 0, summary_index=0, delta="a"),
            ev("reasoning_summary_text.delta", 0, summary_index=1, delta="B"),
            ev("reasoning_text.delta", 1, content_index=0, delta="C"),
            ev("reasoning_text.delta", 1, content_index=1, delta="c"),
            completed(),
        ]
    )
    assert accumulate_chat(out)["reasoning"] == "Aa\n\nB\n\nCc"


def test_text_of_separate_message_items_is_separated_by_a_blank_line() -> None:
    out, _ = run([created(), text_delta("one", 0), text_delta("two", 2, 0), text_delta("!", 2, 1), completed()])
    assert accumulate_chat(out)["content"] == "one\n\ntwo!"


def test_events_are_matched_by_output_index_even_when_item_ids_rotate() -> None:
    a = text_delta("Hel", 0) | {"item_id": "x1"}
    b = text_delta("lo", 0) | {"item_id": "x2"}
    done = ev("output_text.done", 0, content_index=0, text="Hello") | {"item_id": "x3"}
    out, m = run([created(), a, b, done, completed()])
    assert accumulate_chat(out)["content"] == "Hello" and not m.diagnostics


# ---------------------------------------------------------------- done-only backends

TEXT_DONE = [
    # (events after created, expected content, diagnostics)
    ([ev("output_text.done", content_index=0, text="whole")], "whole", {}),
    ([text_delta("who"), text_delta("le"), ev("output_text.done", content_index=0, text="whole")], "whole", {}),
    ([text_delta("who"), ev("output_text.done", content_index=0, text="whole")], "whole", {}),
    ([text_delta("abc"), ev("output_text.done", content_index=0, text="xyz")], "abc", {"done_text_mismatch": 1}),
    ([ev("content_part.done", content_index=0, part={"type": "output_text", "text": "part"})], "part", {}),
    ([item_done(0, {"type": "message", "content": [{"type": "output_text", "text": "item"}]})], "item", {}),
    (
        [
            ev("output_text.done", content_index=0, text="t"),
            ev("content_part.done", content_index=0, part={"type": "output_text", "text": "t"}),
            item_done(0, {"type": "message", "content": [{"type": "output_text", "text": "t"}]}),
        ],
        "t",
        {},
    ),
]


@pytest.mark.parametrize("events, content, diagnostics", TEXT_DONE)
def test_done_events_send_only_text_never_seen(events: list, content: str, diagnostics: dict) -> None:
    out, m = run([created(), *events, completed()])
    assert accumulate_chat(out)["content"] == content
    assert m.diagnostics == diagnostics


def test_done_only_refusal_reasoning_and_arguments() -> None:
    out, _ = run(
        [
            created(),
            ev("reasoning_summary_text.done", 0, summary_index=0, text="S"),
            ev("reasoning_text.done", 1, content_index=0, text="R"),
            ev("refusal.done", 2, content_index=0, refusal="No"),
            added(3, fc()),
            ev("function_call_arguments.done", 3, arguments='{"a":1}'),
            item_done(3, fc(args='{"a":1}')),
            completed(),
        ]
    )
    acc = accumulate_chat(out)
    assert (acc["reasoning"], acc["refusal"]) == ("S\n\nR", "No")
    assert acc["tool_calls"] == [{"id": "call_a", "name": "f", "arguments": '{"a":1}'}]


def test_open_responses_names_of_the_reasoning_events_are_read_as_openais() -> None:
    def stream(name: str) -> list:
        return [
            created(),
            added(0, {"type": "reasoning", "id": "it_0", "summary": [], "content": []}),
            ev(f"{name}.delta", 0, content_index=0, delta="Let me "),
            ev(f"{name}.delta", 0, content_index=0, delta="think"),
            ev(f"{name}.done", 0, content_index=0, text="Let me think."),
            text_delta("Hi", 1),
            completed(),
        ]

    out, m = run(stream("reasoning"))
    assert accumulate_chat(out)["reasoning"] == "Let me think." and not m.diagnostics
    assert out == run(stream("reasoning_text"))[0]


def test_response_with_no_item_events_is_replayed_from_the_terminal_output() -> None:
    output = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "content": [{"type": "output_text", "text": "answer"}]},
        fc(args="{}") | {"status": "completed"},
    ]
    out, m = run([created(), completed(output=output)])
    acc = accumulate_chat(out)
    assert (acc["reasoning"], acc["content"], acc["finish_reason"]) == ("think", "answer", "tool_calls")
    assert m.diagnostics == {"hosted_item:web_search_call": 1}


def test_terminal_output_is_not_replayed_once_items_were_streamed() -> None:
    output = [{"type": "message", "content": [{"type": "output_text", "text": "other text"}]}]
    out, _ = run([created(), text_delta("streamed", 1), completed(output=output)])
    assert accumulate_chat(out)["content"] == "streamed"


# ---------------------------------------------------------------- tool calls


def test_function_calls_are_numbered_in_order_of_appearance_not_by_output_index() -> None:
    out, _ = run(
        [
            created(),
            added(3, fc("call_x", "first")),
            ev("function_call_arguments.delta", 3, delta='{"a"'),
            added(7, fc("call_y", "second")),
            ev("function_call_arguments.delta", 7, delta="{}"),
            ev("function_call_arguments.delta", 3, delta=":1}"),
            completed(),
        ]
    )
    validate_chat_chunks(out, expect_usage=True)
    frags = [f for d in deltas(out) for f in d.get("tool_calls", [])]
    assert frags[0] == {"index": 0, "id": "call_x", "type": "function", "function": {"name": "first", "arguments": ""}}
    assert frags[2] == {"index": 1, "id": "call_y", "type": "function", "function": {"name": "second", "arguments": ""}}
    later = [f for f in frags if f not in (frags[0], frags[2])]
    assert [set(f) for f in later] == [{"index", "function"}] * 3  # no id/type/name repeated
    assert all(set(f["function"]) == {"arguments"} for f in later)
    acc = accumulate_chat(out)
    assert [c["arguments"] for c in acc["tool_calls"]] == ['{"a":1}', "{}"]
    assert acc["finish_reason"] == "tool_calls"


def test_a_call_item_is_opened_once_even_if_added_twice() -> None:
    out, _ = run([created(), added(0, fc()), added(0, fc()), completed()])
    assert sum(len(d.get("tool_calls", [])) for d in deltas(out)) == 1


def test_arguments_whose_item_never_comes_are_dropped_and_counted() -> None:
    """A chat tool call needs a name: fragments of a call no item ever names are not sent."""
    out, m = run(
        [
            created(),
            ev("function_call_arguments.delta", 2, delta="{}"),
            ev("function_call_arguments.done", 2, arguments="{}"),
            completed(),
        ]
    )
    validate_chat_chunks(out, expect_usage=True)
    assert not any("tool_calls" in d for d in deltas(out))
    assert finish_of(out) == "stop" and m.diagnostics == {"call_without_added": 1}


@pytest.mark.parametrize("custom", [False, True], ids=["function", "custom"])
def test_arguments_before_output_item_added_are_held_until_the_item_names_the_call(custom: bool) -> None:
    item, kind = (ctc(), "custom_tool_call_input") if custom else (fc(), "function_call_arguments")
    final = '{"a": 1}'
    key = "input" if custom else "arguments"
    out, m = run(
        [
            created(),
            ev(f"{kind}.delta", 0, delta='{"a"'),
            ev(f"{kind}.delta", 0, delta=": 1"),
            added(0, item),
            ev(f"{kind}.delta", 0, delta="}"),
            ev(f"{kind}.done", 0, **{key: final}),
            item_done(0, item | {key: final}),
            completed(),
        ]
    )
    validate_chat_chunks(out, expect_usage=True)
    frags = [f for d in deltas(out) for f in d.get("tool_calls", [])]
    first = frags[0]
    assert first["id"] == item["call_id"] and first["function"]["name"] == item["name"]
    assert first["function"]["arguments"] == ('"' + '{\\"a\\": 1' if custom else '{"a": 1')
    acc = accumulate_chat(out)
    assert acc["tool_calls"] == [
        {"id": item["call_id"], "name": item["name"], "arguments": json.dumps(final) if custom else final}
    ]
    assert acc["finish_reason"] == "tool_calls" and m.diagnostics == {}


def test_arguments_done_before_output_item_added_is_sent_with_the_item() -> None:
    out, m = run([created(), ev("function_call_arguments.done", 0, arguments="{}"), added(0, fc()), completed()])
    validate_chat_chunks(out, expect_usage=True)
    assert accumulate_chat(out)["tool_calls"] == [{"id": "call_a", "name": "f", "arguments": "{}"}]
    assert m.diagnostics == {}


@pytest.mark.parametrize("via", ["item_done", "terminal_output"])
def test_held_arguments_are_sent_when_only_the_final_item_names_the_call(via: str) -> None:
    events = [
        created(),
        ev("function_call_arguments.delta", 0, delta='{"a"'),
        ev("function_call_arguments.delta", 0, delta=":1}"),
    ]
    final = fc(args='{"a":1}') | {"status": "completed"}
    if via == "item_done":
        events.append(item_done(0, final))
    out, m = run([*events, completed(output=[final])])
    validate_chat_chunks(out, expect_usage=True)
    assert accumulate_chat(out)["tool_calls"] == [{"id": "call_a", "name": "f", "arguments": '{"a":1}'}]
    assert finish_of(out) == "tool_calls" and m.diagnostics == {}


@pytest.mark.parametrize("closing", ["input_done", "item_done", "terminal_only"])
def test_custom_tool_call_arguments_are_the_json_encoded_input(closing: str) -> None:
    text = 'line "one"\n\\back\ttab é 🎉'
    pieces = [text[:5], text[5:13], text[13:]]
    events = [created(), added(1, ctc())] + [ev("custom_tool_call_input.delta", 1, delta=p) for p in pieces]
    if closing == "input_done":
        events.append(ev("custom_tool_call_input.done", 1, input=text))
    if closing in ("input_done", "item_done"):
        events.append(item_done(1, ctc(inp=text)))
    out, m = run([*events, completed()])
    validate_chat_chunks(out, expect_usage=True)
    calls = accumulate_chat(out)["tool_calls"]
    assert calls == [{"id": "call_c", "name": "patch", "arguments": json.dumps(text, ensure_ascii=False)}]
    assert json.loads(calls[0]["arguments"]) == text
    assert deltas(out)[1]["tool_calls"][0]["type"] == "function"
    assert accumulate_chat(out)["finish_reason"] == "tool_calls" and not m.diagnostics


def test_custom_tool_call_input_only_in_the_done_item() -> None:
    out, _ = run([created(), added(0, ctc()), item_done(0, ctc(inp="a\nb")), completed()])
    assert json.loads(accumulate_chat(out)["tool_calls"][0]["arguments"]) == "a\nb"


# ---------------------------------------------------------------- hosted and unknown events


@pytest.mark.parametrize(
    "event, key",
    [
        (ev("web_search_call.searching"), "hosted_event:response.web_search_call.searching"),
        (ev("code_interpreter_call_code.delta", delta="x"), "hosted_event:response.code_interpreter_call_code.delta"),
        (ev("mcp_call_arguments.delta", delta="x"), "hosted_event:response.mcp_call_arguments.delta"),
        (
            ev("apply_patch_call_operation_diff.delta", delta="x"),
            "hosted_event:response.apply_patch_call_operation_diff.delta",
        ),
        (added(0, {"type": "web_search_call", "id": "ws"}), "hosted_item:web_search_call"),
        (ev("brand_new_thing.delta", delta="x"), "unknown_event:response.brand_new_thing.delta"),
        ({"type": "response.audio.delta", "delta": "AAAA"}, "unknown_event:response.audio.delta"),
        ({"no_type": True}, "unknown_event:None"),
    ],
)
def test_hosted_and_unknown_events_produce_nothing_and_are_counted(event: dict, key: str) -> None:
    m = machine()
    out = m.feed(created())
    assert m.feed(event) == []
    assert m.feed(event) == []
    assert m.diagnostics == {key: 2}
    assert not m.done
    out += m.feed(completed())
    assert out[-2]["choices"][0]["finish_reason"] == "stop"
    validate_chat_sse(render_sse(out), expect_usage=True)


def test_keepalive_is_harmless_and_a_non_object_event_is_a_protocol_error() -> None:
    m = machine()
    assert m.feed({"type": "keepalive"}) == [] and m.phase == "waiting"
    out = m.feed(["not", "an", "object"])  # type: ignore[arg-type]
    assert out == [m.error] and out[0]["error"]["code"] == "upstream_protocol_error"
    assert m.done and m.diagnostics == {"malformed_event": 1}
    validate_chat_sse(render_sse(out), expect_usage=True)


# ---------------------------------------------------------------- wrong shapes end the stream as a failure

MALFORMED = [
    # (events after created, words the error message must contain)
    ([text_delta("a"), text_delta(5)], "delta is an integer"),  # type: ignore[arg-type]
    ([text_delta(None)], "delta is null"),  # type: ignore[arg-type]
    ([{"type": "response.output_text.delta", "output_index": 0}], "delta is null"),
    ([ev("refusal.delta", delta=["x"])], "delta is an array"),
    ([ev("reasoning_text.delta", delta={})], "delta is an object"),
    ([ev("reasoning_summary_text.delta", delta=1.5)], "delta is a number"),
    ([added(0, fc()), ev("function_call_arguments.delta", delta=7)], "delta is an integer"),
    ([added(0, ctc()), ev("custom_tool_call_input.delta", delta=True)], "delta is a boolean"),
    ([text_delta("a") | {"output_index": "0"}], "output_index is a string"),
    ([text_delta("a") | {"output_index": [0]}], "output_index is an array"),
    ([text_delta("a", ci="1")], "content_index is a string"),  # type: ignore[arg-type]
    ([text_delta("a", logprobs="x")], "logprobs is a string"),
    ([text_delta("a", logprobs=[5])], "logprobs[0] is an integer"),
    ([text_delta("a", logprobs=[{"token": "a", "logprob": "low"}])], "logprob is a string"),
    ([ev("output_text.done", text=5)], "text is an integer"),
    ([ev("refusal.done", refusal=[])], "refusal is an array"),
    ([ev("reasoning_summary_text.done", text={})], "text is an object"),
    ([ev("reasoning_summary_part.done", part="x")], "part is a string"),
    ([ev("content_part.done", part={"type": "output_text", "text": 1})], "text is an integer"),
    ([ev("output_text.annotation.added", annotation="cite")], "annotation is a string"),
    ([added(0, fc()), ev("function_call_arguments.done", arguments={"a": 1})], "arguments is an object"),
    ([added(0, "item")], "item is a string"),
    ([added(0, {"id": "x"})], "item.type is null"),
    ([added(0, fc(name=None))], "without a name"),  # type: ignore[arg-type]
    ([added(0, fc(name=""))], "without a name"),
    ([added(0, fc() | {"call_id": 5})], "call_id is an integer"),
    ([added(0, fc() | {"arguments": 5})], "arguments is an integer"),
    ([item_done(0, {"type": "message", "content": "hi"})], "content is a string"),
    ([item_done(0, {"type": "message", "content": [5]})], "content[0] is an integer"),
    ([item_done(0, {"type": "reasoning", "summary": [{"type": "summary_text", "text": 5}]})], "text is an integer"),
    ([{"type": "response.completed", "response": "done"}], "response is a string"),
    ([completed(usage={"input_tokens": "11"})], "input_tokens is a string"),
    ([completed(usage={"input_tokens": -1})], "input_tokens is an integer"),
    ([completed(usage=[1])], "usage is an array"),
    ([completed(output="x")], "output is a string"),
    ([completed(output=[{"type": "message", "content": [{"type": "output_text", "text": 5}]}])], "text is an integer"),
    ([incomplete(5)], "reason is an integer"),
    (
        [{"type": "response.incomplete", "response": resp("incomplete", incomplete_details="x")}],
        "incomplete_details is a string",
    ),
    ([{"type": 5}], "type is an integer"),
    # the places named where a check is read inline (text_parts.py, machine.py, body.py)
    ([ev("content_part.done", part={"type": 5})], "response.content_part.done: part: type is an integer"),
    ([ev("content_part.done", part={"type": "refusal", "refusal": 3})], "response.content_part.done: part: refusal is"),
    ([item_done(0, {"type": "message", "content": [{"type": 5}]})], "message.content[0]: type is an integer"),
    (
        [
            item_done(
                0,
                {
                    "type": "message",
                    "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": 5}],
                },
            )
        ],
        "message.content[1]: text is an integer",
    ),
    (
        [item_done(0, {"type": "message", "content": [{"type": "output_text", "annotations": "x"}]})],
        "message.content[0]: annotations is a string",
    ),
    (
        [item_done(0, {"type": "message", "content": [{"type": "output_text", "annotations": [5]}]})],
        "message.content[0].annotations[0] is an integer",
    ),
    ([ev("output_text.done", content_index="0", text="a")], "response.output_text.done: content_index is a string"),
    ([ev("output_text.done", output_index="0", text="a")], "response.output_text.done: output_index is a string"),
    (
        [completed(usage={"output_tokens_details": {"reasoning_tokens": "2"}})],
        "response.usage.output_tokens_details: reasoning_tokens is a string",
    ),
    (
        [completed(usage={"input_tokens_details": {"cached_tokens": -1}})],
        "response.usage.input_tokens_details: cached_tokens is an integer",
    ),
]


@pytest.mark.parametrize("events, words", MALFORMED, ids=[w for _, w in MALFORMED])
def test_wrong_types_end_the_stream_with_a_protocol_error_never_a_success(events: list, words: str) -> None:
    out, m = run([created(), *events, completed()])
    validate_chat_chunks(out)
    assert finish_of(out) is None and m.finish_reason is None
    err = out[-1]["error"]
    assert err["code"] == "upstream_protocol_error" and words in err["message"], err
    assert m.error == out[-1] and m.diagnostics.get("malformed_event") == 1


def test_wrong_first_event_sends_only_the_error() -> None:
    out, _ = run([{"type": "response.created", "response": resp(created_at="yesterday")}])
    assert out == [
        {
            "error": {
                "message": "malformed upstream event: response: created_at is a string, expected a number",
                "type": "server_error",
                "param": None,
                "code": "upstream_protocol_error",
            }
        }
    ]


def test_usage_is_only_checked_when_the_client_asked_for_it() -> None:
    out, m = run([created(), text_delta("x"), completed(usage="lots")], include_usage=False)
    assert finish_of(out) == "stop" and not m.diagnostics


def test_absent_optional_fields_are_not_errors() -> None:
    """Absent or null means "not given": done events without their text, events keyed by item_id
    only, null indexes and logprobs, a terminal event without a response."""
    out, m = run(
        [
            created(),
            {
                "type": "response.output_text.delta",
                "item_id": "m",
                "delta": "a",
                "content_index": None,
                "logprobs": None,
            },
            {"type": "response.output_text.done", "item_id": "m"},
            ev("content_part.done"),
            {"type": "response.completed"},
        ],
        include_usage=False,
    )
    validate_chat_chunks(out, expect_usage=False)
    assert accumulate_chat(out)["content"] == "a" and finish_of(out) == "stop" and not m.diagnostics


# ---------------------------------------------------------------- annotations


def test_url_citations_are_nested_offset_and_sent_once_before_the_finish_chunk() -> None:
    cite = {"type": "url_citation", "start_index": 0, "end_index": 3, "title": "T", "url": "https://u"}
    out, m = run(
        [
            created(),
            text_delta("abc", 0),
            text_delta("def", 1),
            ev("output_text.annotation.added", 1, content_index=0, annotation_index=0, annotation=cite),
            ev(
                "output_text.annotation.added",
                1,
                content_index=0,
                annotation_index=1,
                annotation={"type": "file_citation", "file_id": "f", "index": 0},
            ),
            completed(),
        ]
    )
    validate_chat_chunks(out, expect_usage=True)
    assert deltas(out)[-2] == {
        "annotations": [
            {
                "type": "url_citation",
                "url_citation": {"start_index": 5, "end_index": 8, "title": "T", "url": "https://u"},
            }
        ]
    }
    assert accumulate_chat(out)["content"][5:8] == "def"
    assert m.diagnostics == {"annotation_dropped:file_citation": 1}


def test_annotations_of_the_final_item_replace_the_streamed_ones() -> None:
    cite = {"type": "url_citation", "url": "https://x"}
    final = {"type": "message", "content": [{"type": "output_text", "text": "hi", "annotations": [cite, cite]}]}
    out, _ = run(
        [
            created(),
            text_delta("hi"),
            ev("output_text.annotation.added", content_index=0, annotation_index=0, annotation=cite),
            item_done(0, final),
            completed(),
        ]
    )
    anns = deltas(out)[-2]["annotations"]
    assert len(anns) == 2 and anns[0]["url_citation"] == {
        "start_index": 0,
        "end_index": 0,
        "title": "",
        "url": "https://x",
    }


# ---------------------------------------------------------------- terminal events and usage


@pytest.mark.parametrize(
    "terminal, calls, reason",
    [
        (completed(), False, "stop"),
        (completed(), True, "tool_calls"),
        (incomplete("max_output_tokens"), False, "length"),
        (incomplete("max_output_tokens"), True, "length"),
        (incomplete("content_filter"), False, "content_filter"),
        (incomplete("max_messages"), False, "length"),
        (incomplete(None), False, "length"),
    ],
)
def test_finish_reason(terminal: dict, calls: bool, reason: str) -> None:
    events = [created(), text_delta("x")] + ([added(1, fc())] if calls else []) + [terminal]
    out, m = run(events)
    validate_chat_chunks(out, expect_usage=True)
    assert deltas(out)[-1] == {} and finish_of(out) == reason == m.finish_reason


def test_usage_chunk_is_last_with_empty_choices_and_mapped_details() -> None:
    out, _ = run([created(), text_delta("x"), completed()])
    assert out[-1]["choices"] == [] and out[-1]["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    assert all(c["usage"] is None for c in out[:-1])


def test_no_usage_chunk_and_no_usage_key_unless_requested() -> None:
    out, _ = run([created(), text_delta("x"), completed()], include_usage=False)
    validate_chat_chunks(out, expect_usage=False)
    assert all("usage" not in c for c in out) and out[-1]["choices"][0]["finish_reason"] == "stop"


def test_missing_upstream_usage_skips_the_usage_chunk_and_is_counted() -> None:
    out, m = run([created(), completed(usage=None)], expect_usage=None)  # nothing to report
    assert out[-1]["choices"][0]["finish_reason"] == "stop"
    assert m.diagnostics == {"usage_missing": 1}


# ---------------------------------------------------------------- failures

ERRORS = [
    # (failure event, expected error object)
    (
        {"type": "response.failed", "response": resp("failed", error={"code": "server_error", "message": "boom"})},
        {"message": "boom", "type": "server_error", "param": None, "code": "server_error"},
    ),
    (
        {
            "type": "error",
            "error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "quota", "param": None},
        },
        {"message": "quota", "type": "insufficient_quota", "param": None, "code": "insufficient_quota"},
    ),
    (
        {"type": "error", "code": "invalid_prompt", "message": "bad prompt", "param": "input"},
        {"message": "bad prompt", "type": "invalid_request_error", "param": "input", "code": "invalid_prompt"},
    ),
    (
        {"type": "error", "message": "?"},
        {"message": "?", "type": "server_error", "param": None, "code": "server_error"},
    ),
    (
        {"type": "response.failed", "response": resp("failed")},
        {"message": "upstream response failed", "type": "server_error", "param": None, "code": "server_error"},
    ),
]


@pytest.mark.parametrize("failure, error", ERRORS)
def test_failures_end_the_stream_with_an_openai_error_object(failure: dict, error: dict) -> None:
    out, m = run([created(), text_delta("partial"), failure, completed(), text_delta("late")])
    validate_chat_chunks(out)
    assert out[-1] == {"error": error} and m.error == {"error": error}
    assert [c for c in out if "error" in c] == [out[-1]]
    assert m.done and m.finish_reason is None and m.diagnostics == {"after_terminal": 2}


def test_error_before_any_lifecycle_event_is_the_only_output() -> None:
    out, _ = run([{"type": "error", "code": "rate_limit_exceeded", "message": "slow down"}])
    assert out == [
        {"error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"}}
    ]


def test_stream_ending_without_terminal_event_is_a_failure() -> None:
    out, m = run([created(), text_delta("cut")])
    assert out[-1] == {
        "error": {
            "message": "upstream stream ended before a terminal event",
            "type": "server_error",
            "param": None,
            "code": "upstream_protocol_error",
        }
    }
    assert m.finish() == [] and m.fail("x", "y") == []


def test_finish_after_done_and_clean_done_marker() -> None:
    m = machine()
    out = m.feed(created())
    tail = m.finish(clean=True)
    assert out == [] and tail[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # due until now
    assert tail[1]["error"]["code"] == "upstream_protocol_error"
    validate_chat_sse(render_sse(out + tail), expect_usage=True)
    m2 = machine()
    out = m2.feed(created()) + m2.feed(completed())
    assert m2.finish() == [] and m2.finish(clean=False) == []
    validate_chat_sse(render_sse(out), expect_usage=True)


def test_fail_reports_the_driver_code_and_message() -> None:
    m = machine()
    out = m.feed(created())
    tail = m.fail("upstream_timeout", "no data for 60s")
    assert out == [] and tail[1:] == [
        {"error": {"message": "no data for 60s", "type": "server_error", "param": None, "code": "upstream_timeout"}}
    ]
    assert m.done and m.feed(text_delta("x")) == []
    validate_chat_sse(render_sse(out + tail), expect_usage=True)


# ---------------------------------------------------------------- property: chat -> Responses -> chat


def _pieces(draw: Any, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=6))) if len(text) > 1 else []
    bounds = [0, *[c for c in cuts if c < len(text)], len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b]]


@st.composite
def chat_answers(draw: Any) -> dict:
    names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
    calls = draw(st.lists(st.tuples(names, st.booleans(), st.text(max_size=40)), max_size=4))
    return {
        "reasoning": draw(st.text(max_size=80)),
        "content": draw(st.text(max_size=120)),
        # (name, custom?, arguments or input)
        "calls": [(n, custom, inp if custom else json.dumps({"v": inp})) for n, custom, inp in calls],
        "finish": draw(st.sampled_from(["stop", "length", "content_filter"])),
        "done_only": draw(st.booleans()),
        "seed": draw(st.data()),
    }


def render(answer: dict) -> list[dict]:
    """A tiny Responses producer: the events a well-behaved backend sends for this answer."""
    draw = answer["seed"].draw
    done_only = answer["done_only"]
    events: list[dict] = [created(), {"type": "response.in_progress", "response": resp()}]
    oi = 0

    def stream(kind: str, text: str, final: dict, **ix: Any) -> None:
        if not done_only:
            events.extend(ev(f"{kind}.delta", oi, delta=p, **ix) for p in _pieces(draw, text))
        events.append(ev(f"{kind}.done", oi, **ix, **final))

    if answer["reasoning"]:
        events.append(added(oi, {"id": "rs", "type": "reasoning", "summary": [], "content": []}))
        stream("reasoning_text", answer["reasoning"], {"text": answer["reasoning"]}, content_index=0)
        oi += 1
    if answer["content"]:
        events.append(added(oi, {"id": "msg", "type": "message", "role": "assistant", "content": []}))
        stream("output_text", answer["content"], {"text": answer["content"]}, content_index=0)
        oi += 1
    for k, (name, custom, payload) in enumerate(answer["calls"]):
        item = ctc(f"call_{k}", name) if custom else fc(f"call_{k}", name)
        events.append(added(oi, item))
        if custom:
            stream("custom_tool_call_input", payload, {"input": payload})
        else:
            stream("function_call_arguments", payload, {"arguments": payload})
        oi += 1
    if answer["finish"] == "stop":
        events.append(completed())
    else:
        events.append(incomplete("max_output_tokens" if answer["finish"] == "length" else "content_filter"))
    return events


@settings(max_examples=200, deadline=None)
@given(chat_answers(), st.sampled_from(["reasoning_content", "reasoning"]))
def test_round_trip_keeps_text_reasoning_tool_calls_and_finish_reason(answer: dict, field: str) -> None:
    out, m = run(render(answer), reasoning_field=field)
    validate_chat_chunks(out, expect_usage=True)
    acc = accumulate_chat(out, reasoning_field=field)
    assert (acc["content"] or "") == answer["content"]
    assert (acc["reasoning"] or "") == answer["reasoning"]
    expected_calls = [
        {"id": f"call_{k}", "name": name, "arguments": json.dumps(p, ensure_ascii=False) if custom else p}
        for k, (name, custom, p) in enumerate(answer["calls"])
    ]
    assert acc["tool_calls"] == expected_calls
    for call, (_, custom, p) in zip(acc["tool_calls"], answer["calls"], strict=True):
        assert json.loads(call["arguments"]) == (p if custom else json.loads(p))
    finish = answer["finish"]
    assert acc["finish_reason"] == ("tool_calls" if finish == "stop" and answer["calls"] else finish)
    assert m.diagnostics == {}


# ---------------------------------------------------------------- robustness: junk never raises

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_TYPES = [
    "response.created",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.refusal.delta",
    "response.reasoning_summary_text.done",
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.done",
    "response.content_part.done",
    "response.output_text.annotation.added",
    "response.x.y",
]


@st.composite
def junk_events(draw: Any) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(_JUNK)
    keys = [
        "output_index",
        "content_index",
        "summary_index",
        "annotation_index",
        "delta",
        "text",
        "arguments",
        "input",
        "refusal",
        "item",
        "part",
        "annotation",
        "response",
        "error",
        "logprobs",
        "code",
        "message",
    ]
    event = {k: draw(_JUNK) for k in draw(st.sets(st.sampled_from(keys), max_size=6))}
    if draw(st.booleans()):
        event["item"] = {
            "type": draw(
                st.sampled_from(["message", "function_call", "custom_tool_call", "reasoning", "web_search_call"])
            ),
            "content": draw(
                st.one_of(
                    _JUNK, st.lists(st.fixed_dictionaries({"type": st.just("output_text"), "text": _JUNK}), max_size=2)
                )
            ),
            "summary": draw(_JUNK),
            "name": draw(_JUNK),
            "call_id": draw(_JUNK),
            "arguments": draw(_JUNK),
            "input": draw(_JUNK),
        }
    if draw(st.booleans()):
        event["response"] = {
            "output": draw(st.one_of(_JUNK, st.lists(st.just(event.get("item") or {}), max_size=2))),
            "usage": draw(st.one_of(_JUNK, st.just(USAGE))),
            "error": draw(_JUNK),
            "incomplete_details": draw(_JUNK),
            "model": draw(_JUNK),
            "created_at": draw(_JUNK),
        }
    event["type"] = draw(st.one_of(st.sampled_from(_TYPES), _JUNK))
    return event


@settings(max_examples=150, deadline=None)
@given(st.lists(junk_events(), max_size=12))
def test_junk_events_never_raise_and_the_stream_always_ends(events: list) -> None:
    out, m = run(events, expect_usage=None)  # junk terminal events may carry no usage
    assert m.done and out
    last = out[-1]
    assert "error" in last or last["choices"] == [] or last["choices"][0]["finish_reason"] is not None
    assert sum("error" in c for c in out) <= 1


@pytest.mark.parametrize("include_usage", [True, False])
@pytest.mark.parametrize(
    ("terminal", "expected"),
    [
        (completed(), USAGE),
        (incomplete("max_output_tokens"), USAGE),
        (
            {
                "type": "response.failed",
                "response": resp("failed", usage=USAGE, error={"code": "server_error", "message": "boom"}),
            },
            USAGE,
        ),
        (completed(usage=None), None),
        ({"type": "response.failed", "response": resp("failed")}, None),
        ({"type": "error", "code": "server_error", "message": "boom"}, None),
    ],
)
def test_terminal_usage_is_kept_for_the_driver(terminal: dict, expected: Any, include_usage: bool) -> None:
    """``usage``: what the terminal Response reported, whether or not the client asked for it in
    the stream (the proxy's summary line and token counter read it)."""
    _out, m = run([created(), terminal], include_usage=include_usage, expect_usage=None)
    assert m.usage == expected
