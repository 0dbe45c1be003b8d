"""Server-sent events: an incremental decoder and the two frame encoders.

The decoder follows the WHATWG event-stream rules on *bytes*: lines end in LF, CR or CRLF (a CR
at the end of one chunk and the LF at the start of the next count once), ``:`` starts a comment,
``data`` lines of one event are joined with ``\\n``, one space after the colon is dropped, and an
empty line dispatches the event. Data stays ``bytes`` so the JSON parser reads it directly and an
invalid UTF-8 sequence is reported by the parser, never half-decoded here.

Interface (shared by every incremental machine in this package)::

    decoder.feed(chunk) -> list[SSEEvent]     0..n complete events
    decoder.finish()    -> list[SSEEvent]     a last event left unterminated at end of stream
"""

from __future__ import annotations

from typing import Final, NamedTuple

from .errors import UpstreamProtocolError

DONE_FRAME: Final = b"data: [DONE]\n\n"
DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


class SSEEvent(NamedTuple):
    event: str | None
    data: bytes


class SSEDecoder:
    __slots__ = ("_tail", "_data", "_event", "_cr", "_max", "_pending")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._tail = b""  # an unterminated line
        self._data: list[bytes] = []
        self._event: str | None = None
        self._cr = False  # the previous chunk ended in CR: drop a leading LF
        self._max = max_event_bytes
        self._pending = 0  # bytes held in _data

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        # Fast path, the common case on the hot loop: nothing pending, no CR, and the chunk holds
        # whole events made of one "data: " line each. One split per chunk, no per-line calls.
        if not self._tail and not self._data and not self._cr and b"\r" not in chunk and chunk[-2:] == b"\n\n":
            out = []
            for block in chunk[:-2].split(b"\n\n"):
                if block[:6] == b"data: " and b"\n" not in block:
                    if len(block) - 6 > self._max:
                        raise UpstreamProtocolError(f"upstream sent an SSE event larger than {self._max} bytes")
                    out.append(SSEEvent(None, block[6:]))
                else:  # comments, event: lines, multi-line data, blank runs: the general rules
                    for line in block.split(b"\n"):
                        self._line(line, out)
                    self._line(b"", out)
            return out
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = tail = lines.pop()
        if len(tail) > self._max:
            raise UpstreamProtocolError(f"upstream sent an SSE line longer than {self._max} bytes")
        out: list[SSEEvent] = []
        for line in lines:
            self._line(line, out)
        return out

    def finish(self) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        if self._tail:
            tail, self._tail = self._tail, b""
            self._line(tail, out)
        self._line(b"", out)
        return out

    def _line(self, line: bytes, out: list[SSEEvent]) -> None:
        if line[:5] == b"data:":
            value = line[6:] if line[5:6] == b" " else line[5:]
            self._pending += len(value)
            if self._pending > self._max:
                raise UpstreamProtocolError(f"upstream sent an SSE event larger than {self._max} bytes")
            self._data.append(value)
        elif not line:
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                out.append(SSEEvent(self._event, data))
                self._data = []
                self._pending = 0
            self._event = None
        elif line[:1] == b":":
            return
        else:
            field, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if field == b"event":
                self._event = value.decode("utf-8", "replace")
            # id and retry carry nothing a translator needs; other fields are ignored by the spec.


def encode_named(event_type: bytes, data: bytes) -> bytes:
    """One Responses frame: ``event: <type>`` then ``data: <json>``."""
    return b"event: " + event_type + b"\ndata: " + data + b"\n\n"


def encode_data(data: bytes) -> bytes:
    """One Chat Completions frame: ``data: <json>`` alone."""
    return b"data: " + data + b"\n\n"
