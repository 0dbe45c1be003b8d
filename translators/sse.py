"""Server-sent events: an incremental decoder, and the renderers of a machine's outputs as frames.

The decoder follows the WHATWG event-stream rules on *bytes*: lines end in LF, CR or CRLF (a CR
at the end of one chunk and the LF at the start of the next count once), ``:`` starts a comment,
``data`` lines of one event are joined with ``\\n``, one space after the colon is dropped, and an
empty line dispatches the event. Data stays ``bytes`` so the JSON parser reads it directly and an
invalid UTF-8 sequence is reported by the parser, never half-decoded here.

Interface (shared by every incremental machine in this package)::

    decoder.feed(chunk) -> list[SSEEvent]     0..n complete events
    decoder.finish()    -> list[SSEEvent]     a last event left unterminated at end of stream

An event is a plain ``(event name or None, data)`` tuple: it is built once per upstream frame,
and a tuple is much cheaper than a NamedTuple to make and to unpack (docs/DESIGN.md).
"""

from __future__ import annotations

from itertools import repeat
from operator import contains, itemgetter
from typing import Any, Final

import orjson

from crossfeed.translators.errors import UpstreamProtocolError

DONE_FRAME: Final = b"data: [DONE]\n\n"
DEFAULT_MAX_EVENT_BYTES: Final = 16 * 1024 * 1024


SSEEvent = tuple[str | None, bytes]
# What a stream machine puts out: an event (or chunk) dict, or in wire mode a frame it rendered
# itself (bytes, already framed for the client's transport; with SSE framing, a run of frames
# may be one bytes). render_* write both.
Out = dict[str, Any] | bytes
_DATA_SEP: Final = b"\n\ndata: "


class SSEDecoder:
    __slots__ = ("_tail", "_data", "_event", "_cr", "_max", "_pending", "idle")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        # Nothing held: the next byte fed starts a line of a new event. An attribute kept by the
        # paths that change what is held (the fast paths change nothing), where a property
        # would cost a call on every read.
        self.idle = True
        self._tail = b""  # an unterminated line
        self._data: list[bytes] = []
        self._event: str | None = None
        self._cr = False  # the previous chunk ended in CR: drop a leading LF
        self._max = max_event_bytes
        self._pending = 0  # bytes held in _data

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        # Fast paths, the common case on the hot loop: no event in progress, and the chunk holds
        # whole events of one "data: " line each (chat), or of "event: " + "data: " (Responses).
        # Then every LF in it belongs to a known place, so a split and an LF count prove the
        # shape with a few C-level scans instead of a call per line. (A byte is looked for as
        # an int, ``13 in chunk``: memchr at once, where ``b"\r" in chunk`` first fails to read
        # its operand as an int, and ``find`` parses its arguments from a tuple.)
        if (
            self.idle
            and 13 not in chunk  # no CR
            and chunk[-2:] == b"\n\n"
            and len(chunk) <= self._max
        ):
            # (Slices compare at about half the cost of startswith/endswith, whose arguments
            # CPython 3.11 parses from a tuple on every call.)
            if chunk[:6] == b"data: ":
                data = chunk[6:-2]
                if 10 not in data:  # one frame: the most common read of all
                    return [(None, data)]
                parts = data.split(_DATA_SEP)
                # No LF inside a frame's data: one memchr over the joined data (bytes.count
                # of one byte walks the chunk a byte at a time, several times the cost).
                if 10 not in b"".join(parts):
                    return [(None, p) for p in parts]
            elif chunk[:7] == b"event: ":
                # One event (the most common read of a Responses stream): ``event: X`` up to the
                # first ``\ndata: ``, no LF after it but the blank line's. partition takes its
                # one argument as it is, where find parses a tuple; a name seen before is looked
                # up by its line (no LF in it), where decoding it took a codec lookup each time.
                head, _, rest = chunk.partition(_DATA_LINE)
                data = rest[:-2]
                if 10 not in data:
                    name = _HEAD_NAMES.get(head)
                    if name is None and 10 not in head:
                        name = _head_name(head)
                    if name is not None:
                        return [(name, data)]
                named = _named_frames(chunk)
                if named is not None:
                    return named
        self.idle = False  # (until the lines are read: a read that raises leaves it so)
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if chunk.find(b"\r") >= 0:
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
        self.idle = not tail and not self._data and self._event is None and not self._cr
        return out

    def finish(self) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        if self._tail:
            tail, self._tail = self._tail, b""
            self._line(tail, out)
        self._line(b"", out)
        self.idle = not self._data and self._event is None and not self._cr
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
                out.append((self._event, data))
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


def _head_name(head: bytes) -> str:
    """The event name of an ``event: X`` line without an LF, kept for the next frame (a stream
    uses a few dozen names; past ``_MAX_NAMES``, or a line over ``_MAX_NAME_BYTES``, is decoded
    each time)."""
    name = head[7:].decode("utf-8", "replace")
    if len(_HEAD_NAMES) < _MAX_NAMES and len(head) <= _MAX_NAME_BYTES:
        _HEAD_NAMES[head] = name
    return name


def _named_frames(chunk: bytes) -> list[SSEEvent] | None:
    """Whole events of exactly ``event: X`` + ``data: Y`` each, or None for the general rules.
    The chunk opens with ``event: `` and ends with a blank line (the caller checked); it is split
    where one event ends and the next one's name starts (``named_events``). The split is of the
    chunk itself, its first block and its last one cut after: the separator cannot meet those
    7 and 2 bytes, and a slice of the whole chunk first would copy it once more (a closing frame
    carries the whole text)."""
    blocks = chunk.split(EVENT_SEP)
    blocks[0] = blocks[0][7:]
    blocks[-1] = blocks[-1][:-2]
    return named_events(blocks)


EVENT_SEP: Final = b"\n\nevent: "  # where one event ends and the next one's name starts


def named_events(blocks: list[bytes]) -> list[SSEEvent] | None:
    """The events of ``blocks``, each an event's lines without its ``event: `` and its blank line,
    when each is exactly ``X\ndata: Y``: neither its name nor its data may hold an LF (another
    line). None when one is not. A name seen before is known to hold none; the data are looked
    at one by one (a join would copy them: a closing frame carries the whole text)."""
    out: list[SSEEvent] = []
    names = _NAMES
    for block in blocks:
        name, sep, data = block.partition(b"\ndata: ")
        if not sep:
            return None
        try:
            text = names[name]
        except KeyError:
            if 10 in name:
                return None
            text = name.decode("utf-8", "replace")
            if len(names) < _MAX_NAMES and len(name) <= _MAX_NAME_BYTES:
                names[name] = text
        out.append((text, data))
    if any(map(contains, map(_DATA, out), _LFS)):
        return None
    return out


_LFS: Final = repeat(10)
_DATA = itemgetter(1)
# Event names as decoded, by their bytes (names without an LF only; a stream uses a few dozen).
_NAMES: dict[bytes, str] = {}
_MAX_NAMES: Final = 512
_MAX_NAME_BYTES: Final = 256  # a longer name is decoded each time, never kept (an upstream chooses them)
# The same names by their whole ``event: X`` line (a read of one event is not split in blocks).
_HEAD_NAMES: dict[bytes, str] = {}
_DATA_LINE: Final = b"\ndata: "


_HEADS: dict[str, bytes] = {}


class Framing:
    """What surrounds an event's JSON on the client's transport, for the frames a machine in wire
    mode renders itself (its per-token delta events). The transport's sink chooses it: SSE puts
    ``event: <type>`` (Responses) or nothing (Chat) and ``data: `` before the JSON and a blank
    line after it; a WebSocket text frame is the JSON alone."""

    __slots__ = ("sse", "data", "end")

    def __init__(self, *, sse: bool) -> None:
        self.sse = sse
        self.data = b"data: " if sse else b""  # before a Chat chunk's JSON
        self.end = b"\n\n" if sse else b""  # after any event's JSON

    def named(self, event_type: str) -> bytes:
        """What goes before a Responses event's JSON."""
        return responses_head(event_type) if self.sse else b""


SSE_FRAMING: Final = Framing(sse=True)
JSON_FRAMING: Final = Framing(sse=False)


def framing_of(wire: bool | Framing) -> Framing | None:
    """A machine's ``wire`` argument: True is SSE framing, False no wire mode at all."""
    if wire is True:
        return SSE_FRAMING
    return wire or None


def responses_head(event_type: str) -> bytes:
    """``event: <type>`` and the start of the ``data:`` line of a Responses frame."""
    head = _HEADS.get(event_type)
    if head is None:
        head = _HEADS[event_type] = b"event: " + event_type.encode() + b"\ndata: "
    return head


def render_responses(events: list[Any]) -> bytes:
    """A machine's outputs as Responses frames: ``event: <type>`` + ``data: <json>`` for each
    event dict (docs/wire-facts.md, Responses framing). An output that is ``bytes`` is a frame the machine rendered
    itself (its wire mode) and goes out as it is."""
    dumps = orjson.dumps
    if len(events) == 1:  # the common case on the per-chunk path
        ev = events[0]
        if ev.__class__ is bytes:
            return ev
        head = _HEADS.get(ev["type"])
        if head is not None:
            return head + dumps(ev) + b"\n\n"
    elif events and events[-1].__class__ is bytes:  # a run's frames (wire mode), all bytes: joined in C
        try:
            return b"".join(events)
        except TypeError:  # an event dict among them
            pass
    parts = []
    for ev in events:
        if ev.__class__ is bytes:
            parts.append(ev)
            continue
        t = ev["type"]
        head = _HEADS.get(t)
        if head is None:
            head = responses_head(t)
        parts.append(head)
        parts.append(dumps(ev))
        parts.append(b"\n\n")
    return b"".join(parts)


def render_chat(chunks: list[Any]) -> bytes:
    """A machine's outputs as Chat Completions frames: ``data: <json>`` only (docs/wire-facts.md, Chat framing);
    ``bytes`` outputs are frames already rendered (wire mode)."""
    if chunks and chunks[-1].__class__ is bytes:  # a run's frames (wire mode), all bytes: joined in C
        try:
            return b"".join(chunks)
        except TypeError:  # a chunk dict among them
            pass
    dumps = orjson.dumps
    return b"".join([c if c.__class__ is bytes else b"data: " + dumps(c) + b"\n\n" for c in chunks])


def render_json(events: list[Any]) -> list[bytes]:
    """A machine's outputs as one JSON document each (a WebSocket text frame per event);
    ``bytes`` outputs are documents already rendered (wire mode with ``JSON_FRAMING``)."""
    if len(events) == 1 and events[0].__class__ is bytes:  # the common case on the per-chunk path
        return events
    dumps = orjson.dumps
    return [ev if ev.__class__ is bytes else dumps(ev) for ev in events]
