"""Bytes in, translated outputs out: SSE decoding, JSON parsing and a stream machine in one.

``Pump`` is what the relay drives and what golden tests drive, so the exact same code turns
upstream bytes into client events in production and in tests. It never raises for anything the
upstream sends: a protocol error (an event that is not JSON, not an object, or too large) ends the
machine with ``fail``. After ``[DONE]`` or the machine's terminal output, further bytes are
ignored, so nothing the upstream sends after its end can leak through.

  pump.feed(chunk)   -> outputs          for every upstream read
  pump.finish()      -> outputs          the upstream closed the connection (EOF)
  pump.fail(code, m) -> outputs          transport failure or timeout, decided by the driver
  pump.cancel(m), pump.steer(m)          the client cancelled or steered the response (WebSocket)

A machine may also offer ``feed_frame(data)``: an event's JSON bytes in, outputs out, or None
when the bytes are not of the shape it decodes itself (they are then parsed and fed as usual).
The forward machine uses it to decode chat chunks into typed structs (chunk_frames.py). And
``feed_run(chunk)``, offered a read of 1 KiB or more (``RUN_MIN``) that starts where a frame
starts: the outputs of the frames at its start that it reads at once, with the bytes and frames
they took, or None (both machines: text frames alike but for their text, the forward
chunk_frames.text_run and the reverse text_runs.delta_run). And ``hot_head``: the SSE bytes of its
most frequent frame up to the JSON's ``{`` (``data: {``; ``event: response.output_text.delta`` and
``data: {``), never an ``error`` event's. A read that is one whole frame of that head, as the
decoder's own fast path would prove it, goes to ``feed_frame`` without the decoder, its list and
its tuple: a paced stream's every read. So does each frame of a read of several such frames too
short for a run (``_hots``: a stream that arrives a few tokens at a time). ``warm_heads``: the
heads of the machine's other per-token frames (reverse: a call's argument and a reasoning
delta), each of one event line and one data line (checked after the hot head, so a text read
pays nothing for them): a read that opens with such a frame and ends where a frame ends makes
its head the hot one (``_swap``) until a read of another warm head's frame, and goes the hot
way at once (one frame, or several of that head alone: ``_hots``). A
machine class's ``frame_readers`` (event name -> function) names the reader of that name's
frames, ``feed_frame``'s stand-in: for the reads of that head while it is hot, and for the
frames of that name in a read the decoder splits (``_events``). Reverse: a reasoning delta's
and a call fragment's skip ``feed_frame``'s dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import repeat
from operator import contains
from types import MethodType
from typing import Any, Protocol

import orjson

from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.sse import DEFAULT_MAX_EVENT_BYTES, Out, SSEDecoder, SSEEvent, named_events

__all__ = ["Machine", "Out", "Pump"]

_DONE = b"[DONE]"
# What a machine's ``feed_run`` took of a read: its outputs, the bytes and the frames they took,
# and the blocks of the frames after them (``event: X`` + ``data: Y``, each without ``event: ``
# and its blank line: sse.named_events) when it split the whole read, else None.
RunTaken = tuple[list[Out], int, int, list[bytes] | None]
# A machine class's readers of the frames of some event names (``frame_readers``): event name ->
# a function of the machine and the frame's JSON bytes, as ``feed_frame``.
Readers = Mapping[str | None, Callable[[Any, bytes], "list[Out] | None"]]


class Machine(Protocol):
    # Read after every upstream event: best a plain attribute (a property costs a call), but
    # read-only here so a machine that wraps another may forward it as a property.
    @property
    def done(self) -> bool: ...
    def feed(self, item: dict[str, Any]) -> list[Out]: ...
    def finish(self, *, clean: bool = True) -> list[Out]: ...
    def fail(self, code: str, message: str) -> list[Out]: ...


class Pump:
    __slots__ = (
        "machine",
        "_decoder",
        "_clean",
        "events_in",
        "_frame",
        "_run",
        "_max",
        "_packed",
        "_hot",
        "_hot_len",
        "_hot_frame",
        "_named",
        "_warm",
        "_sep",
        "_sep_open",
        "_sep_lfs",
    )

    def __init__(
        self, machine: Machine, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, *, typed_frames: bool = True
    ) -> None:
        """``typed_frames=False``: never use the machine's ``feed_frame`` (tests compare both)."""
        self.machine = machine
        self._decoder = SSEDecoder(max_event_bytes)
        self._clean = False  # [DONE] seen
        self.events_in = 0
        self._frame: Callable[[bytes], list[Out] | None] | None = (
            getattr(machine, "feed_frame", None) if typed_frames else None
        )
        self._run: Callable[[bytes], RunTaken | None] | None = (
            getattr(machine, "feed_run", None) if typed_frames else None
        )
        self._max = max_event_bytes
        self._packed = getattr(machine, "packed", 0)  # (a later leg's pump may share the machine)
        # The SSE head of the machine's most frequent frame up to its JSON's ``{`` (``hot_head``):
        # a read of one such frame goes to feed_frame without the decoder (feed).
        # (None: no read is hot; a slice never equals it.)
        frame = self._frame
        self._hot_frame: Callable[[bytes], list[Out] | None] = frame or _no_frame
        self._warm: tuple[bytes, ...] = getattr(machine, "warm_heads", ()) if frame is not None else ()
        self._heat(getattr(machine, "hot_head", None) if frame is not None else None)
        # The event names whose frames have a reader of their own (the machine class's
        # ``frame_readers``, event name -> function of the machine and the data); None: every
        # frame goes to feed_frame.
        self._named: Readers | None = getattr(machine, "frame_readers", None) if self._warm else None

    def _heat(self, head: bytes | None) -> None:
        """``head`` is the hot one from now on (None: no read is hot; a slice never equals it)."""
        self._hot = head
        self._hot_len = len(head or b"")
        # Between two such frames in one read: LF LF and the next one's head up to its ``{``.
        self._sep = b"\n\n" + (head or b"{")[:-1]
        self._sep_open = self._sep + b"{"
        self._sep_lfs = self._sep.count(b"\n")

    def _swap(self, head: bytes) -> None:
        """A read that opens with a warm head's frame: that head becomes the hot one and the hot
        one warm. A stream of a call's arguments or of reasoning then pays no failed compare with
        the text head per read, and its reads of several frames go the hot way too (``_hots``),
        past the SSE decoder. A stream that turns back to text swaps again, once per turn (a read
        that mixes the kinds swaps to the head it opens with and goes to the decoder)."""
        hot = self._hot
        self._warm = tuple(h for h in self._warm if h != head) + ((hot,) if hot is not None else ())
        self._heat(head)
        named = self._named  # this head's reader, else feed_frame
        reader = named.get(head[7:-8].decode("utf-8", "replace")) if named is not None else None
        self._hot_frame = MethodType(reader, self.machine) if reader is not None else self._frame or _no_frame

    @property
    def packed(self) -> int:
        """Outputs this pump's reads put out inside another output: a machine that writes a run's
        SSE frames as one bytes counts the others (``len`` of the outputs misses them)."""
        return getattr(self.machine, "packed", 0) - self._packed

    @property
    def done(self) -> bool:
        return self._clean or self.machine.done

    def feed(self, chunk: bytes) -> list[Out]:
        machine = self.machine
        if self._clean or machine.done:
            return []
        run = self._run
        # A read of several frames may open with a run the machine reads at once (feed_run); a
        # short read (one frame: paced tokens; or a few) goes the usual way: a run costs more
        # set-up than so few frames' decodes save, and the length is known without a scan.
        if run is not None and RUN_MIN <= len(chunk) <= self._max and self._decoder.idle:
            taken = run(chunk)
            if taken is not None:
                ran, size, frames, rest = taken
                self.events_in += frames
                if size == len(chunk) or machine.done:
                    return ran
                if rest is not None and not any(map(contains, rest, _CRS)):
                    events = named_events(rest)  # the frames after the run, already split
                    if events is not None:
                        return self._events(events, ran)
                self._run = None  # the rest of the read: the usual way, once (Pump's own feed:
                try:  # a subclass that taps each read has seen this one)
                    return ran + Pump.feed(self, chunk[size:])
                finally:
                    self._run = run
        hot = self._hot_len
        try:
            if (
                chunk[:hot] == self._hot
                and chunk[-2:] == b"\n\n"
                and 13 not in chunk  # (as the decoder's own fast path: no CR, nothing held, not too long)
                and self._decoder.idle
                and len(chunk) <= self._max
            ):
                # One frame of the machine's most frequent kind per read (paced tokens): what the
                # decoder would find, one event of this head whose data is the rest without the
                # blank line, when the rest holds no LF. Its name is not ``error``, its data an
                # object (or not JSON): the checks below on either have nothing to decide.
                data = chunk[hot - 1 : -2]
                if 10 not in data:
                    self.events_in += 1
                    framed = self._hot_frame(data)
                    return framed if framed is not None else machine.feed(_object(data))
                if (hots := self._hots(data)) is not None:
                    return hots
            elif (
                self._warm
                and chunk.startswith(self._warm)
                and chunk[-2:] == b"\n\n"
                and 13 not in chunk
                and self._decoder.idle
                and len(chunk) <= self._max
            ):  # frames of another per-token kind: as the hot one, its head is an event line
                at = chunk.index(b"\ndata: ") + 8
                data = chunk[at - 1 : -2]
                self._swap(chunk[:at])
                if 10 not in data:
                    self.events_in += 1
                    framed = self._hot_frame(data)
                    return framed if framed is not None else machine.feed(_object(data))
                if (hots := self._hots(data)) is not None:  # several frames, of that head alone
                    return hots
            events = self._decoder.feed(chunk)
            if len(events) == 1:  # the common case: one frame per read
                event, data = events[0]
                if data != _DONE:
                    self.events_in += 1
                    frame = self._frame
                    if frame is not None and event != "error":
                        framed = frame(data)
                        if framed is not None:
                            return framed
                    try:
                        obj = _loads(data)
                    except _JSONDecodeError:
                        raise UpstreamProtocolError(_NOT_JSON) from None
                    return machine.feed(obj if obj.__class__ is dict and event != "error" else _shape(event, obj))
        except UpstreamProtocolError as exc:
            return machine.fail("upstream_protocol_error", exc.message)
        return self._events(events, [])

    def _hots(self, data: bytes) -> list[Out] | None:
        """A read of several whole frames of the hot head, ``data`` from the first one's ``{`` to
        the last one's end without its blank line: each frame's JSON to ``feed_frame`` in turn,
        what the decoder would find, without its list of tuples (the reads of a stream that
        arrives a few tokens at a time, too short for a run). None when the read holds anything
        else: a frame of another head (``[DONE]``, another event) or a data line broken in two."""
        pieces = data.split(self._sep)
        n = len(pieces) - 1
        # Every line break is one of a separator's, and every separator opens an object.
        if data.count(b"\n") != n * self._sep_lfs or data.count(self._sep_open) != n:
            return None
        machine = self.machine
        frame = self._hot_frame
        out: list[Out] = []
        try:
            for piece in pieces:
                self.events_in += 1
                more = frame(piece)
                out += more if more is not None else machine.feed(_object(piece))
                if machine.done:
                    break
        except UpstreamProtocolError as exc:
            out += machine.fail("upstream_protocol_error", exc.message)
        return out

    def _events(self, events: list[SSEEvent], out: list[Out]) -> list[Out]:
        """The machine's outputs of ``events`` (whole frames of a read), after ``out``."""
        machine = self.machine
        feed = machine.feed
        frame = self._frame
        named = self._named
        try:
            for event, data in events:
                if data == _DONE:
                    self._clean = True
                    out += machine.finish(clean=True)
                    return out
                self.events_in += 1
                if frame is not None and event != "error":
                    # the frame's own reader, if its name has one (frame_readers)
                    more = named[event](machine, data) if named is not None and event in named else frame(data)
                    if more is not None:
                        out += more
                        if machine.done:
                            return out
                        continue
                # _parse inlined for the common shape: this loop runs per upstream frame.
                try:
                    obj = _loads(data)
                except _JSONDecodeError:
                    raise UpstreamProtocolError(_NOT_JSON) from None
                out += feed(obj if obj.__class__ is dict and event != "error" else _shape(event, obj))
                if machine.done:
                    return out
        except UpstreamProtocolError as exc:
            out += machine.fail("upstream_protocol_error", exc.message)
        return out

    def finish(self) -> list[Out]:
        """The upstream closed the connection."""
        machine = self.machine
        if self._clean or machine.done:
            return []
        out: list[Out] = []
        try:
            for event, data in self._decoder.finish():
                if data == _DONE:
                    self._clean = True
                    return out + machine.finish(clean=True)
                self.events_in += 1
                out += machine.feed(_parse(event, data))
                if machine.done:
                    return out
        except UpstreamProtocolError as exc:
            return out + machine.fail("upstream_protocol_error", exc.message)
        return out + machine.finish(clean=False)

    def fail(self, code: str, message: str) -> list[Out]:
        if self._clean or self.machine.done:
            return []
        return self.machine.fail(code, message)

    @property
    def steerable(self) -> bool:
        """The machine may end here for steering input (the forward machine's ``steerable``)."""
        return not self._clean and bool(getattr(self.machine, "steerable", False))

    def steer(self, message: str) -> list[Out]:
        """End for steering input: the machine's ``steer`` (``response.incomplete``, ``steered``);
        one without it (never asked: it is not ``steerable``) fails."""
        if self._clean or self.machine.done:
            return []
        steer = getattr(self.machine, "steer", None)
        return steer() if steer is not None else self.machine.fail("steered", message)

    def cancel(self, message: str) -> list[Out]:
        """End as cancelled: the machine's ``cancel`` (the Responses ones), else its ``fail``."""
        if self._clean or self.machine.done:
            return []
        cancel = getattr(self.machine, "cancel", None)
        return cancel(message) if cancel is not None else self.machine.fail("cancelled", message)


_loads = orjson.loads
_CRS = repeat(13)
# The shortest read offered to ``feed_run``: about four text frames of either direction. The
# machines' ``feed_run`` tries a run further into a read only where as many bytes are left.
RUN_MIN = 1024
_JSONDecodeError = orjson.JSONDecodeError
_NOT_JSON = "the upstream sent an event that is not valid JSON"


def _no_frame(data: bytes) -> None:
    """The hot path's ``feed_frame`` when the machine has none (the path is then never taken)."""


def _object(data: bytes) -> Any:
    """An event's data parsed: the hot read's when ``feed_frame`` declines it, and ``_parse``'s
    (the loops that run per frame have it inlined)."""
    try:
        return _loads(data)
    except _JSONDecodeError:
        raise UpstreamProtocolError(_NOT_JSON) from None


def _parse(event: str | None, data: bytes) -> dict[str, Any]:
    return _shape(event, _object(data))


def _shape(event: str | None, obj: Any) -> dict[str, Any]:
    """A parsed event that is not a plain object, or that came as ``event: error``."""
    if not isinstance(obj, dict):
        raise UpstreamProtocolError("the upstream sent an event that is not a JSON object")
    if event == "error" and "error" not in obj and "type" not in obj:
        obj = {"error": obj}  # Groq: `event: error` whose data lacks the wrapper
    return obj
