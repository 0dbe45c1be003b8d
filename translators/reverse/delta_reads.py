"""A call's and reasoning's deltas read typed: the layer of the reverse machine between its text
runs (text_runs.py) and its event loop (machine.py).

``feed_frame`` (machine.py) decodes a frame that opens with one of these deltas' types
(delta_frames.OTHER_DELTA_PREFIXES) into ``OtherDelta``; ``_other_delta`` writes it as
``_on_args_delta`` and ``_on_other_delta`` would. After a reasoning delta the machine keeps that
delta's part and its frame head (``_rrun``): the next delta of the same part, decoded by the
struct of its kind alone (delta_frames.part_decoders), appends its text and writes the frame,
with no kind lookup, part key or segment check. ``feed_frame`` reads such a delta itself.

``reasoning_frame`` and ``call_frame`` are ``feed_frame`` for a frame whose event line names a
reasoning delta or a call's fragment (``frame_readers``): the pump's reader of a read of one such
frame once its head is the hot one (translators/pump.py ``_swap``), and of each frame of that
name in a read the pump's SSE decoder splits (``Pump._events``). Such a frame then pays for none
of ``feed_frame``'s dispatch (the phase, the text prefix, the other prefixes, a call). A frame
of another shape under that name goes ``feed_frame``'s way (a reasoning delta that starts a
part) or the general way (anything else), as it would have.
"""

from __future__ import annotations

from typing import ClassVar

import orjson

from crossfeed.translators.pump import Readers
from crossfeed.translators.reverse.delta_frames import (
    ARGS_DELTAS,
    FRAME_ERRORS,
    REASONING_DELTAS,
    OtherDelta,
    decode_args_delta,
    decode_other_delta,
    part_decoders,
)
from crossfeed.translators.reverse.stream_state import DELTA_KINDS, SUMMARY_TEXT
from crossfeed.translators.reverse.text_runs import TextRuns
from crossfeed.translators.sse import Out

_dumps = orjson.dumps


class DeltaReads(TextRuns):
    """``_other_delta``, and ``reasoning_frame`` and ``call_frame``: the pump's readers of the
    frames named a reasoning delta or a call's fragment (``frame_readers``)."""

    __slots__ = ()

    frame_readers: ClassVar[Readers | None]

    def call_frame(self, data: bytes) -> list[Out] | None:
        """``feed_frame`` of ``data``, a fragment of a call already opened (only a streaming
        machine has one); None for any other frame (the general way: a fragment held for its
        call, a frame of another shape)."""
        try:
            ev = decode_args_delta(data)
        except FRAME_ERRORS:
            return None
        call = self._calls.get(ev.output_index)
        if call is None:
            return None
        d = ev.delta
        return [self._args(call, d)] if d else []  # (an opened call's chunk took the role chunk)

    def reasoning_frame(self, data: bytes) -> list[Out] | None:
        """``feed_frame`` of ``data``, read first as a delta that continues the reasoning part the
        last one wrote (``_rrun``: kept only while the stream runs, the role chunk sent)."""
        run = self._rrun
        if run is None:
            return self.feed_frame(data)
        try:
            ev = run[0](data)  # (the kept part's kind: another kind fails here and is read below)
        except FRAME_ERRORS:
            return self._other_frame(data)
        d = ev.delta
        if not d:
            return []
        if run[1] == ev.output_index and run[2] == ev.index:
            if self._learning:  # (text_runs.py)
                self._learn(data, d, run[1], run[2], run[0])
            run[3].pieces.append(d)
            return [run[4] + _dumps(d) + self._after]
        return self._other_frame(data)

    def _other_frame(self, data: bytes) -> list[Out] | None:
        """``feed_frame`` of a frame that opens with a call's or a reasoning delta's type."""
        try:
            ev = decode_other_delta(data)
        except FRAME_ERRORS:
            return None
        return self._other_delta(ev)

    def _other_delta(self, ev: OtherDelta) -> list[Out] | None:
        """A call's arguments delta or a reasoning delta, decoded, as ``_on_args_delta`` and
        ``_on_other_delta`` make it; a call not yet opened (its fragments are held) goes the
        general way (None)."""
        d, t, oi = ev.delta, ev.type, ev.output_index
        if t in ARGS_DELTAS:
            call = self._calls.get(oi)
            if call is None:
                return None
            return [self._args(call, d)] if d else []  # (as in call_frame)
        if not d:
            return []
        ci, si = ev.content_index, ev.summary_index
        run = self._rrun  # the last reasoning delta's part
        kind = DELTA_KINDS[t]
        index = si if kind == SUMMARY_TEXT else ci
        if run is not None and run[0] is part_decoders[t] and run[1] == oi and run[2] == index:
            run[3].pieces.append(d)
            return [run[4] + _dumps(d) + self._after]
        self._streamed = True
        key = (kind, oi, index)
        out = [self._reasoning(key, d)]
        head = self._heads.get(self._rfield) if self._wire else None
        if head is not None:  # kept for the deltas that follow (neither changes once made)
            prefix = b'{"type":"' + t.encode() + b'"'
            self._rrun = (part_decoders[t], oi, index, self._parts[key], head, prefix, len(prefix))
        return self._with_role(out) if self._role else out


# The readers of the frames named a reasoning delta or a call's fragment (Pump: the hot head's
# reader, and that of each frame of these names in a read its decoder splits).
DeltaReads.frame_readers = {
    **dict.fromkeys(REASONING_DELTAS, DeltaReads.reasoning_frame),
    **dict.fromkeys(ARGS_DELTAS, DeltaReads.call_frame),
}
DeltaReads.block_readers = {name.encode(): reader for name, reader in DeltaReads.frame_readers.items() if name}
