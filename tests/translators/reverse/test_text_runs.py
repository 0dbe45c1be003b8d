"""The reverse machine's text runs (text_runs.py) against its decode: a read of text deltas
that differ only in their text and number is read at once, and gives the chunks the typed
decode of every frame gives (and plain JSON into ``feed``), byte for byte, whatever the frames
hold and wherever the reads are cut."""

from __future__ import annotations

import itertools
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crossfeed.translators.pump as pump_mod
import crossfeed.translators.reverse.machine as r2c
import crossfeed.translators.reverse.text_runs as runs_mod
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.reverse.delta_runs import NO_NUMBER, NUMBER_FIRST, TEXT_FIRST, delta_template
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.stopping import StoppingChatStream
from crossfeed.translators.sse import JSON_FRAMING, render_chat, render_json
from tests.support.read_runs import calls_to, every_read_is_offered
from tests.support.validators import validate_chat_chunks

pytestmark = pytest.mark.usefixtures(every_read_is_offered.__name__)


def event(obj: dict[str, Any]) -> bytes:
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


CREATED = event(
    {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "model": "m", "created_at": 1}}
)
ADDED = event(
    {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "message"}}
)
PART = event({"type": "response.content_part.added", "sequence_number": 2, "output_index": 0, "content_index": 0})
COMPLETED = event(
    {
        "type": "response.completed",
        "sequence_number": 99999,
        "response": {"id": "r", "model": "m", "output": [], "usage": {"input_tokens": 1, "output_tokens": 2}},
    }
)


def delta(
    seq: int | bytes | None,
    text: bytes,
    *,
    order: str = "number",
    nonce: bytes = b"",
    item: bytes = b"msg_1",
    part: bytes = b"0",
    index: bytes = b"0",
) -> bytes:
    """A text delta frame written by hand: ``text`` is its JSON string's bytes as given (already
    escaped, or bytes no encoder would write); ``order``: where the number is (``number``: before
    the text, as OpenAI and llama-server write it; ``text``: after it, as DeepSeek does; ``none``)."""
    number = b"" if seq is None else b'"sequence_number":' + (seq if isinstance(seq, bytes) else b"%d" % seq) + b","
    head = b'{"type":"response.output_text.delta",'
    ids = b'"item_id":"' + item + b'","output_index":' + index + b',"content_index":' + part + b","
    body = b'"delta":"' + text + b'","logprobs":[]'
    if nonce:
        body += b',"obfuscation":"' + nonce + b'"'
    if order == "number":
        data = head + number + ids + body + b"}"
    elif order == "text":
        data = head + ids + body + b"," + number[:-1] + b"}"
    else:
        data = head + ids + body + b"}"
    return b"event: response.output_text.delta\ndata: " + data + b"\n\n"


def fed(reads: list[bytes], *, wire: bool, typed: bool = True, stop: bool = False) -> tuple[bytes, dict, int]:
    kw: dict[str, Any] = dict(include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1)
    m = StoppingChatStream(stop=("zz",), prompt_tokens=1, **kw) if stop else ResponsesToChatStream(wire=wire, **kw)
    pump = Pump(m, typed_frames=typed)
    out: list[Any] = []
    for read in reads:
        out += pump.feed(read)
    out += pump.finish()
    return render_chat(out), m.diagnostics, pump.events_in


def decoded(frames: list[bytes], **kw: Any) -> tuple[bytes, dict, int]:
    """The stream read without runs: the typed decode of every frame (a frame the decode and
    plain JSON judge differently, invalid UTF-8 in a field nobody reads, is
    test_delta_frames.py's matter)."""
    with mock.patch.object(runs_mod, "LEARN_TRIES", 0):
        return fed(frames, wire=True, **kw)


def assert_as_decoded(frames: list[bytes], cuts: list[int] = ()) -> bytes:  # type: ignore[assignment]
    """The chunks with runs are those of the decode of every frame, in wire mode (and in dicts,
    where no run is taken): frame by frame, the whole stream in one read, and the stream cut at
    ``cuts``."""
    want = decoded(frames)
    body = b"".join(frames)
    bounds = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    for reads in (frames, [body], [body[a:b] for a, b in itertools.pairwise(bounds)]):
        assert fed(reads, wire=True) == want
        assert fed(reads, wire=False) == want
    chunks = [orjson.loads(p[6:]) for p in want[0].split(b"\n\n") if p.startswith(b"data: {")]
    validate_chat_chunks(chunks)
    return want[0]


def decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    return calls_to(monkeypatch, r2c, "decode_text_delta")


_piece = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=6).map(lambda t: orjson.dumps(t)[1:-1]),
    st.binary(max_size=3),
    st.sampled_from([b'"', b"\\", b'\\"', b"\x00", b"\xc3", b'","x":"', b"\\u00e9", b"%", b"%s"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.lists(_piece, min_size=0, max_size=3).map(b"".join), st.sampled_from([b"", b"", b"", b"n1"])),
        min_size=1,
        max_size=14,
    ),
    st.sampled_from(["number", "text", "none"]),
    st.integers(0, 120),
    st.sampled_from([1, 1, 1, 2, 0]),
    st.lists(st.integers(0, 5000), max_size=4),
)
def test_any_text_deltas_same_chunks_every_way(
    texts: list[tuple[bytes, bytes]], order: str, first: int, step: int, cuts: list[int]
) -> None:
    """Texts with escapes, raw quotes, invalid UTF-8, control bytes and ``%``; nonces; numbers
    from anywhere (across a digit), rising by one, by two or not at all; each layout."""
    seqs = [None if order == "none" else first + step * i for i in range(len(texts))]
    frames = [CREATED, ADDED, PART] + [delta(s, t, order=order, nonce=n) for s, (t, n) in zip(seqs, texts, strict=True)]
    assert_as_decoded([*frames, COMPLETED], cuts)


@pytest.mark.parametrize("order", ["number", "text", "none"])
def test_a_read_of_many_deltas_is_decoded_twice(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first delta opens the part, the second teaches the template; the other 38 (their
    numbers across 9 -> 10) are read at once."""
    frames = [CREATED, ADDED, PART, *(delta(3 + i, b"word %d " % i, order=order) for i in range(40)), COMPLETED]
    seen = decodes(monkeypatch)
    body = assert_as_decoded(frames)
    seen.clear()
    out = fed([b"".join(frames)], wire=True)
    assert out[0] == body
    assert len(seen) == 2
    assert out[2] == len(frames)  # every frame counted in


def _reasoning_item(summary: list[str]) -> list[bytes]:
    """A reasoning item at output index 0 with one summary part streamed as ``summary``, and the
    frames no frame reader takes (a summary part's ``added`` and ``done``, the item's ``done``)."""
    text = "".join(summary)
    item: dict[str, Any] = {"type": "reasoning", "id": "rs_1", "summary": []}
    part = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
    frames = [
        event({"type": "response.output_item.added", "output_index": 0, "item": item}),
        event({"type": "response.reasoning_summary_part.added", **part, "part": {"type": "summary_text", "text": ""}}),
        *(event({"type": "response.reasoning_summary_text.delta", **part, "delta": d}) for d in summary),
        event({"type": "response.reasoning_summary_text.done", **part, "text": text}),
        event({"type": "response.reasoning_summary_part.done", **part, "part": {"type": "summary_text", "text": text}}),
    ]
    done = {**item, "summary": [{"type": "summary_text", "text": text}]}
    return [*frames, event({"type": "response.output_item.done", "output_index": 0, "item": done})]


MESSAGE_1 = event({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "m"}})
PART_1 = event({"type": "response.content_part.added", "output_index": 1, "content_index": 0})


@pytest.mark.parametrize("order", ["number", "text", "none"])
def test_the_text_after_a_reasoning_item_in_one_read_is_a_run(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that holds a reasoning item before the message (frames no reader takes among
    them, read as the pump reads them: parsed, to ``feed``): the frames are read one by one up
    to the message's second delta, which teaches the template, and the other 28 at once."""
    texts = [delta(20 + i, b"w%d " % i, order=order, index=b"1") for i in range(30)]
    frames = [CREATED, *_reasoning_item(["a", "b", "c"]), MESSAGE_1, PART_1, *texts, COMPLETED]
    seen = decodes(monkeypatch)
    body = assert_as_decoded(frames, [700, 1500])
    seen.clear()
    out = fed([b"".join(frames)], wire=True)
    assert out[0] == body and b"abc" not in body and b'"reasoning_content":"b"' in body
    assert len(seen) == 2
    assert out[2] == len(frames)


_KINDS = {
    "summary": ("response.reasoning_summary_text.delta", "summary_index"),
    "text": ("response.reasoning_text.delta", "content_index"),
    "open": ("response.reasoning.delta", "content_index"),  # Open Responses' name of reasoning_text.delta
}


def _thoughts(kind: str, parts: list[list[bytes]], order: str, seq: int = 10) -> list[bytes]:
    """A reasoning item at output index 0 whose parts (of ``kind``: _KINDS) stream ``parts``,
    each delta's JSON written by hand as ``delta`` writes a text's (``order``), and its done."""
    name, index = _KINDS[kind]
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "content": []}
    frames = [event({"type": "response.output_item.added", "output_index": 0, "item": item})]
    for i, texts in enumerate(parts):
        for text in texts:
            head = b'{"type":"' + name.encode() + b'",'
            ids = b'"item_id":"rs_1","output_index":0,"' + index.encode() + b'":%d,' % i
            number = b'"sequence_number":%d' % seq
            body = b'"delta":"' + text + b'"'
            data = {"number": head + number + b"," + ids + body, "text": head + ids + body + b"," + number}
            frames.append(b"event: " + name.encode() + b"\ndata: " + data.get(order, head + ids + body) + b"}\n\n")
            seq += 1
    said = [
        {"type": "summary_text" if kind == "summary" else "reasoning_text", "text": "".join(t.decode() for t in texts)}
        for texts in parts
    ]
    done = {**item, "summary" if kind == "summary" else "content": said}
    return [*frames, event({"type": "response.output_item.done", "output_index": 0, "item": done})]


@pytest.mark.parametrize("kind", list(_KINDS))
@pytest.mark.parametrize("order", ["number", "text", "none"])
def test_a_reasoning_part_s_deltas_in_one_read_are_a_run(kind: str, order: str) -> None:
    """A reasoning part's second delta teaches its template as a text part's does, and the
    deltas after it are a run: each part of the item (its first delta goes the usual way), then
    the message's text after it, in one read; the chunks those of the decode of every frame."""
    parts = [[b"p%d t%d " % (p, i) for i in range(10)] for p in range(2)]
    texts = [delta(40 + i, b"w%d " % i, order=order, index=b"1") for i in range(10)]
    cite = {"type": "url_citation", "url": "https://example.com/", "title": "e", "start_index": 3, "end_index": 9}
    cited = {"type": "response.output_text.annotation.added", "output_index": 1, "content_index": 0, "annotation": cite}
    frames = [CREATED, *_thoughts(kind, parts, order), MESSAGE_1, PART_1, *texts, event(cited), COMPLETED]
    body = assert_as_decoded(frames, [500, 1700, 2900])  # (the citation's offsets: the text's alone)
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    pump = Pump(m)
    assert render_chat(pump.feed(b"".join(frames)) + pump.finish()) == body
    assert m.packed == 3 * 7  # three runs of eight: two parts', the text's
    joint = b"\\n\\n" if kind == "summary" else b""  # (a summary part is a segment; an item's texts are one)
    assert b'"reasoning_content":"p0 t9 "' in body and b'"reasoning_content":"' + joint + b'p1 t0 "' in body


@pytest.mark.parametrize(("texts", "runs"), [(8, 2), (4, 1)])
def test_a_run_further_into_a_read_needs_run_min_bytes_left(texts: int, runs: int) -> None:
    """Past the read's start a run is tried only where ``RUN_MIN`` bytes or more are left, as
    the pump offers a read: the message's text after a reasoning part is a run of its own when
    its frames take 1 KiB or more, and read one by one when not (a run of two or three frames
    costs more than it saves)."""
    parts = [[b"thinking about it, step %d " % i for i in range(10)]]
    message = [delta(40 + i, b"the answer, part %d " % i, index=b"1") for i in range(texts)]
    frames = [CREATED, *_thoughts("summary", parts, "number"), MESSAGE_1, PART_1, *message, COMPLETED]
    tail = b"".join(message[1:])  # (from the second delta: the first teaches the template)
    assert (len(tail) >= 1024) == (runs == 2)
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    pump = Pump(m)
    with mock.patch.object(pump_mod, "RUN_MIN", 1024):
        body = render_chat(pump.feed(b"".join(frames)) + pump.finish())
    assert body == decoded(frames)[0]
    assert m.packed == 7 + (texts - 3 if runs == 2 else 0)  # the part's run of eight, the text's


@pytest.mark.parametrize(
    "odd",
    [
        b"event: response.foo\ndata: [1,2]\n\n",
        b'event: response.foo\ndata: "x"\n\n',
        b"event: response.foo\ndata: {nope\n\n",
        b'event: response.foo\ndata: {"type":"response.foo"}\n\n',
        b'event: keepalive\ndata: {"type":"keepalive"}\n\n',
        b'event: response.in_progress\ndata: {"type":"response.in_progress","response":7}\n\n',
    ],
    ids=["array", "string", "not-json", "unknown", "keepalive", "odd-in-progress"],
)
def test_a_frame_no_reader_takes_before_the_text_is_read_as_the_pump_reads_it(odd: bytes) -> None:
    """Before the template is known, a frame of one event line and one data line that neither a
    reader nor ``feed_frame`` takes is parsed and fed when it is an object; any other (a value
    the pump shapes, bytes that are not JSON: its error) is left to the pump."""
    texts = [delta(20 + i, b"w%d " % i, index=b"1") for i in range(8)]
    assert_as_decoded([CREATED, *_reasoning_item(["a"]), odd, MESSAGE_1, PART_1, *texts, COMPLETED], [300, 900])


def test_the_layouts_of_the_number() -> None:
    for order, layout in (("number", NUMBER_FIRST), ("text", TEXT_FIRST), ("none", NO_NUMBER)):
        data = delta(7, b"hi", order=order).split(b"data: ", 1)[1][:-2]
        tpl = delta_template(data, "hi", 0, 0)
        assert tpl is not None and tpl.order == layout, order
    data = delta(7, b"hi").split(b"data: ", 1)[1][:-2]
    assert delta_template(data.replace(b'"delta"', b'"delta" '), "hi", 0, 0) is None  # not compact
    assert delta_template(data.replace(b":7,", b":07,"), "hi", 0, 0) is None  # not a JSON integer
    assert delta_template(data, "h\\i", 0, 0) is None  # a text JSON escapes
    assert delta_template(data.replace(b"msg_1", b"xdelta"), "hi", 0, 0) is not None
    assert delta_template(data.replace(b"msg_1", b"delta"), "hi", 0, 0) is None  # the key's bytes twice


@pytest.mark.parametrize(
    "between",
    [
        b": keep-alive\n\n",
        b"event: ping\n",
        b"data: [DONE]\n\n",
        delta(50, b"nospace").replace(b"data: ", b"data:"),
        delta(50, b"crlf").replace(b"\n", b"\r\n"),
        delta(50, b"other", item=b"msg_2"),
        delta(50, b"escaped \\n"),
        delta(b"050", b"leading zero"),
        delta(b"05", b"leading zero, as wide"),
        delta(50, b"other part", part=b"1"),
        delta(50, b"other item", index=b"1"),
        delta(50, b"error").replace(b"event: response.output_text.delta", b"event: error"),
        delta(50, b"two")[:-2] + b"\ndata: x\n\n",
        delta(50, b""),
    ],
    ids=[
        "comment",
        "event-line",
        "done",
        "no-space",
        "crlf",
        "other-item",
        "escape",
        "zero",
        "zero-2",
        "other-part",
        "other-index",
        "error",
        "two-data",
        "empty",
    ],
)
def test_a_run_ends_where_a_frame_is_not_the_template(between: bytes) -> None:
    first = [delta(10 + i, b"a %d" % i) for i in range(4)]
    rest = [delta(51 + i, b"b %d" % i) for i in range(4)]
    body = b"".join([CREATED, ADDED, PART, *first, between, *rest, COMPLETED])
    want = decoded([body])
    assert fed([body], wire=True) == want
    for cut in range(0, len(body), 9):
        assert fed([body[:cut], body[cut:]], wire=True) == want


def test_a_character_cut_between_two_frames_is_not_text() -> None:
    """Two texts valid UTF-8 only together: each frame is not (its decode fails), though the
    run's texts joined would decode."""
    frames = [CREATED, ADDED, PART, delta(3, b"x"), delta(4, b"y"), delta(5, b"caf\xc3"), delta(6, b"\xa9 ok")]
    assert_as_decoded([*frames, COMPLETED])


def test_a_nonce_per_frame_stops_the_learning(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenAI writes an ``obfuscation`` nonce in every delta: no template matches the next
    frame, and the stream stops learning after LEARN_TRIES in a row."""
    tries: list[bytes] = []
    real = ResponsesToChatStream._learn

    def counting(self: ResponsesToChatStream, data: bytes, *a: Any) -> None:
        tries.append(data)
        real(self, data, *a)

    monkeypatch.setattr(ResponsesToChatStream, "_learn", counting)
    frames = [CREATED, ADDED, PART, *(delta(3 + i, b"w%d" % i, nonce=b"n%d" % i) for i in range(60)), COMPLETED]
    fed([b"".join(frames[k : k + 6]) for k in range(0, len(frames), 6)], wire=True)
    assert len(tries) == runs_mod.LEARN_TRIES
    assert_as_decoded([*frames[:20], COMPLETED])


def test_paced_tokens_learn_nothing() -> None:
    """A read a frame: the pump offers no run but to the frames of 1 KiB and more (the
    Response's lifecycle), which hold no text delta; the machine keeps no template."""
    big = event({"type": "response.created", "response": {"id": "r", "model": "m", "instructions": "x" * 2000}})
    m = ResponsesToChatStream(
        include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    pump = Pump(m)
    with mock.patch.object(pump_mod, "RUN_MIN", 1024):
        for f in [big, ADDED, PART, *(delta(3 + i, b"w%d" % i) for i in range(30))]:
            pump.feed(f)
    assert m._template is None and not m._learning


def test_a_short_read_is_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    offered: list[int] = []
    real = ResponsesToChatStream.feed_run
    monkeypatch.setattr(
        ResponsesToChatStream, "feed_run", lambda self, read: offered.append(len(read)) or real(self, read)
    )
    frames = [CREATED, ADDED, PART, *(delta(3 + i, b"w%d" % i) for i in range(30))]
    short = b"".join(frames[3:6])
    long = b"".join(frames[6:])
    assert len(short) < 1024 <= len(long)
    with mock.patch.object(pump_mod, "RUN_MIN", 1024):
        assert fed([b"".join(frames[:3]), short, long], wire=True) == fed(frames, wire=True, typed=False)
    assert offered == [len(long)]


def test_stop_sequences_take_no_run() -> None:
    """Stop sequences are matched on every event (stopping.py): no run."""
    frames = [CREATED, ADDED, PART, *(delta(3 + i, b"w%d " % i) for i in range(30)), COMPLETED]
    assert StoppingChatStream.feed_run(None, b"".join(frames)) is None  # type: ignore[arg-type]
    assert fed([b"".join(frames)], wire=True, stop=True) == fed(frames, wire=True, typed=False, stop=True)


@pytest.mark.parametrize("order", ["number", "text", "none"])
def test_a_second_message_is_learned_again(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that opens with the deltas of another message (another output index) than the
    template's: the template is learned again from them, and their run is read at once too."""
    second = event(
        {"type": "response.output_item.added", "sequence_number": 40, "output_index": 1, "item": {"type": "message"}}
    )
    first = [delta(3 + i, b"a%d " % i, order=order) for i in range(12)]
    later = [delta(41 + i, b"b%d " % i, order=order, index=b"1", item=b"msg_2") for i in range(30)]
    reads = [b"".join([CREATED, ADDED, PART, *first, second]), b"".join(later[:15]), b"".join([*later[15:], COMPLETED])]
    want = decoded(reads)
    seen = decodes(monkeypatch)
    assert fed(reads, wire=True) == want
    # The first message: its first two deltas (the second teaches the template). The second
    # message's first read: its first two too (the template does not match; the second of them
    # teaches the new one), the 13 after them a run. Its last read: none, a run.
    assert len(seen) == 2 + 2


@pytest.mark.parametrize("first", [0, 7, 95, 32_740, 99_990])
@pytest.mark.parametrize("order", ["number", "text"])
def test_numbers_anywhere_are_written_not_read(first: int, order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run writes the numbers it expects (``_numbers``: from the table of those written
    before, or past its end one by one) and compares: across a digit, across the table's end."""
    frames = [CREATED, ADDED, PART, *(delta(first + i, b"w%d " % i, order=order) for i in range(40)), COMPLETED]
    seen = decodes(monkeypatch)
    body = assert_as_decoded(frames)
    seen.clear()
    assert fed([b"".join(frames)], wire=True)[0] == body
    assert len(seen) == 2


def test_a_run_in_json_frames_is_a_frame_a_delta() -> None:
    """Without SSE (a frame per WebSocket message) each delta of a run is an output of its own."""
    frames = [CREATED, ADDED, PART, *(delta(3 + i, b"w%d " % i) for i in range(30)), COMPLETED]

    def outputs(reads: list[bytes], typed: bool) -> list[Any]:
        kw: dict[str, Any] = dict(include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1)
        pump = Pump(ResponsesToChatStream(wire=JSON_FRAMING, **kw), typed_frames=typed)
        out = [o for read in reads for o in pump.feed(read)]
        return render_json(out + pump.finish())

    docs = outputs([b"".join(frames)], typed=True)
    assert docs == outputs(frames, typed=False)
    assert sum(b'"content":"w' in doc for doc in docs) == 30


@pytest.mark.parametrize("digits", [19, 5000])
def test_a_number_too_long_to_read_takes_no_run(digits: int) -> None:
    """A number of more digits than a run reads (``int`` refuses thousands): the frames are
    decoded, which skip it."""
    high = b"9" * (digits - 2)
    frames = [CREATED, ADDED, PART, *(delta(high + b"%d" % (10 + i), b"w%d " % i) for i in range(30)), COMPLETED]
    assert_as_decoded(frames)


def test_a_run_counts_a_chunk_a_delta() -> None:
    """An SSE run's chunks are one output; the pump counts the others (``packed``), so the
    outputs and ``packed`` add up to the decode's outputs (the relay's ``events_out``)."""
    frames = [CREATED, ADDED, PART, *(delta(3 + i, b"w%d " % i) for i in range(30)), COMPLETED]

    def outputs(reads: list[bytes], typed: bool) -> tuple[list[Any], int]:
        kw: dict[str, Any] = dict(include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1)
        pump = Pump(ResponsesToChatStream(wire=True, **kw), typed_frames=typed)
        return [o for read in reads for o in pump.feed(read)] + pump.finish(), pump.packed

    (ran, packed), (each, none) = outputs([b"".join(frames)], typed=True), outputs(frames, typed=False)
    assert render_chat(ran) == render_chat(each)
    assert (packed, none) == (27, 0)  # the run: the third delta's chunk and on, 28 chunks in one
    assert len(ran) + packed == len(each)
    later = Pump(
        ResponsesToChatStream(
            wire=True, include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1
        )
    )
    later.machine.packed = 5  # type: ignore[attr-defined]
    assert Pump(later.machine).packed == 0  # a later leg's pump counts its own


@pytest.mark.parametrize("order", ["number", "text"])
def test_a_run_whose_number_is_not_the_one_guessed_reads_it(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run guesses its first number (one more than the last run's last) and reads it where the
    frame does not hold it: after 11, 120 holds the guess's digits, 12, and one more after them
    (the number first), 112 one more before them (the text first)."""
    first = [delta(3 + i, b"a%d " % i, order=order) for i in range(9)]  # 3..11: the guess is 12
    start = 120 if order == "number" else 112
    second = [delta(start + i, b"b%d " % i, order=order) for i in range(10)]
    third = [delta(start + 10 + i, b"c%d " % i, order=order) for i in range(10)]  # the guess holds
    frames = [CREATED, ADDED, PART, *first, *second, *third, COMPLETED]
    want = decoded(frames)
    seen = decodes(monkeypatch)
    reads = [b"".join([CREATED, ADDED, PART, *first]), b"".join(second), b"".join([*third, COMPLETED])]
    assert fed(reads, wire=True) == want
    assert len(seen) == 2  # the first two deltas; the rest in runs


def test_the_frames_after_a_run_are_not_split_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The frames of a read after its run (the closing ones) go to the pump as the blocks the run
    cut; a read with a CR among them goes to the SSE decoder, which knows CR line ends."""
    deltas = [delta(3 + i, b"w%d " % i) for i in range(20)]
    done = event({"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": "x"})
    frames = [CREATED, ADDED, PART, *deltas, done, COMPLETED]
    want = decoded(frames)
    split: list[bytes] = []
    real = pump_mod.SSEDecoder.feed
    monkeypatch.setattr(pump_mod.SSEDecoder, "feed", lambda self, chunk: split.append(chunk) or real(self, chunk))
    assert fed([b"".join(frames)], wire=True) == want
    assert split == []
    crlf = COMPLETED.replace(b"\ndata: ", b"\r\ndata: ")
    want = decoded([*frames[:-1], crlf])
    split.clear()
    assert fed([b"".join([*frames[:-1], crlf])], wire=True) == want
    assert len(split) == 1 and split[0].endswith(crlf)


def test_a_read_that_opens_with_an_escaped_text_keeps_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose first frame is the template's around a text JSON escapes takes none (the
    frame is decoded) and keeps the template for the frames after it: nothing is learned again."""
    learned: list[bytes] = []
    real = ResponsesToChatStream._learn

    def counting(self: ResponsesToChatStream, data: bytes, *a: Any) -> None:
        learned.append(data)
        real(self, data, *a)

    first = [delta(3 + i, b"a%d " % i) for i in range(10)]
    second = [delta(13, b"line\\n"), *(delta(14 + i, b"b%d " % i) for i in range(10))]
    third = [delta(24 + i, b"c%d " % i) for i in range(10)]
    reads = [b"".join([CREATED, ADDED, PART, *first]), b"".join(second), b"".join([*third, COMPLETED])]
    want = decoded(reads)
    monkeypatch.setattr(ResponsesToChatStream, "_learn", counting)
    assert fed(reads, wire=True) == want
    assert len(learned) == 1
