"""The forward machine's typed frame path (``feed_frame``, chunk_frames.py) against plain JSON
into ``feed``: for any chunk, of any shape, both must produce the same events, the same final
Response and the same diagnostics. Golden cases and the machine's unit tests compare the two
paths on real and hand-made streams; this file adds random shapes and the decode failures.
Every comparison also runs the machine in wire mode (delta events as finished frames): its SSE
body must be byte for byte the body rendered from the dict events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossfeed.translators.forward.chunk_frames import Chunk, as_dict, decode_chunk
from crossfeed.translators.sse import render_responses
from tests.support.chunk_paths import assert_same, machine, sse, translate

# -- random chunks ------------------------------------------------------------------------------

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.just(""), st.text(max_size=4))
_any = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["type", "text", "index", "id", "x"]), inner, max_size=3)
    ),
    max_leaves=6,
)
_texty = st.one_of(
    st.none(), st.just(""), st.text(min_size=1, max_size=6), st.sampled_from(["<think>", "</think>", " "]), _any
)
_function = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["f", "apply_patch", ""]), _any),
        "arguments": st.one_of(st.sampled_from(['{"a":', "1}", "", '"x']), _any),
    },
)
_tool_call = st.fixed_dictionaries(
    {},
    optional={
        "index": st.one_of(st.integers(0, 2), st.none(), _any),
        "id": st.one_of(st.sampled_from(["call_a", "call_b", ""]), _any),
        "type": st.sampled_from(["function", "custom"]),
        "function": st.one_of(_function, _any),
    },
)
_delta = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": st.one_of(
            _texty,
            st.lists(
                st.fixed_dictionaries({"type": st.sampled_from(["text", "thinking"]), "text": st.text(max_size=4)}),
                max_size=2,
            ),
        ),
        "reasoning_content": _texty,
        "reasoning": _texty,
        "reasoning_details": st.one_of(
            st.lists(
                st.fixed_dictionaries({"type": st.just("reasoning.text"), "text": st.text(max_size=4)}), max_size=2
            ),
            _any,
        ),
        "refusal": _texty,
        "annotations": _any,
        "tool_calls": st.one_of(st.lists(_tool_call, max_size=2), _any),
        "function_call": st.one_of(_function, _any),
        "unknown": _any,
    },
)
_logprobs = st.one_of(
    st.none(), _any, st.just({"content": [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]})
)
_choice = st.fixed_dictionaries(
    {},
    optional={
        "index": st.one_of(st.just(0), st.integers(0, 2), st.none(), _any),
        "delta": st.one_of(_delta, _any),
        "finish_reason": st.one_of(
            st.none(), st.sampled_from(["stop", "length", "tool_calls", "content_filter", "odd"]), _any
        ),
        "logprobs": _logprobs,
        "stop_reason": _any,
    },
)
_chunk = st.fixed_dictionaries(
    {"id": st.just("chatcmpl-1"), "object": st.just("chat.completion.chunk")},
    optional={
        "choices": st.one_of(st.lists(_choice, max_size=2), _any),
        "usage": st.one_of(
            st.fixed_dictionaries({"prompt_tokens": st.integers(0, 9), "completion_tokens": st.integers(0, 9)}), _any
        ),
        "error": st.one_of(st.fixed_dictionaries({"message": st.text(max_size=4)}), _any),
        "x_groq": _any,
    },
)
# Mostly one choice with a small delta: the shapes the typed path handles itself.
_common = st.builds(
    lambda d, f: {"choices": [{"index": 0, "delta": d, "finish_reason": f}]},
    st.fixed_dictionaries(
        {}, optional={"content": _texty, "reasoning_content": _texty, "tool_calls": st.lists(_tool_call, max_size=2)}
    ),
    st.sampled_from([None, None, "stop", "tool_calls", "length"]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(_common, _common, _chunk, _any), min_size=1, max_size=8),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_any_chunks_same_events_both_ways(chunks: list[Any], think_tags: bool, whole: bool, clean: bool) -> None:
    assert_same([sse(c) for c in chunks], think_tags=think_tags, whole=whole, clean=clean)


def _one(delta: dict, **choice: Any) -> dict:
    return {"choices": [{"index": 0, "delta": delta, **choice}]}


_CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    "chunks",
    [
        [_one({"reasoning_content": "r", "tool_calls": [_CALL]})],
        [_one({"content": "t", "reasoning": "r"})],
        [_one({"content": "t", "tool_calls": [_CALL]})],
        [_one({"content": "", "reasoning_content": "", "reasoning": "r"})],
        [_one({"reasoning_content": ["not text"], "content": "t"})],
        [
            _one(
                {"content": "t"},
                logprobs={"content": [{"token": "t", "logprob": -1.0, "bytes": [116], "top_logprobs": []}]},
            )
        ],
        [_one({"content": "a"}), {"choices": [{"index": 1, "delta": {"content": "b"}}]}],
        [_one({"content": "a", "refusal": "no"})],
        [_one({"tool_calls": {"index": 0}})],
        [_one({"content": "a"}, finish_reason="length"), {"choices": [], "error": {"message": "late"}}],
        [_one({"content": "a"}), {"x_groq": {"usage": {"prompt_tokens": 1, "completion_tokens": 2}}}],
    ],
    ids=[
        "reasoning+calls",
        "text+reasoning",
        "text+calls",
        "empty-spellings",
        "odd-reasoning",
        "logprobs",
        "second-choice",
        "text+refusal",
        "calls-not-a-list",
        "error-after-finish",
        "groq-usage",
    ],
)
def test_mixed_shapes_same_events_both_ways(chunks: list[dict]) -> None:
    for think_tags in (False, True):
        assert_same([sse(c) for c in chunks], think_tags=think_tags)


# -- what each path sees ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'"text"',
        b"null",
        b'{"choices": {"index": 0}}',
        b'{"choices": [3]}',
        b'{"choices": [{"delta": "text"}]}',
        b'{"choices": [{"delta": ["x"]}]}',
        b'{"choices": [' * 2000,
        b'{"choices": [{"delta": {"content": "caf\xc3\x28"}}]}',
        b'{"choices": []} trailing',
    ],
)
def test_frames_of_the_wrong_shape_go_to_the_json_path(data: bytes) -> None:
    """``feed_frame`` declines these (None): the pump parses them as JSON and ``feed`` reports
    the problem, the same way with the typed path on or off."""
    m = machine()
    m.start()
    assert m.feed_frame(data) is None
    assert not m.done
    out = assert_same([b"data: " + data + b"\n\n"])
    assert out[-1]["type"] == "response.failed"
    assert out[-1]["response"]["error"]["code"] == "upstream_protocol_error"


@pytest.mark.parametrize("wide", [b"18446744073709551616", b"-9223372036854775809"])
@pytest.mark.parametrize(
    "template",
    [
        b'{"choices":[{"index":%s,"delta":{"content":"Hi"}}]}',
        b'{"choices":[{"index":0,"delta":{"content":%s}}]}',
        b'{"choices":[{"index":0,"delta":{"reasoning_content":%s}}]}',
        b'{"choices":[{"index":0,"delta":{},"finish_reason":%s}]}',
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%s,"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}',
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":%s}}]}}]}',
        b'{"choices":[],"usage":{"prompt_tokens":%s,"completion_tokens":1,"total_tokens":2}}',
        b'{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%s,"total_tokens":2}}',
        b'{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%s}}}',
        b'{"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-1,"bytes":[%s],"top_logprobs":[]}]}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"Hi","annotations":[{"type":"url_citation","url_citation":{"url":"u","title":"t","start_index":%s,"end_index":1}}]}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"Hi"}}],"error":{"message":"m","code":%s}}',
    ],
)
def test_integers_past_64_bits_same_both_ways(template: bytes, wide: bytes) -> None:
    """An integer orjson parses as a float (past 64 bits) where the machine reads: in an index,
    a text, a finish reason, a tool call, the usage, logprobs, an annotation, an error. The
    typed decode keeps it an int; the frame goes the plain way, so both give the same events
    (before, a logprob's bytes or an annotation's index past 64 bits failed to render). The
    events are not validated: a float where a logprob's bytes are ints is what the upstream sent."""
    first = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    last = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    frames = [first, b"data: " + template % wide + b"\n\n", last]
    plain = translate(frames, typed=False)
    assert translate(frames, typed=True) == plain
    wire = translate(frames, typed=True, wire=True)
    assert render_responses(wire[0]) == render_responses(plain[0])
    assert wire[1:] == plain[1:]


@pytest.mark.parametrize(
    "chunk",
    [
        {  # logprobs with their alternatives: the deepest value a chunk carries (6 levels)
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "Hi"},
                    "logprobs": {
                        "content": [
                            {
                                "token": "Hi",
                                "logprob": -0.1,
                                "bytes": [72, 105],
                                "top_logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}],
                            }
                        ],
                        "refusal": None,
                    },
                }
            ]
        },
        {  # Mistral's thinking parts
            "choices": [
                {"index": 0, "delta": {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"reasoning_details": [{"type": "reasoning.text", "text": "hm", "index": 0}]}}
            ]
        },
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 3,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 1},
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        },
        {"choices": [], "x_groq": {"id": "x", "usage": {"queue_time": 0.1, "prompt_tokens": 3}}},
    ],
)
def test_nested_values_take_the_typed_path(chunk: dict[str, Any]) -> None:
    """The values a real chunk nests (bounded_json.py bounds the depth the typed decode takes)
    are decoded typed, not sent the plain way."""
    m = machine()
    m.start()
    m.feed(orjson.loads(sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})[6:]))
    assert m.feed_frame(orjson.dumps(chunk)) is not None
    assert_same([sse(chunk), sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})])


def test_fields_nobody_reads_are_not_decoded() -> None:
    """Garbage in a field the machine never reads no longer fails the stream: the typed decode
    skips it (plain JSON rejected the whole frame over a byte in ``id``)."""
    frame = b'{"id": "c\xff", "model": {"nested": [1, 2]}, "choices": [{"index": 0, "delta": {"content": "hi"}}]}'
    m = machine()
    out = m.start() + m.feed_frame(frame)  # type: ignore[operator]
    assert [e["type"] for e in out][-1] == "response.output_text.delta"
    assert out[-1]["delta"] == "hi"


def test_hot_shapes_do_not_build_dicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text, reasoning and tool-call fragments, a bare finish_reason and a usage chunk are handled
    on the structs; only other chunks are turned into dicts for ``feed``."""
    import crossfeed.translators.forward.machine as c2r

    calls: list[Chunk] = []
    monkeypatch.setattr(c2r, "as_dict", lambda chunk: calls.append(chunk) or as_dict(chunk))
    hot = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "think"}}]},
        {"choices": [{"index": 0, "delta": {"content": "hi", "reasoning_content": None}, "logprobs": None}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{"},
                            }
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}},  # include_usage's last chunk
    ]
    cold = [{"choices": [], "x_groq": {"usage": {"prompt_tokens": 3, "completion_tokens": 6}}}]
    out = assert_same([sse(c) for c in hot + cold])
    assert len(calls) == 2 * len(cold)  # the typed runs (dicts, wire); the plain one parses JSON itself
    assert [e["type"] for e in out if e["type"].endswith(".done")] == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    assert out[-1]["response"]["usage"]["output_tokens"] == 6  # the last usage read (Groq's, in x_groq)


def test_decoded_chunk_keeps_only_what_feed_reads() -> None:
    chunk = decode_chunk(
        b'{"id": "x", "choices": [{"index": 0, "delta": {"content": "a", "role": "assistant"},'
        b' "finish_reason": null, "stop_reason": 7}], "usage": null, "x_groq": {"id": "q"}}'
    )
    assert as_dict(chunk) == {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "content": "a",
                    "reasoning_content": None,
                    "reasoning": None,
                    "reasoning_details": None,
                    "refusal": None,
                    "annotations": None,
                    "tool_calls": None,
                    "function_call": None,
                },
                "finish_reason": None,
                "logprobs": None,
            }
        ],
        "usage": None,
        "error": None,
        "x_groq": {"id": "q"},
    }
