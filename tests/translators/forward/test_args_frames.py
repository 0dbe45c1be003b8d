"""The forward machine's argument-frame templates (args_frames.py): a frame that is the frame
before it but for a tool call's argument fragment is read with a slice instead of a decode. For
any stream the events, the final Response and the diagnostics must be what the decode of every
frame gives (and plain JSON into ``feed``), and the template must really be used."""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crossfeed.translators.forward.machine as c2r
from crossfeed.translators.forward.args_frames import args_frame, args_text
from crossfeed.translators.forward.chunk_frames import LEARN_TRIES
from tests.support.chunk_paths import assert_as_decoded as as_decoded
from tests.support.chunk_paths import fed
from tests.support.read_runs import calls_to

HEAD = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'


def call_frame(
    args: bytes,
    *,
    index: int = 0,
    call_id: str | None = None,
    name: str | None = None,
    nonce: bytes = b"",
    reason: str | None = None,
) -> bytes:
    """A chunk of one tool call's fragment written by hand: ``args`` its JSON string's bytes as
    given (escaped already, or bytes no encoder would write)."""
    call = b'{"index":%d,' % index
    if call_id is not None:
        call += b'"id":"' + call_id.encode() + b'","type":"function",'
    call += b'"function":{' + (b'"name":"' + name.encode() + b'",' if name else b"") + b'"arguments":"' + args + b'"}}'
    tail = b'"logprobs":null,"finish_reason":' + (orjson.dumps(reason) if reason else b"null") + b"}]"
    nonce_field = b',"obfuscation":"' + nonce + b'"' if nonce else b""
    return HEAD + b'"delta":{"tool_calls":[' + call + b"]}," + tail + nonce_field + b"}\n\n"


def opening(index: int = 0, call_id: str = "call_1", name: str = "lookup") -> bytes:
    return call_frame(b"", index=index, call_id=call_id, name=name)


def assert_as_decoded(frames: list[bytes], cuts: Sequence[int] = ()) -> None:
    """As the decode of every frame reads them, and as plain JSON into ``feed`` does."""
    as_decoded(frames, cuts, plain=True)


def decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    return calls_to(monkeypatch, c2r, "decode_chunk")


JSON_PIECES = [b'{\\"', b"query", b'\\":\\"', b"caf\xc3\xa9 \xf0\x9f\x98\x80", b" ", b'\\"}']


def test_a_call_is_decoded_a_few_times_and_read_from_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fragments of JSON punctuation (escaped quotes), words and UTF-8 follow the template once
    learned: the opening frame and the first fragment are decoded, the 40 after them are not."""
    frames = [opening()] + [call_frame(JSON_PIECES[i % len(JSON_PIECES)]) for i in range(42)]
    assert_as_decoded(frames)
    seen = decodes(monkeypatch)
    final = fed(frames, wire=True)[1]
    assert len(seen) == 2
    call = final["output"][0]
    assert call["type"] == "function_call" and call["name"] == "lookup"
    assert call["arguments"] == "".join(orjson.loads(b'"' + JSON_PIECES[i % 6] + b'"') for i in range(42))


@pytest.mark.parametrize(
    "piece",
    [b"\\\\", b"a\\nb", b"\\u00e9", b"\\/", b"tab\\t", b'x\\\\\\"y', b"\\ud83d\\ude00"],
    ids=["backslash", "newline", "unicode-escape", "solidus", "tab", "backslash-quote", "surrogate-pair"],
)
def test_escaped_fragments_are_read_from_their_bytes(piece: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any escape JSON has, the way the backend wrote it (a solidus or é escaped where orjson
    would not): the fragment's text is its JSON string's, without a decode of the frame."""
    frames = [opening(), call_frame(b"{"), call_frame(b"a"), call_frame(piece), call_frame(b"b"), call_frame(b"}")]
    assert_as_decoded(frames)
    seen = decodes(monkeypatch)
    fed(frames, wire=True)
    assert len(seen) == 2  # the opening and the first fragment (learned)


def test_a_patch_s_fragments_with_newlines_are_read_from_their_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """apply_patch as Codex streams it, a custom tool whose input is one JSON string of lines."""
    patch = r'{"input":"*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"}'
    pieces = [orjson.dumps(patch[i : i + 7])[1:-1] for i in range(0, len(patch), 7)]
    frames = [opening(0, "c", "apply_patch")] + [call_frame(p) for p in pieces]
    assert_as_decoded(frames)
    seen = decodes(monkeypatch)
    final = fed(frames, wire=True)[1]
    assert len(seen) == 2
    assert final["output"][0]["input"] == orjson.loads(patch)["input"]


def test_a_reused_index_with_a_new_id_is_a_new_call() -> None:
    """Frames that carry their call id: the template carries it too; the index reused by a call
    of another id is another head, decoded, a new call, as the decode makes it."""
    frames = [opening(0, "a", "f")]
    frames += [call_frame(b"x%d" % i, call_id="a") for i in range(5)]
    frames += [opening(0, "b", "g")] + [call_frame(b"y%d" % i, call_id="b") for i in range(5)]
    assert_as_decoded(frames)
    calls = fed(frames, wire=False)[1]["output"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("f", "x0x1x2x3x4"), ("g", "y0y1y2y3y4")]


def test_a_duplicate_id_repeated_in_every_frame_is_read_as_the_decode_reads_it() -> None:
    """Two calls of one id: the second gets an id of its own, and its fragments, which repeat
    the upstream's id, each open a call of their own in the decode; the template must not
    append them instead."""
    frames = [opening(0, "dup", "f"), call_frame(b"1", call_id="dup"), opening(1, "dup", "g")]
    frames += [call_frame(b"%d" % i, index=1, call_id="dup") for i in range(4)]
    assert_as_decoded(frames)


def test_interleaved_parallel_calls_and_names_in_every_frame() -> None:
    frames = [opening(0, "a", "f"), opening(1, "b", "g")]
    for i in range(12):
        frames.append(call_frame(b"p%d" % i, index=i % 2, name="f" if i % 2 == 0 else "g"))
    assert_as_decoded(frames, cuts=[700, 1900])


def test_a_nonce_per_frame_stops_the_learning(monkeypatch: pytest.MonkeyPatch) -> None:
    frames = [opening()] + [call_frame(b"x", nonce=b"%d" % i) for i in range(30)]
    assert_as_decoded(frames)
    learned = calls_to(monkeypatch, c2r.ChatToResponsesStream, "_learn_args")
    fed(frames, wire=True)
    assert len(learned) == LEARN_TRIES  # each try a template that never matches again


def test_a_custom_tool_and_the_finish_reason() -> None:
    """apply_patch (a custom tool: its input unwrapped from the JSON string) through the
    template, and a last fragment carrying the finish_reason (decoded)."""
    frames = [opening(0, "c", "apply_patch"), call_frame(b'{\\"input\\":\\"')]
    frames += [call_frame(b"line %d" % i) for i in range(6)]
    frames += [call_frame(b'\\"}', reason="tool_calls")]
    assert_as_decoded(frames)
    final = fed(frames, wire=True)[1]
    assert final["output"][0]["type"] == "custom_tool_call"
    assert final["output"][0]["input"] == "".join(f"line {i}" for i in range(6))


def test_a_broken_fragment_with_the_template_around_it_is_decoded() -> None:
    """A bare quote, a control character, bytes that are not UTF-8 between the template's head
    and tail: not the template's (the decode judges the frame)."""
    for bad in (b'a"b', b"a\x01b", b"a\xffb", b'a","name":"x'):
        frames = [opening(), call_frame(b"ok"), call_frame(bad), call_frame(b"more")]
        with mock.patch.object(c2r, "LEARN_TRIES", 0):
            decoded = fed(frames, wire=False)
        assert fed(frames, wire=False) == decoded


def test_args_text_is_the_json_string_s_text_or_none() -> None:
    assert args_text(b"plain") == "plain"
    assert args_text(b'{\\"q\\":\\"caf\xc3\xa9\\"}') == '{"q":"café"}'
    assert args_text(b"a\\\\b\\n\\u0041\\/") == "a\\b\nA/"
    for bad in (b'a"b', b'a\\"b"', b"a\x1fb", b"\xc3", b"ends\\", b"\\ud800", b"\\x41", b"a\\nb\x01"):
        assert args_text(bad) is None


def test_args_frame_finds_the_fragment_or_declines() -> None:
    data = call_frame(b'{\\"q\\"')[6:-2]
    tc = orjson.loads(data)["choices"][0]["delta"]["tool_calls"][0]
    frame = args_frame(data, tc)
    assert frame is not None
    head, start, tail, end, index, call_id = frame
    assert head + b'{\\"q\\"' + tail == data and (index, call_id) == (0, None)
    assert data[start:end] == b'{\\"q\\"'
    # a fragment JSON writes otherwise (é escaped), an index that is not an integer, an extra field
    assert args_frame(call_frame(b"caf\\u00e9")[6:-2], {"index": 0, "function": {"arguments": "café"}}) is None
    assert args_frame(data, {**tc, "index": "0"}) is None
    assert args_frame(data, {**tc, "extra": 1}) is None
    assert args_frame(data, {**tc, "function": {"arguments": "other"}}) is None
    # the key twice: which one is the fragment's is not for a template to guess
    twice = data.replace(b'"model":"m"', b'"model":{"arguments":"{\\"q\\""}')
    assert twice.count(b'"arguments"') == 2 and orjson.loads(twice)
    assert args_frame(twice, tc) is None


_piece = st.sampled_from(
    [
        b"\\ud800",
        b"\\ud83d\\ude00",
        b"a",
        b"Zz",
        b'{\\"',
        b'\\":',
        b'\\"}',
        b" ",
        b"\xc3\xa9",
        b"\\n",
        b"\\\\",
        b"\\u00e9",
        b"1",
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.lists(_piece, min_size=1, max_size=3).map(b"".join),
            st.sampled_from([0, 0, 0, 1]),
            st.sampled_from([None, None, "a", "b"]),
            st.sampled_from([b"", b"", b"", b"n1"]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.integers(0, 4000), max_size=3),
)
def test_any_call_frames_same_events_as_the_decode(
    fragments: list[tuple[bytes, int, str | None, bytes]], cuts: list[int]
) -> None:
    frames = [opening(0, "a", "f"), opening(1, "b", "g")]
    frames += [call_frame(args, index=i, call_id=cid, nonce=n) for args, i, cid, n in fragments]
    assert_as_decoded(frames, cuts)
