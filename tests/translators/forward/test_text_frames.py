"""The forward machine's text-frame templates (chunk_frames.py ``text_frame``): a frame that is
the frame before it but for the delta's text is read with a slice instead of a decode. For any
stream, the events, the final Response and the diagnostics must be what plain JSON into ``feed``
gives (``assert_same``, test_chunk_frames.py), and the template must really be used."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crossfeed.translators.forward.frame_runs as runs_mod
import crossfeed.translators.forward.machine as c2r
import crossfeed.translators.pump as pump_mod
from crossfeed.translators.forward.chunk_frames import LEARN_TRIES, text_frame, text_run
from crossfeed.translators.plain_json import plain
from crossfeed.translators.pump import Pump
from crossfeed.translators.sse import render_responses
from tests.support.chunk_paths import assert_as_decoded, assert_same, fed, machine
from tests.support.read_runs import calls_to, every_read_is_offered

pytestmark = pytest.mark.usefixtures(every_read_is_offered.__name__)


def frame(field: str, text: bytes, *, nonce: bytes = b"", spaced: bool = False, reason: str | None = None) -> bytes:
    """A chat chunk frame written by hand, its text's JSON string bytes as given (``text``:
    already escaped, or raw bytes no encoder would write)."""
    sep = b": " if spaced else b":"
    tail = b'"},"logprobs":null,"finish_reason":' + (orjson.dumps(reason) if reason else b"null") + b"}]"
    return (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"'
        + field.encode()
        + b'"'
        + sep
        + b'"'
        + text
        + tail
        + (b',"obfuscation":"' + nonce + b'"' if nonce else b"")
        + b"}\n\n"
    )


def decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    return calls_to(monkeypatch, c2r, "decode_chunk")


def run(frames: list[bytes]) -> list[Any]:
    m = machine(wire=True)
    pump = Pump(m)
    out = m.start()
    for f in frames:
        out += pump.feed(f)
    return out + pump.feed(b"data: [DONE]\n\n") + pump.finish()


@pytest.mark.parametrize("field", ["content", "reasoning_content", "reasoning"])
def test_a_stream_is_decoded_once(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = [frame(field, b"piece %d, caf\xc3\xa9 \xf0\x9f\x98\x80" % i) for i in range(20)]
    assert_same(frames)
    seen = decodes(monkeypatch)
    run(frames)
    assert len(seen) == 1  # the first frame; the 19 after it match its template


def test_texts_json_writes_raw_take_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """Characters JSON writes as they are though they do not print (a no-break space, a zero-width
    joiner in an emoji sequence, DEL, a C1 control, U+2028) are plain: no decode, the same events."""
    texts = [
        b"a",
        b"no\xc2\xa0break",
        b"\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb",
        b"del\x7f",
        b"c1\xc2\x85",
        b"ls\xe2\x80\xa8",
    ]
    frames = [frame("content", t) for t in texts]
    monkeypatch.setattr(pump_mod, "RUN_MIN", 1 << 30)  # a read a frame, as paced: feed_frame's template
    assert_same(frames)
    seen = decodes(monkeypatch)
    run(frames)
    assert len(seen) == 1  # the first frame only


def test_texts_json_escapes_are_decoded_and_keep_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [b"a", b"line\\n", b"b", b'say \\"hi\\"', b"c", b"\\u00e9", b"d", b"tab\\t", b"e"]
    frames = [frame("content", t) for t in texts]
    assert_same(frames)
    seen = decodes(monkeypatch)
    run(frames)
    assert len(seen) == 5  # the first and the four escaped ones: each plain one after uses the template


def test_a_nonce_per_frame_stops_the_learning(monkeypatch: pytest.MonkeyPatch) -> None:
    frames = [frame("content", b"t%d" % i, nonce=b"n%d" % i) for i in range(12)]
    assert_same(frames)
    seen = decodes(monkeypatch)
    learned: list[Any] = []
    monkeypatch.setattr(runs_mod, "text_frame", lambda *a, **k: learned.append(a) or text_frame(*a, **k))
    run(frames)
    assert len(seen) == 12
    assert len(learned) == LEARN_TRIES


@pytest.mark.parametrize(
    "later",
    [
        frame("content", b"caf\xc3\x28"),  # not UTF-8
        frame("content", b"bell\x07"),  # a control character: not JSON
        frame("content", b'a","refusal":"no'),  # another field in the text's place
        frame("content", b'a\\\\","refusal":"no'),
        frame("content", b""),
        frame("content", b"t", reason="stop"),
        frame("content", b"t", spaced=True),
        frame("reasoning_content", b"t"),
    ],
    ids=["not-utf8", "control", "quote", "escaped-backslash-quote", "empty", "finish", "spaced", "other-field"],
)
@pytest.mark.parametrize("offered", [True, False], ids=["runs", "a-read-a-frame"])
def test_a_frame_unlike_the_template_takes_the_decode(
    later: bytes, offered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not offered:
        monkeypatch.setattr(pump_mod, "RUN_MIN", 1 << 30)  # feed_frame's template, not a run's
    assert_same([frame("content", b"first"), frame("content", b"second"), later, frame("content", b"after")])


def test_a_spaced_writer_and_a_key_written_twice() -> None:
    assert_same([frame("content", b"x %d" % i, spaced=True) for i in range(4)])
    twice = b'data: {"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}\n\n'
    assert_same([twice, twice.replace(b'"a"', b'"c"'), twice])


def test_plain_is_what_json_writes_unescaped() -> None:
    for ch in map(chr, [*range(0x30), 0x5C, 0x7F, 0xE9, 0x2028, 0x1F600]):
        assert plain(ch) == (orjson.dumps(ch) == b'"' + ch.encode() + b'"')


_piece = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=6).map(lambda t: orjson.dumps(t)[1:-1]),
    st.binary(max_size=4),
    st.sampled_from([b'"', b"\\", b'\\"', b"\x00", b"\xc3", b'","x":"', b"\\u00e9"]),
)


def rendered(fed: tuple[list[Any], Any, dict]) -> tuple[bytes, Any, dict]:
    """``fed``'s outputs as the client gets them: a run's SSE frames are one output (and
    ``Pump.packed`` counts the others), a frame by frame read's one each."""
    return render_responses(fed[0]), fed[1], fed[2]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["content", "content", "reasoning_content", "reasoning"]),
            st.lists(_piece, min_size=1, max_size=3).map(b"".join),
            st.sampled_from([b"", b"", b"n1", b"n2"]),
            st.sampled_from([None, None, None, "stop"]),
        ),
        min_size=1,
        max_size=10,
    ),
    st.lists(st.integers(0, 4000), max_size=4),
)
def test_any_text_frames_same_events_both_ways(
    frames: list[tuple[str, bytes, bytes, str | None]], cuts: list[int]
) -> None:
    assert_as_decoded([frame(field, text, nonce=nonce, reason=reason) for field, text, nonce, reason in frames], cuts)


def test_a_read_of_many_frames_is_cut_once(monkeypatch: pytest.MonkeyPatch) -> None:
    role = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    texts = [frame("content", b"word %d " % i) for i in range(20)]
    stop = frame("content", b"end", reason="stop")
    seen = decodes(monkeypatch)
    runs: list[Any] = []
    monkeypatch.setattr(runs_mod, "text_run", lambda *a: runs.append(text_run(*a)) or runs[-1])
    assert_as_decoded([role, *texts, stop])
    seen.clear()
    runs.clear()
    out = fed([b"".join([role, *texts, stop])], wire=True)[0]
    assert len(seen) == 3  # the role frame, the first text (its template), the last frame
    assert [len(texts) for _, texts, _ in runs if texts] == [19]  # the 19 texts between them, at once
    body = render_responses(out)
    assert body.count(b"event: response.output_text.delta\n") == 21


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_the_content_after_the_reasoning_in_one_read_is_a_run(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the reasoning, then the content: the reasoning's run ends at the first content
    frame, which is decoded and teaches the content's template, and the content after it is a
    run of its own in the same read."""
    role = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    thoughts = [frame(field, b"think %d " % i) for i in range(12)]
    texts = [frame("content", b"word %d " % i) for i in range(20)]
    stop = frame("content", b"end", reason="stop")
    seen = decodes(monkeypatch)
    runs: list[Any] = []
    monkeypatch.setattr(runs_mod, "text_run", lambda *a: runs.append(text_run(*a)) or runs[-1])
    assert_as_decoded([role, *thoughts, *texts, stop], [900, 2500])
    seen.clear()
    runs.clear()
    out = fed([b"".join([role, *thoughts, *texts, stop])], wire=True)[0]
    assert len(seen) == 4  # the role frame, the first thought and the first text (templates), the last
    assert [len(texts) for _, texts, _ in runs if texts] == [11, 19]
    body = render_responses(out)
    assert body.count(b"event: response.output_text.delta\n") == 21
    assert body.count(b"event: response.reasoning_text.delta\n") + body.count(b"summary_text.delta\n") == 12


@pytest.mark.parametrize(("texts", "runs"), [(12, [9, 11]), (4, [9])])
def test_a_run_further_into_a_read_needs_run_min_bytes_left(
    texts: int, runs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the read's start a run is tried only where ``RUN_MIN`` bytes or more are left, as
    the pump offers a read: the content after the reasoning is a run of its own when its frames
    take 1 KiB or more, and read one by one (with the template) when not."""
    role = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    thoughts = [frame("reasoning_content", b"think %d " % i) for i in range(10)]
    content = [frame("content", b"word %d " % i) for i in range(texts)]
    assert (len(b"".join(content[1:])) >= 1024) == (len(runs) == 2)
    read = b"".join([role, *thoughts, *content])
    taken: list[int] = []
    monkeypatch.setattr(runs_mod, "text_run", lambda *a: ((r := text_run(*a)) and taken.append(len(r[1]))) or r)
    monkeypatch.setattr(pump_mod, "RUN_MIN", 1024)
    got = fed([read], wire=True)
    assert taken == runs
    with mock.patch.object(runs_mod, "LEARN_TRIES", 0), mock.patch.object(c2r, "LEARN_TRIES", 0):
        want = fed([read], wire=True)
    assert rendered(got) == rendered(want)


def test_a_read_tries_a_bounded_number_of_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read whose frames change template every other frame: each frame that teaches one would
    try a run (a split of the read); a read tries ``_RUN_TRIES`` at most."""
    fields = ["content", "reasoning_content"]
    frames = [frame(fields[i // 2 % 2], b"x%d " % i) for i in range(40)]
    runs: list[bytes] = []
    read = b"".join(frames)
    monkeypatch.setattr(runs_mod, "text_run", lambda *a: runs.append(a[0]) or text_run(*a))
    fed([read], wire=True)
    assert 0 < runs.count(read) <= runs_mod._RUN_TRIES
    assert_as_decoded(frames, [333])


@pytest.mark.parametrize(
    "between",
    [
        b": keep-alive\n\n",
        b"event: message\n",
        b"data: [DONE]\n\n",
        b"data:" + frame("content", b"nospace")[5:],
        frame("content", b"crlf").replace(b"\n", b"\r\n"),
        b'data: {"choices":[{"index":0,"delta":{"content":"other"}}]}\n\n',
        frame("content", b"multi").replace(b"data: ", b"data: ", 1)[:-2] + b"\ndata: x\n\n",
    ],
    ids=["comment", "event-line", "done", "no-space", "crlf", "other-frame", "two-data-lines"],
)
def test_a_run_ends_where_a_frame_is_not_the_template(between: bytes) -> None:
    first = [frame("content", b"a %d" % i) for i in range(3)]
    rest = [frame("content", b"b %d" % i) for i in range(3)]
    body = b"".join([*first, between, *rest])
    with mock.patch.object(runs_mod, "LEARN_TRIES", 0):
        decoded = fed([body], wire=True)
    assert rendered(fed([body], wire=True)) == rendered(decoded)
    for cut in range(0, len(body), 7):
        assert rendered(fed([body[:cut], body[cut:]], wire=True)) == rendered(decoded)


def test_a_character_cut_between_two_frames_is_not_text() -> None:
    """Two texts that are valid UTF-8 only together: each frame is not (the decode fails it),
    though the run's texts joined decode."""
    assert_as_decoded([frame("content", b"x"), frame("content", b"caf\xc3"), frame("content", b"\xa9 ok")])


def test_a_ticking_created_is_learned_again_as_it_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that stamps each frame with the current second (Azure, xAI, Groq): the template
    stops matching every time the second turns, and is learned again each time, not only
    LEARN_TRIES times a stream."""
    frames = [
        frame("content", b"w%d " % i).replace(b'"created":1', b'"created":%d' % (100 + i // 20)) for i in range(200)
    ]
    seen = decodes(monkeypatch)
    run(frames)
    assert len(seen) == 10  # one a second: the frame that teaches the new template
    assert_as_decoded(frames[:60])


def test_a_pump_that_taps_its_reads_sees_each_read_once() -> None:
    """The rest of a read after a run goes through Pump's own feed: a subclass that records
    each read (the turn inspector's) must not record that rest a second time."""
    seen: list[bytes] = []

    class Tap(Pump):
        def feed(self, chunk: bytes) -> list[Any]:
            seen.append(chunk)
            return Pump.feed(self, chunk)

    m = machine(wire=True)
    pump = Tap(m)
    m.start()
    read = b"".join([*(frame("content", b"t%d" % i) for i in range(5)), frame("content", b"end", reason="stop")])
    pump.feed(read)
    assert seen == [read]


def test_a_short_read_is_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read under 1 KiB (a frame of paced tokens, or a few) goes the usual way: a run costs
    more set-up than so few frames' decodes save, and the pump knows a read's length without a
    scan."""
    offered: list[int] = []
    real = c2r.ChatToResponsesStream.feed_run
    monkeypatch.setattr(
        c2r.ChatToResponsesStream, "feed_run", lambda self, read: offered.append(len(read)) or real(self, read)
    )
    frames = [frame("content", b"w%d" % i) for i in range(40)]
    short, long = b"".join(frames[:3]), b"".join(frames[3:])
    assert len(short) < 1024 <= len(long)
    with mock.patch.object(pump_mod, "RUN_MIN", 1024):
        assert rendered(fed([short, long], wire=True)) == rendered(fed(frames, wire=True))
    assert offered == [len(long)]


@pytest.mark.parametrize(
    "tail", [b"", b"data: [DONE]\n\n", b'data: {"choi', b"\n\ndata: "], ids=["none", "done", "cut", "bare-joint"]
)
def test_a_run_read_from_an_offset_is_the_run_of_the_read_cut_there(tail: bytes) -> None:
    """``text_run(read, tpl, at, before)``, the run after ``before`` frames read one by one, is the
    run of ``read[at:]``: the same texts and bytes, for every frame boundary ``at`` (the read is
    split whole, never sliced from ``at`` first)."""
    frames = [frame("content", b"w%d" % i) for i in range(6)] + [frame("content", b"x", nonce=b"n")]
    tpl = text_frame(frames[0][6:-2], "content", "w0", reasoning=False, left=1, at=0)
    assert tpl is not None
    read = b"".join(frames) + tail
    at = 0
    for before in range(len(frames)):
        assert text_run(read, tpl, at, before) == text_run(read[at:], tpl)
        at += len(frames[before])
    assert text_run(read, tpl, 0, 0)[1] == [f"w{i}" for i in range(6)]
    assert text_run(read, tpl, len(frames[0]), 1)[1] == [f"w{i}" for i in range(1, 6)]
