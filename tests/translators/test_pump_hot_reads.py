"""A read of one frame of the machine's most frequent kind (``hot_head``), or of a few of them
(too short for a run), goes from the pump straight to ``feed_frame``, past the SSE decoder. These
reads, and near misses of them, must come out as they do through the decoder: the same bytes and
diagnostics whether each read is fed whole, a byte at a time (never the hot path) or with the
typed path off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.sse import SSEDecoder, SSEEvent, render_chat, render_responses
from tests.support.chat_chunks import DONE, chunk


def _text(text: str) -> bytes:
    return chunk({"content": text})


def _event(event: dict[str, Any], name: str | None = None) -> bytes:
    return b"event: " + (name or event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _delta(text: str, n: int) -> bytes:
    return _event(
        {
            "type": "response.output_text.delta",
            "sequence_number": n,
            "output_index": 0,
            "content_index": 0,
            "delta": text,
        }
    )


_FORWARD_DONE = [chunk({}, "stop"), DONE]
_FORWARD: dict[str, list[bytes]] = {
    "frames": [chunk({"role": "assistant"}), _text("Hel"), _text("lo")],
    "crlf": [_text("Hel"), _text("lo").replace(b"\n", b"\r\n")],
    "a CR and a comment": [_text("Hel"), _text("lo")[:-2] + b"\r: note\n\n"],
    "two in a read": [_text("Hel") + _text("lo"), _text("!")],
    "after a held comment": [_text("Hel"), b":", _text("lo"), _text("!")],
    "its blank line in the next read": [_text("Hel")[:-1], b"\n", _text("lo")],
    "an LF in the data": [_text("Hel"), b'data: {"a":\n1}\n\n'],
    "not JSON": [_text("Hel"), b"data: {nope}\n\n"],
    "an error object": [_text("Hel"), b'data: {"error":{"message":"overloaded","code":"busy"}}\n\n'],
    "a blank line more": [_text("Hel"), _text("lo") + b"\n"],
    "a line of no known field": [_text("Hel"), b"\0x\n\n", b"{x}\n\n", _text("lo")],
    "three in a read": [_text("Hel") + _text("lo") + _text("!")],
    "two and the end in a read": [_text("Hel") + _text("lo") + chunk({}, "stop") + DONE],
    "a comment between two": [_text("Hel") + b": note\n\n" + _text("lo")],
    "an empty data line between two": [_text("Hel") + b"data: \n\n" + _text("lo")],
    "an LF in the second data": [_text("Hel") + b'data: {"a":\n1}\n\n' + _text("lo")],
    "the second not JSON": [_text("Hel") + b"data: {nope}\n\n" + _text("lo")],
    "the second an error object": [
        _text("Hel") + b'data: {"error":{"message":"overloaded","code":"busy"}}\n\n' + _text("lo") + _text("!")
    ],
    "another line in the second": [_text("Hel") + _text("lo").replace(b"data: ", b"id: 2\ndata: ")],
}
_REVERSE_START = [
    _event({"type": "response.created", "response": {"id": "resp_1", "model": "m", "created_at": 1, "output": []}}),
    _event({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1"}}),
]
_REVERSE_DONE = [
    _event(
        {
            "type": "response.completed",
            "response": {"id": "resp_1", "model": "m", "output": [], "usage": {"input_tokens": 1, "output_tokens": 2}},
        }
    )
]
_REVERSE: dict[str, list[bytes]] = {
    "frames": [_delta("Hel", 2), _delta("lo", 3)],
    "crlf": [_delta("Hel", 2), _delta("lo", 3).replace(b"\n", b"\r\n")],
    "a CR and a comment": [_delta("Hel", 2), _delta("lo", 3)[:-2] + b"\r: note\n\n"],
    "two in a read": [_delta("Hel", 2) + _delta("lo", 3), _delta("!", 4)],
    "after a held comment": [_delta("Hel", 2), b":", _delta("lo", 3), _delta("!", 4)],
    "another line first": [_delta("Hel", 2), _delta("lo", 3).replace(b"\ndata: ", b"\nid: 3\ndata: ")],
    "an LF in the data": [_delta("Hel", 2), b'event: response.output_text.delta\ndata: {"a":\n1}\n\n'],
    "not JSON": [_delta("Hel", 2), b"event: response.output_text.delta\ndata: {nope}\n\n"],
    "another type under the name": [
        _delta("Hel", 2),
        _event({"type": "error", "code": "busy", "message": "overloaded"}, "response.output_text.delta"),
    ],
    "a line of no known field": [_delta("Hel", 2), b"\0x\n\n", b"{x}\n\n", _delta("lo", 3)],
    "another shape": [_delta("Hel", 2), _delta("lo", 3).replace(b'"output_index":0', b'"output_index":null')],
    "three in a read": [_delta("Hel", 2) + _delta("lo", 3) + _delta("!", 4)],
    "two and the end in a read": [_delta("Hel", 2) + _delta("lo", 3) + _REVERSE_DONE[0]],
    "another line in the second": [_delta("Hel", 2) + _delta("lo", 3).replace(b"\ndata: ", b"\nid: 3\ndata: ")],
    "an LF in the second data": [_delta("Hel", 2) + b'event: response.output_text.delta\ndata: {"a":\n1}\n\n'],
    "the second not JSON": [_delta("Hel", 2) + b"event: response.output_text.delta\ndata: {nope}\n\n" + _delta("!", 4)],
    "the second another type under the name": [
        _delta("Hel", 2)
        + _event({"type": "error", "code": "busy", "message": "overloaded"}, "response.output_text.delta")
        + _delta("lo", 3)
    ],
    "the second another shape": [
        _delta("Hel", 2) + _delta("lo", 3).replace(b'"output_index":0', b'"output_index":null') + _delta("!", 4)
    ],
}


def _args(text: str, n: int, kind: str = "response.function_call_arguments.delta") -> bytes:
    return _event({"type": kind, "sequence_number": n, "item_id": "fc_1", "output_index": 1, "delta": text})


_CALL_START = [
    *_REVERSE_START,
    _event(
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""},
        }
    ),
]
# Reads of one frame of another per-token kind (``warm_heads``), and near misses of them.
_REVERSE_WARM: dict[str, list[bytes]] = {
    "fragments": [_args('{"q":', 4), _args('"x"}', 5)],
    "reasoning": [
        _event({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "hm"}),
        _event({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "m"}),
    ],
    "crlf": [_args("a", 4), _args("b", 5).replace(b"\n", b"\r\n")],
    "another line first": [_args("a", 4), _args("b", 5).replace(b"\ndata: ", b"\nid: 5\ndata: ")],
    "an LF in the data": [_args("a", 4), b'event: response.function_call_arguments.delta\ndata: {"a":\n1}\n\n'],
    "not JSON": [_args("a", 4), b"event: response.function_call_arguments.delta\ndata: {nope}\n\n"],
    "another type under the name": [
        _args("a", 4),
        _event({"type": "error", "code": "busy", "message": "overloaded"}, "response.function_call_arguments.delta"),
    ],
    "two in a read": [_args("a", 4) + _args("b", 5)],
    "its blank line in the next read": [_args("a", 4)[:-1], b"\n", _args("b", 5)],
    "a fragment of a call not yet added": [_args("a", 4).replace(b'"output_index":1', b'"output_index":7')],
    # under a call's event name after one fragment (delta_reads.call_frame): what is not a fragment
    "an empty fragment": [_args("a", 4), _args("", 5), _args("b", 6)],
    "a null index": [_args("a", 4), _args("b", 5).replace(b'"output_index":1', b'"output_index":null')],
    "reasoning under its name": [
        _args("a", 4),
        _event(
            {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "m"},
            "response.function_call_arguments.delta",
        ),
    ],
    "text under its name": [
        _args("a", 4),
        _event(
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "hi"},
            "response.function_call_arguments.delta",
        ),
    ],
    "a custom input delta next": [_args("a", 4), _args("b", 5, "response.custom_tool_call_input.delta")],
    # A warm head read becomes the hot one (Pump._swap): the reads after it as the decoder reads them.
    "two in a read after one": [_args('{"q":', 4), _args('"x"', 5) + _args("}", 6)],
    "text, fragments, text again": [_delta("Hel", 2), _args("a", 4), _args("b", 5), _delta("lo", 6), _delta("!", 7)],
    "text in a read after fragments": [_args("a", 4), _delta("Hel", 5) + _delta("lo", 6)],
    "reasoning, then fragments": [
        _event({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "m"}),
        _args("a", 4),
        _args("b", 5) + _args("c", 6),
    ],
    "a fragment and text in a read": [_args("a", 4) + _delta("Hel", 5), _delta("lo", 6), _args("b", 7) + _args("c", 8)],
    "reasoning and fragments in a read": [
        _event({"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "m"})
        + _args("a", 4)
        + _args("b", 5),
        _args("c", 6) + _args("d", 7),
    ],
    "an LF in the data after a swap": [
        _args("a", 4),
        _args("b", 5) + b'event: response.function_call_arguments.delta\ndata: {"a":\n1}\n\n',
    ],
}


def _forward(typed: bool, max_event_bytes: int) -> tuple[Any, Callable[[list[Any]], bytes], list[Any]]:
    m = ChatToResponsesStream({"model": "m", "stream": True}, ids=SequentialIds(), now=lambda: 1, wire=True)
    return Pump(m, max_event_bytes, typed_frames=typed), render_responses, m.start()


def _reverse(typed: bool, max_event_bytes: int) -> tuple[Any, Callable[[list[Any]], bytes], list[Any]]:
    m = ResponsesToChatStream(
        include_usage=True, options=BackendProfile(), ids=SequentialIds(), now=lambda: 1, wire=True
    )
    return Pump(m, max_event_bytes, typed_frames=typed), render_chat, []


def _run(make: Any, reads: list[bytes], *, typed: bool, bytewise: bool, max_event_bytes: int) -> tuple[bytes, Any]:
    pump, render, out = make(typed, max_event_bytes)
    for read in reads:
        for piece in [read[i : i + 1] for i in range(len(read))] if bytewise else [read]:
            out += pump.feed(piece)
    out += pump.finish()
    return render(out), (pump.machine.diagnostics, pump.events_in)


@pytest.mark.parametrize(
    ("make", "reads"),
    [
        *((_forward, reads + _FORWARD_DONE) for reads in _FORWARD.values()),
        *((_reverse, _REVERSE_START + reads + _REVERSE_DONE) for reads in _REVERSE.values()),
        *((_reverse, _CALL_START + reads + _REVERSE_DONE) for reads in _REVERSE_WARM.values()),
    ],
    ids=[f"forward {k}" for k in _FORWARD]
    + [f"reverse {k}" for k in _REVERSE]
    + [f"reverse warm {k}" for k in _REVERSE_WARM],
)
def test_hot_reads_as_the_decoder_reads_them(make: Any, reads: list[bytes]) -> None:
    whole = _run(make, reads, typed=True, bytewise=False, max_event_bytes=1 << 20)
    assert whole[1][1] > 0
    assert whole == _run(make, reads, typed=True, bytewise=True, max_event_bytes=1 << 20)
    assert whole == _run(make, reads, typed=False, bytewise=False, max_event_bytes=1 << 20)


@pytest.mark.parametrize(
    ("make", "reads"), [(_forward, _FORWARD["frames"]), (_reverse, _REVERSE_START + _REVERSE["frames"])]
)
def test_a_hot_read_over_the_event_limit(make: Any, reads: list[bytes]) -> None:
    """A frame of the head larger than the pump's limit ends the stream as the decoder's limit does."""
    limit = max(len(r.split(b"data: ", 1)[1]) - 2 for r in reads) - 1  # the largest data, less a byte
    whole = _run(make, reads, typed=True, bytewise=False, max_event_bytes=limit)
    assert b"upstream_protocol_error" in whole[0]
    assert whole == _run(make, reads, typed=False, bytewise=False, max_event_bytes=limit)


def test_hot_reads_take_the_hot_path() -> None:
    """The reads above that are one frame of the head, or several, do reach feed_frame without
    the decoder."""
    for make, reads, start in (
        (_forward, _FORWARD["frames"], 0),
        (_reverse, _REVERSE_START + _REVERSE["frames"], len(_REVERSE_START)),
        (_forward, [_text("Hel") + _text("lo") + _text("!")], 0),
        (_reverse, [*_REVERSE_START, _delta("Hel", 2) + _delta("lo", 3)], len(_REVERSE_START)),
        (_reverse, _CALL_START + _REVERSE_WARM["fragments"], len(_CALL_START)),
        (_reverse, _CALL_START + _REVERSE_WARM["reasoning"], len(_CALL_START)),
        # once a warm head's frame was read, reads of several such frames, and text again
        (_reverse, _CALL_START + _REVERSE_WARM["two in a read after one"], len(_CALL_START)),
        (_reverse, _CALL_START + _REVERSE_WARM["text, fragments, text again"], len(_CALL_START)),
        (_reverse, _CALL_START + _REVERSE_WARM["reasoning, then fragments"], len(_CALL_START)),
        # a read of several frames of a warm head swaps too, and goes the hot way at once
        (_reverse, _CALL_START + _REVERSE_WARM["two in a read"], len(_CALL_START)),
    ):
        pump, _, _ = make(True, 1 << 20)
        pump._decoder = decoder = _Counting()
        for read in reads:
            pump.feed(read)
        assert decoder.reads == reads[:start]
        assert pump.events_in == sum(read.count(b"\n\n") for read in reads)


class _Counting(SSEDecoder):
    __slots__ = ("reads",)

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self.reads.append(chunk)
        return super().feed(chunk)
