"""Frames read without a decode: the layer of the forward machine between the content writer
(content_writer.py) and the chunk reader (machine.py).

Most frames of a stream are the frame before them but for the delta's text (chunk_frames.py,
``text_frame``). Once one has been decoded, the machine keeps its template, and:

- ``feed_frame`` (machine.py) reads a frame that matches it with a slice instead of a decode;
- ``feed_run`` reads the runs of such frames in a read at once (``text_run``), the frames
  between them one by one: the pump offers it every read of 1 KiB or more that starts where a
  frame starts (translators/pump.py).

``_learn`` keeps a template; a stream learns ``LEARN_TRIES`` in a row at most (a backend with a
nonce in every frame stops costing anything; one whose ``created`` ticks relearns as it ticks).
docs/DESIGN.md measures both paths; tests/translators/forward/test_text_frames.py holds them to
the decode.
"""

from __future__ import annotations

from collections.abc import Callable

from crossfeed.translators import pump
from crossfeed.translators.forward.args_frames import ArgsFrame, args_frame, args_text
from crossfeed.translators.forward.chunk_frames import (
    LEARN_TRIES,
    NO_FRAME,
    SETTLED,
    Choice,
    TextFrame,
    text_frame,
    text_run,
)
from crossfeed.translators.forward.content_writer import ContentWriter
from crossfeed.translators.plain_json import plain
from crossfeed.translators.pump import RunTaken
from crossfeed.translators.sse import Out

_RUN_TRIES = 4  # runs feed_run tries in a read, at most (each splits the read: a bound on its cost)


class FrameRuns(ContentWriter):
    """Methods, and the argument template's state (set in the machine's ``__init__``): slots,
    as the numbering core's attributes are, so the instance dict keeps its 29 names
    (tests/translators/forward/test_machine_layers.py); the text template is the dict's
    ``_text_frame``."""

    __slots__ = ("_args_frame", "_args_left", "_args_served")

    _text_frame: TextFrame | None
    _args_frame: ArgsFrame | None  # a call's argument fragment (args_frames.py), with:
    _args_left: int  # templates it may still learn in a row
    _args_served: int  # fragments the current one has read
    feed_frame: Callable[[bytes], list[Out] | None]  # the chunk reader's method (machine.py)

    def feed_run(self, read: bytes) -> RunTaken | None:
        """For a ``read`` (upstream bytes) that starts where a frame starts: the outputs of the
        frames of it the machine reads, the bytes and the frames they took; None for none (the
        pump then reads them frame by frame). With a text template, the run of frames that match
        it at the read's start (``text_run``) is read at once: most often the whole read. The
        frames after it (or all, without a template) are read one by one (``_read_on``)."""
        out: list[Out] = []
        known = self._text_frame
        if known is None or not self._live:
            return self._read_on(read, out, 0, 0, None)
        raws, texts, size = text_run(read, known)
        if not texts:
            return self._read_on(read, out, 0, 0, known)
        self._take_run(known, raws, texts, out)
        if size == len(read):
            return out, size, len(texts), None
        return self._read_on(read, out, size, len(texts), known)

    def _read_on(self, read: bytes, out: list[Out], size: int, frames: int, tried: TextFrame | None) -> RunTaken | None:
        """``feed_run`` from ``size`` bytes (``frames`` frames) into ``read``, after a run with the
        template ``tried``: the frames one by one with ``feed_frame`` (as the pump would), and
        where one teaches another template (the first one; the content after the reasoning) a
        run of it again, where ``pump.RUN_MIN`` bytes or more are left (a shorter run saves
        nothing), ``_RUN_TRIES`` times a read at most (each try splits the read)."""
        known = self._text_frame
        tries = _RUN_TRIES
        while self._live:
            if known is not None and known is not tried and tries and len(read) - size >= pump.RUN_MIN:
                tried = known
                tries -= 1
                raws, texts, taken = text_run(read, known, size, frames)
                if texts:
                    self._take_run(known, raws, texts, out)
                    size += taken
                    frames += len(texts)
            # The frame's one line ends at the first LF (one byte: memchr, where the two of a
            # blank line take the general search), and a blank line must follow it.
            lf = read.find(b"\n", size)
            if lf < 0 or read[lf + 1 : lf + 2] != b"\n" or read[size : size + 6] != b"data: ":
                break  # not one "data: " line of JSON ending in LF LF: the SSE decoder's matter
            data = read[size + 6 : lf]
            if data == b"[DONE]" or 13 in data:
                break
            more = self.feed_frame(data)
            if more is None:
                break
            out += more
            size = lf + 2
            frames += 1
            if self._text_frame is not known:  # a template learned (or a try spent): the run's text
                known = self._text_frame
                if known is not None and tried is not None and known[:4] == tried[:4]:
                    tried = known  # (the same template, one try less: no run to try again)
        return (out, size, frames, None) if frames else None

    def _take_run(self, known: TextFrame, raws: list[bytes], texts: list[str], out: list[Out]) -> None:
        """The events of a run's ``texts`` (``raws`` their bytes), of ``known``'s kind, into ``out``."""
        self._out = out
        if known[4]:
            for text in texts:
                self._reasoning(text)
        else:
            self._more_texts(raws, texts)

    def _learn(self, data: bytes, choice: Choice, field: str, text: str) -> None:
        """Keep ``data``'s bytes around its ``field``'s text for the frames that follow, when its
        choice has no logprobs and no finish_reason: tried again on a later frame when it fails
        or stops matching, ``LEARN_TRIES`` times in a row, the tries given back by a template
        that served ``SETTLED`` events. A text JSON escapes says nothing about the frame: the
        template stays."""
        if choice.logprobs is not None or choice.finish_reason is not None:
            return
        if not plain(text):
            return
        known = self._text_frame
        seq = self._seq
        left = LEARN_TRIES if known is None or seq - known[8] >= SETTLED else known[5]
        if left:
            new = text_frame(data, field, text, reasoning=field != "content", left=left - 1, at=seq)
            if new is None:  # this frame's text could not be found: the template stays, one try less
                old = known or NO_FRAME
                new = (*old[:5], left - 1, *old[6:8], seq)
            self._text_frame = new

    def _args_fragment(self, data: bytes) -> list[Out] | None:
        """For a frame of the stream's argument template (``_args_frame``, set): the outputs of
        the fragment appended to the call it continues, as ``_tool_fragment`` appends it after a
        decode; None when the frame is not one (then it is decoded). A frame whose call id is
        not its index's call's any more (the index reused for a new call) is decoded too."""
        head, start, tail, end, key, call_id = self._args_frame  # type: ignore[misc]  # (set: the caller checks)
        if data[:start] != head or data[end:] != tail:
            return None
        raw = data[start:end]
        text = args_text(raw) if raw else None
        if text is None:
            return None
        call = self._calls.get(key)
        if call is None or (call_id and call_id != call.call_id and call.args):
            return None
        self._args_served += 1
        out = self._out = []
        self._append_args(call, text)
        return out

    def _learn_args(self, data: bytes, choice: Choice) -> None:
        """Keep ``data``'s bytes around its one tool call's argument fragment for the frames
        that follow (``_args_fragment``), when its choice has no logprobs: ``LEARN_TRIES`` in a
        row at most, given back by a template that read ``SETTLED`` fragments. A frame whose
        fragment cannot be found keeps the template there is, one try less."""
        if choice.logprobs is not None or choice.delta is None:
            return
        calls = choice.delta.tool_calls
        new = args_frame(data, calls[0]) if calls.__class__ is list and calls else None
        self._args_left = (LEARN_TRIES if self._args_served >= SETTLED else self._args_left) - 1
        self._args_served = 0
        if new is not None:
            self._args_frame = new
