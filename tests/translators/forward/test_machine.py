"""Unit rules of the forward stream machine that golden files do not isolate."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.errors import StreamStateError
from crossfeed.translators.forward.assembler import Phase
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile, ToolContext
from crossfeed.translators.pump import Pump
from crossfeed.translators.sse import render_responses
from tests.support.captures import data_objects, read_capture
from tests.support.chat_chunks import chat_chunk
from tests.support.validators import validate_responses_events, validate_responses_sse


def machine(**kw: object) -> ChatToResponsesStream:
    return ChatToResponsesStream({"model": "m", "stream": True}, ids=SequentialIds(), now=lambda: 1, **kw)  # type: ignore[arg-type]


TERMINALS = ("response.completed", "response.incomplete", "response.failed")


def check(out: list[dict]) -> list[dict]:
    """A finished stream: valid for the strict validator (as events and as the SSE bytes the
    proxy writes), with exactly one terminal event, the last one."""
    validate_responses_events(out)
    body = b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in out)
    assert validate_responses_sse(body) == out
    assert [e["type"] for e in out if e["type"] in TERMINALS] == [out[-1]["type"]]
    return out


def run(chunks: list[dict], clean: bool = True, **kw: object) -> list[dict]:
    """Feed the chunks as dicts (``feed``), and again as the JSON bytes the relay hands to
    ``feed_frame`` (typed decoding, chunk_frames.py): both paths must give the same events. A
    wire-mode machine (delta events as finished frames), fed the bytes as the proxy feeds them,
    must render the same SSE body."""
    out = _run(chunks, clean, ChatToResponsesStream.feed, **kw)
    assert _run(chunks, clean, _feed_bytes, **kw) == out
    assert render_responses(_run(chunks, clean, _feed_bytes, wire=True, **kw)) == render_responses(out)
    return check(out)


def _feed_bytes(m: ChatToResponsesStream, chunk: dict) -> list[dict]:
    data = orjson.dumps(chunk)
    out = m.feed_frame(data)
    return out if out is not None else m.feed(orjson.loads(data))


def _run(chunks: list[dict], clean: bool, feed: object, **kw: object) -> list[dict]:
    m = machine(**kw)
    out = m.start()
    for c in chunks:
        out += feed(m, c)  # type: ignore[operator]
        if m.done:  # an error chunk (or a terminal state) ends the stream early
            return out
    out += m.finish(clean=clean)
    return out


def types(out: list[dict]) -> list[str]:
    return [e["type"] for e in out]


def test_empty_first_content_opens_nothing() -> None:
    out = run(
        [
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ]
                },
                "tool_calls",
            ),
        ]
    )
    assert [e["item"]["type"] for e in out if e["type"] == "response.output_item.added"] == ["function_call"]


def test_usage_waits_for_trailing_chunk() -> None:
    out = run(
        [
            chat_chunk({"content": "x"}, "stop"),
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
        ]
    )
    usage = out[-1]["response"]["usage"]
    assert usage["input_tokens"] == 3 and usage["output_tokens"] == 4 and usage["total_tokens"] == 7
    assert usage["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


@pytest.mark.parametrize(
    ("reason", "terminal", "detail"),
    [
        ("stop", "response.completed", None),
        ("tool_calls", "response.completed", None),
        (None, "response.completed", None),
        ("length", "response.incomplete", "max_output_tokens"),
        ("model_length", "response.incomplete", "max_output_tokens"),  # Mistral: the context length reached
        ("content_filter", "response.incomplete", "content_filter"),
        ("weird_reason", "response.completed", None),
        ("insufficient_system_resource", "response.failed", "insufficient_system_resource"),
        ("error", "response.failed", "upstream_error"),
        ("abort", "response.failed", "upstream_aborted"),
    ],
)
def test_finish_reasons(reason: str | None, terminal: str, detail: str | None) -> None:
    """``detail``: the incomplete reason, or the error code of a failed response."""
    out = run([chat_chunk({"content": "x"}, reason)])
    resp = out[-1]["response"]
    assert out[-1]["type"] == terminal
    if terminal == "response.failed":
        assert resp["error"]["code"] == detail and resp["incomplete_details"] is None
        assert out[-2]["type"] == "error" and out[-2]["code"] == detail
    else:
        assert (resp["incomplete_details"] or {}).get("reason") == detail
    if detail:  # a cut or failed answer is never reported as a complete message
        assert resp["output"][0]["status"] == "incomplete"
    else:
        assert resp["output"][0]["status"] == "completed"
    m = machine()
    m.start()
    m.feed(chat_chunk({"content": "x"}, reason))
    m.finish()
    assert ("unknown_finish_reason" in m.diagnostics) == (reason == "weird_reason")


def test_reasoning_spellings_not_doubled() -> None:
    out = run(
        [
            chat_chunk({"reasoning": "ab", "reasoning_details": [{"type": "reasoning.text", "text": "ab"}]}),
            chat_chunk({"reasoning_content": "cd", "reasoning_details": [{"type": "reasoning.text", "text": "cd"}]}),
            chat_chunk(
                {
                    "reasoning_details": [
                        {"type": "reasoning.summary", "summary": "ef"},
                        {"type": "reasoning.encrypted", "data": "zzz"},
                    ]
                }
            ),
            chat_chunk({"content": "done"}, "stop"),
        ]
    )
    items = out[-1]["response"]["output"]
    assert items[0]["content"][0]["text"] == "abcdef"


def test_reasoning_closed_before_next_item() -> None:
    out = run([chat_chunk({"reasoning_content": "r"}), chat_chunk({"content": "t"}, "stop")])
    t = types(out)
    assert (
        t.index("response.reasoning_text.done")
        < t.index("response.output_item.done")
        < t.index("response.output_text.delta")
    )


def test_refusal_and_text_parts() -> None:
    out = run([chat_chunk({"content": "a"}), chat_chunk({"refusal": "no"}), chat_chunk({}, "stop")])
    content = out[-1]["response"]["output"][0]["content"]
    assert content == [
        {"type": "output_text", "text": "a", "annotations": [], "logprobs": []},
        {"type": "refusal", "refusal": "no"},
    ]


def test_generated_call_id_when_missing() -> None:
    out = run([chat_chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}, "tool_calls")])
    assert out[-1]["response"]["output"][0]["call_id"].startswith("call_")


def test_object_arguments_are_serialised() -> None:
    out = run(
        [
            chat_chunk(
                {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]},
                "tool_calls",
            )
        ]
    )
    assert out[-1]["response"]["output"][0]["arguments"] == '{"a": 1}'


def test_legacy_function_call_delta() -> None:
    out = run(
        [
            chat_chunk({"function_call": {"name": "f", "arguments": '{"a"'}}),
            chat_chunk({"function_call": {"arguments": ":1}"}}, "function_call"),
        ]
    )
    item = out[-1]["response"]["output"][0]
    assert (item["name"], item["arguments"]) == ("f", '{"a":1}')


def test_legacy_function_call_beside_tool_calls_is_one_call() -> None:
    """llama-cpp-python sends every fragment twice in one delta: in ``tool_calls`` and in the
    legacy ``function_call``. One call, its arguments once."""

    def both(args: str, first: bool = False) -> dict:
        head = {"id": "call_1", "type": "function"} if first else {}
        return {
            "function_call": {"name": "get_weather", "arguments": args},
            "tool_calls": [{"index": 0, **head, "function": {"name": "get_weather", "arguments": args}}],
        }

    out = run(
        [
            chat_chunk(both("{", first=True)),
            chat_chunk(both('"city": "Paris"')),
            chat_chunk(both("}")),
            chat_chunk({}, "tool_calls"),
        ]
    )
    calls = [i for i in out[-1]["response"]["output"] if i["type"] == "function_call"]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [
        ("call_1", "get_weather", '{"city": "Paris"}')
    ]
    assert types(out).count("response.output_item.added") == 1


def test_upstream_error_chunk_fails_with_its_message() -> None:
    m = machine()
    out = (
        m.start() + m.feed(chat_chunk({"content": "x"})) + m.feed({"error": {"message": "boom", "code": "overloaded"}})
    )
    check(out)
    assert out[-2]["type"] == "error" and out[-2]["error"]["message"] == "boom"
    assert out[-1]["response"]["error"] == {"code": "overloaded", "message": "boom"}
    assert m.phase is Phase.FAILED


def test_error_chunk_ends_the_run_early_with_a_valid_failed_stream() -> None:
    """run() returns as soon as the machine is done; that stream is validated too."""
    out = run(
        [
            chat_chunk({"content": "x"}),
            {"error": {"message": "boom", "code": "overloaded"}},
            chat_chunk({"content": "late"}),
        ]
    )
    assert types(out)[-2:] == ["error", "response.failed"]
    assert out[-1]["response"]["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("reason", [["stop"], 1, {"type": "stop"}], ids=["list", "number", "object"])
def test_finish_reason_not_text_fails_the_stream(reason: object) -> None:
    """A finish_reason the upstream sent as something else than a string is a protocol error,
    reported when it arrives (an unhashable one once broke ``finish`` with a TypeError)."""
    out = run([chat_chunk({"content": "a"}), chat_chunk({}, reason), chat_chunk({"content": "late"})])  # type: ignore[arg-type]
    assert types(out)[-2:] == ["error", "response.failed"]
    assert out[-1]["response"]["error"] == {
        "code": "upstream_protocol_error",
        "message": "the upstream sent a finish_reason that is not text",
    }
    assert "late" not in [e.get("delta") for e in out]


@pytest.mark.parametrize(
    "last",
    [
        chat_chunk({"content": "x"}),
        chat_chunk({"reasoning_content": "r"}),
        chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{"}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "g", "arguments": "{"}}]}),
    ],
    ids=["text", "reasoning", "function", "custom"],
)
def test_unclean_end_is_a_valid_failed_stream(last: dict) -> None:
    out = run([chat_chunk({"content": "a"}), last], clean=False, tools=ToolContext(custom_tools=frozenset({"g"})))
    assert types(out)[-2:] == ["error", "response.failed"]
    statuses = [item.get("status") for item in out[-1]["response"]["output"]]
    assert statuses[-1] in ("incomplete", None)  # the cut item (reasoning carries no status)


def test_calls_after_terminal_are_our_bug() -> None:
    m = machine()
    check(m.start() + m.finish())
    with pytest.raises(StreamStateError):
        m.feed(chat_chunk({"content": "x"}))
    with pytest.raises(StreamStateError):
        m.finish()
    with pytest.raises(StreamStateError):
        m.fail("x", "y")


def test_fail_before_start_still_well_formed() -> None:
    m = machine()
    out = m.fail("upstream_idle_timeout", "silence")
    check(out)
    assert out[-1]["type"] == "response.failed"


def test_extra_choices_counted_not_mixed() -> None:
    m = machine()
    out = m.start() + m.feed(
        {"choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]}
    )
    out += m.finish()
    check(out)
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == "a"
    assert m.diagnostics == {"extra_choice_ignored": 1, "usage_not_reported": 1}


def test_namespace_call_carries_namespace() -> None:
    tools = ToolContext(namespaced={"ns__read": ("ns", "read")})
    out = run(
        [chat_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "ns__read", "arguments": "{}"}}]})],
        tools=tools,
    )
    item = out[-1]["response"]["output"][0]
    assert (item["name"], item["namespace"]) == ("read", "ns")


# -- property: random chat streams, any split, always one valid terminal --------------------

delta_st = st.one_of(
    st.fixed_dictionaries({"content": st.text(max_size=5)}),
    st.fixed_dictionaries({"reasoning_content": st.text(max_size=5)}),
    st.fixed_dictionaries({"refusal": st.text(min_size=1, max_size=3)}),
    st.fixed_dictionaries(
        {
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "index": st.integers(0, 2),
                        "id": st.sampled_from([None, "c1", "c2"]),
                        "function": st.fixed_dictionaries(
                            {"name": st.sampled_from(["f", "g", ""]), "arguments": st.text(max_size=4)}
                        ),
                    }
                ),
                max_size=2,
            )
        }
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(delta_st, max_size=12),
    st.sampled_from([None, "stop", "length", "tool_calls", "content_filter"]),
    st.booleans(),
    st.integers(0, 1000),
)
def test_random_streams_always_valid(deltas: list[dict], finish: str | None, clean: bool, seed: int) -> None:
    from tests.support.splitting import split_points

    body = b"".join(b"data: " + orjson.dumps(chat_chunk(d)) + b"\n\n" for d in deltas)
    body += b"data: " + orjson.dumps(chat_chunk({}, finish)) + b"\n\n"
    if clean:
        body += b"data: [DONE]\n\n"
    results = []
    for pieces in ([body], split_points(body, seed, 7)):
        m = machine(tools=ToolContext(custom_tools=frozenset({"g"})))
        pump = Pump(m)
        out = m.start()
        for p in pieces:
            out += pump.feed(p)
        out += pump.finish()
        check(out)
        results.append(out)
    assert results[0] == results[1]


def _sealed_run(capture: str) -> tuple[list[dict], list[tuple[str, list | None]]]:
    sealed: list[tuple[str, list | None]] = []

    def seal(text: str, details: list | None) -> str:
        sealed.append((text, details))
        return f"token:{len(text)}:{len(details or ())}"

    chunks = [c for c in data_objects(read_capture(capture)) if isinstance(c, dict)]
    out = run(chunks, seal_reasoning=seal)
    return out, sealed[: len(sealed) // 3]  # run() drives three machines: the first one's seals


def _capture_details(capture: str) -> list[dict]:
    return [
        d
        for c in data_objects(read_capture(capture))
        if isinstance(c, dict)
        for ch_ in c.get("choices") or ()
        for d in (ch_.get("delta") or {}).get("reasoning_details") or ()
    ]


def test_thought_signature_alone_gets_a_reasoning_item_before_the_calls() -> None:
    """Gemini 3 via OpenRouter: the signature comes with the first tool call and no reasoning
    text. With sealing, it gets an empty reasoning item ahead of the calls, sealed verbatim."""
    capture = "chat/openrouter-gemini31-reasoning-details-parallel-tools.sse"
    out, sealed = _sealed_run(capture)
    output = out[-1]["response"]["output"]
    assert [i["type"] for i in output] == ["reasoning", "function_call", "function_call"]
    assert output[0]["content"] == [] and output[0]["encrypted_content"] == "token:0:1"
    assert sealed == [("", _capture_details(capture))] and sealed[0][1]


def test_streamed_signed_thinking_is_sealed_whole() -> None:
    """Claude via OpenRouter: reasoning.text fragments of one index, the signature last."""
    capture = "chat/openrouter-claude-reasoning-details.sse"
    out, sealed = _sealed_run(capture)
    raw = _capture_details(capture)
    text = "".join(d.get("text") or "" for d in raw)
    signature = [d["signature"] for d in raw if d.get("signature")][-1]
    ((sealed_text, details),) = sealed
    assert sealed_text == text == out[-1]["response"]["output"][0]["content"][0]["text"]
    assert details == [
        {"type": "reasoning.text", "text": text, "signature": signature, "format": "anthropic-claude-v1", "index": 0}
    ]


def test_details_without_sealing_add_nothing() -> None:
    capture = "chat/openrouter-gemini31-reasoning-details-parallel-tools.sse"
    out = run([c for c in data_objects(read_capture(capture)) if isinstance(c, dict)])
    assert [i["type"] for i in out[-1]["response"]["output"]] == ["function_call", "function_call"]


def test_details_left_after_the_text_get_a_reasoning_item_at_the_end() -> None:
    seals: list = []
    out = run(
        [
            chat_chunk({"content": "Hi"}),
            chat_chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "z"}]}),
            chat_chunk({}, "stop"),
        ],
        seal_reasoning=lambda text, details: seals.append(details) or "t",
    )
    output = out[-1]["response"]["output"]
    assert [i["type"] for i in output] == ["message", "reasoning"] and output[1]["encrypted_content"] == "t"
    assert seals[0] == [{"type": "reasoning.encrypted", "data": "z"}]


def test_steer_ends_the_streaming_text_incomplete_with_reason_steered() -> None:
    m = machine()
    out = m.start()
    assert m.steerable  # before any output too
    out += m.feed(chat_chunk({"role": "assistant", "content": ""}))
    out += m.feed(chat_chunk({"reasoning_content": "Hmm."}))
    out += m.feed(chat_chunk({"content": "Once "}))
    out += m.feed(chat_chunk({"content": "upon"}))
    assert m.steerable
    steered = m.steer()
    out += steered
    check(out)
    assert [e["type"] for e in steered] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    final = steered[-1]["response"]
    assert final["incomplete_details"] == {"reason": "steered"} and final["status"] == "incomplete"
    assert [(i["type"], i["status"]) for i in final["output"]] == [
        ("reasoning", "completed"),
        ("message", "incomplete"),
    ]
    assert final["output"][1]["content"][0]["text"] == "Once upon"
    assert final["usage"]["output_tokens"] == 0  # none reported yet
    assert m.diagnostics == {}  # no finish_reason, no usage: not an anomaly of the backend


def test_steer_never_ends_a_call_nor_an_answer_the_backend_finished() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a'}}
    m = machine()
    m.start()
    m.feed(chat_chunk({"content": "Let me look."}))
    m.feed(chat_chunk({"tool_calls": [call]}))
    assert not m.steerable
    with pytest.raises(StreamStateError):
        m.steer()
    done = machine()
    done.start()
    done.feed(chat_chunk({"content": "All said."}, "stop"))
    assert not done.steerable
    assert not Pump(done).steerable and not Pump(machine()).steerable  # nor before start()


def test_steer_waits_while_a_call_written_as_markup_is_read() -> None:
    m = machine(profile=BackendProfile(tool_markup="hermes"))
    m.start()
    m.feed(chat_chunk({"content": "Checking. "}))
    assert m.steerable
    m.feed(chat_chunk({"content": '<tool_call>{"name": "f", "argu'}))
    assert not m.steerable
