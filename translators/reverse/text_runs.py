"""Deltas read without a decode: the layer of the reverse machine between its call stream
(tool_calls.py) and its event loop (machine.py).

A Responses backend writes every delta of a part the same way: a message's text, a reasoning
item's summary or text. Once the machine has read the second delta of a part (``feed_frame``
the run of a text part: machine.py; ``reasoning_frame`` a reasoning part's: delta_reads.py), it
keeps the frame's bytes around its two holes (delta_runs.py ``delta_template``), and
``feed_run`` reads each run of such frames in a read at once (``delta_run``), the frames between
them one by one: the pump offers it every read of 1 KiB or more that starts where a frame
starts (translators/pump.py). A backend that writes a nonce in every delta (OpenAI's
``obfuscation``) matches no template: a stream learns ``LEARN_TRIES`` in a row at most, and a
template that served ``SETTLED`` frames gives the tries back.

The chunk a run writes for each frame is the part's chunk frame (content, or the reasoning
field) around the text's JSON string, which for a plain text is its bytes between quotes.
tests/translators/reverse/test_text_runs.py holds the runs to the decode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import orjson

from crossfeed.translators import pump
from crossfeed.translators.pump import RunTaken
from crossfeed.translators.reverse.delta_frames import PartDelta, part_decoders
from crossfeed.translators.reverse.delta_runs import TEXT_HEAD, DeltaTemplate, delta_run, delta_template, frame_blocks
from crossfeed.translators.reverse.event_frames import (
    CONFIRMED,
    TERMINAL,
    TEXT_CLOSINGS,
    closing_event,
    restored,
    spliced,
    text_holder,
)
from crossfeed.translators.reverse.stream_state import Part
from crossfeed.translators.reverse.tool_calls import CallStream
from crossfeed.translators.sse import Out

_dumps = orjson.dumps
_loads = orjson.loads


# The text part a run continues: (output_index, content_index, part, the content frame's head,
# the head and a quote, a quote and what follows the text, the latter two joined: between two).
TextRun = tuple[int, int, Part, bytes, bytes, bytes, bytes]
# The event lines of the deltas a template is learned from (a message's text, a reasoning part's),
# as a block starts (frame_blocks: without ``event: ``) and as a read does.
_LEARNED: Final = frozenset([TEXT_HEAD[7:-7], *(name.encode() for name in part_decoders)])
_DELTA_BLOCKS: Final = tuple(name + b"\ndata: " for name in _LEARNED)
_DELTA_HEADS: Final = tuple(b"event: " + block for block in _DELTA_BLOCKS)
_KIND_HEADS: Final = {kind: b"event: " + name.encode() + b"\ndata: " for name, kind in part_decoders.items()}
_RUN_TRIES: Final = 4  # runs feed_run tries in a read, at most (each compares the frames left)
LEARN_TRIES: Final = 4  # templates a stream learns in a row, none of them serving SETTLED frames
SETTLED: Final = 16
# The content a stream has sent, in characters, from which its closing frames are decoded without
# their text (closing_frame_event): about where decoding the text four times (some five
# instructions a byte each) costs what finding and cutting it does (some 250 bytecodes a frame).
_SPLICED_MIN: Final = 2048


class TextRuns(CallStream):
    """``feed_run`` and the template it reads with; the machine (machine.py) learns it."""

    __slots__ = ("_template", "_learning", "_tries", "_served", "_run", "_next", "_said", "packed")

    done: bool  # the event loop's (machine.py)
    feed_frame: Callable[[bytes], list[Out] | None]
    feed: Callable[[dict[str, Any]], list[Out]]  # the event loop's (machine.py)
    # event line (bytes) -> the reader of its frames, as ``frame_readers`` (delta_reads.py)
    block_readers: ClassVar[Mapping[bytes, Callable[[Any, bytes], list[Out] | None]]] = {}

    def _init_runs(self) -> None:
        self._template: DeltaTemplate | None = None
        # feed_frame learns from its next text delta (read once a delta on its hot path): set
        # by feed_run, so a stream the pump never offers a run (paced tokens) learns nothing.
        self._learning = False
        self._tries = LEARN_TRIES
        self._served = 0
        # feed_frame's last text part and the content frame around a text (machine.py, _new_run)
        self._run: TextRun | None = None
        self._next = -1  # the number the next run's first frame likely holds (delta_run's guess)
        # The run's part, its text and the text's JSON string, for its closing frames
        # (closing_frame_event)
        self._said: tuple[Part, str, bytes] | None = None
        self.packed = 0  # chunks put out inside another output (an SSE run's, one bytes): Pump.packed

    def closing_frame_event(self, data: bytes) -> dict[str, Any] | None:
        """``closing_event`` of ``data``, a closing frame's JSON, or ``CONFIRMED`` for a ``*.done``
        frame of the part the last run continued whose text is the streamed one: its handler
        would send nothing and keep nothing (``text_holder``), so no handler runs. A text of
        ``_SPLICED_MIN`` characters or more is not decoded again (event_frames.spliced; a shorter
        text costs less to decode than to find and cut)."""
        run = self._run
        if run is None:
            return closing_event(data)
        part = run[2]
        if self._content_len >= _SPLICED_MIN and data.startswith(TEXT_CLOSINGS):
            said = self._said
            if said is None or said[0] is not part or len(part.pieces) != 1 or part.pieces[0] is not said[1]:
                text = part.pieces[0] if len(part.pieces) == 1 else "".join(part.pieces)
                part.pieces = [text]
                said = self._said = (part, text, _dumps(text))
            cut = spliced(data, said[2])
            if cut is not None:
                ev = closing_event(cut)
                if ev is not None and restored(ev, run[0], run[1], said[1]):
                    return ev if ev["type"] in TERMINAL else CONFIRMED
        ev = closing_event(data)
        if ev is None or ev["type"] in TERMINAL:
            return ev
        holder = text_holder(ev, run[0], run[1])
        if holder is None:
            return ev
        pieces = part.pieces
        if len(pieces) != 1:  # (as the handler keeps them: joined once)
            part.pieces = pieces = ["".join(pieces)]
        return CONFIRMED if holder.get("text") == pieces[0] else ev

    def _learn(
        self, data: bytes, text: str, oi: int, ci: int, kind: Callable[[bytes], PartDelta] | None = None
    ) -> None:
        """Keep the template of ``data``, a delta ``feed_frame`` (or ``reasoning_frame``) read
        into the part it continues as ``text``: a message's text (``kind`` None) or a reasoning
        part's (``kind``: its deltas' decoder, delta_frames.part_decoders). One try of
        ``LEARN_TRIES``."""
        self._learning = False
        self._tries -= 1
        self._served = 0
        self._template = delta_template(data, text, oi, ci, TEXT_HEAD if kind is None else _KIND_HEADS[kind], kind)

    def _relearn(self) -> None:
        """The template matched no frame where a delta starts: learned again, tries left."""
        self._template = None
        self._learning = self._tries > 0

    def _parsed(self, data: bytes) -> list[Out] | None:
        """``feed`` of ``data`` parsed, as the pump reads a frame no reader takes, when it is a
        JSON object; None when not (the pump's matter: its error, or its shaping of a value)."""
        try:
            obj = _loads(data)
        except orjson.JSONDecodeError:
            return None
        return self.feed(obj) if obj.__class__ is dict else None

    def feed_run(self, read: bytes) -> RunTaken | None:
        """For a ``read`` (upstream bytes) that starts where a frame starts: the outputs of the
        frames the machine reads in it, the bytes and the frames they took, and, when the read
        ends where a frame ends, the blocks of the frames after them (the pump reads those
        without splitting the read again); None for none (the pump then reads them the usual
        way). The read is cut into its frames once (``frame_blocks``). Its frames of one event
        line and one data line are read one by one, as the pump would read them (a frame's
        reader, else ``feed_frame``, else ``feed`` of its parse), and where the machine has a
        template (the second delta of a part teaches it: a message's text or a reasoning part's)
        the run of frames that match it is read at once (``delta_run``). A delta after a run that
        is not its template's (the text after the reasoning) is learned again, and a run tried
        again where ``pump.RUN_MIN`` bytes or more are left (a shorter run saves nothing),
        ``_RUN_TRIES`` times a read at most."""
        tpl = self._template
        if tpl is None:
            if not self._tries:
                return None
        elif read[: len(tpl.lead)] != tpl.lead:
            if not read.startswith(_DELTA_HEADS):  # no delta at the start (the closing frames): no search
                return None
            self._relearn()  # a delta the template does not match: learned from this read's
            tpl = None
            if not self._tries:
                return None
        blocks, whole = frame_blocks(read)
        if not blocks:
            return None
        out: list[Out] = []
        size = frames = 0
        if tpl is not None:  # the read opens with the template's lead: its run, most often the whole read
            size, frames = self._delta_run(blocks, 0, read, 0, tpl, out)
            if frames == len(blocks):
                return out, size, frames, None
        return self._read_on(read, blocks, whole, out, size, frames, tpl)

    def _read_on(
        self,
        read: bytes,
        blocks: list[bytes],
        whole: bool,
        out: list[Out],
        size: int,
        frames: int,
        tried: DeltaTemplate | None,
    ) -> RunTaken | None:
        """``feed_run`` from ``blocks[frames]`` (``size`` bytes into ``read``), after a run with
        the template ``tried`` (None: none tried): the frames one by one, and the runs of the
        templates they teach where ``pump.RUN_MIN`` bytes or more are left."""
        count = len(blocks)
        readers = self.block_readers  # a call's or a reasoning delta's frame: its reader
        tpl = self._template
        tries = _RUN_TRIES if tried is None else _RUN_TRIES - 1
        while frames < count and not self.done:
            if tpl is not None and tpl is not tried and tries and len(read) - size >= pump.RUN_MIN:
                tried = tpl
                tries -= 1
                taken, ran = self._delta_run(blocks, frames, read, size, tpl, out)
                size += taken
                frames += ran
                if frames == count:
                    break
                tpl = self._template  # (None when the frame after the run made it learn again)
            block = blocks[frames]
            name, sep, data = block.partition(b"\ndata: ")
            if not sep or name == b"error" or 10 in name or 13 in name or 10 in data or 13 in data:
                break  # not one event line and one data line: the SSE decoder's matter
            if name in _LEARNED and (tpl is None or block[: tpl.ll] != tpl.head):
                self._learning = self._tries > 0  # a delta of another part: the part's next one teaches
            more = readers[name](self, data) if name in readers else self.feed_frame(data)
            if more is None:
                more = self._parsed(data)
                if more is None:
                    break
            out += more
            size += len(block) + 9
            frames += 1
            tpl = self._template
        if whole and frames < count:
            return out, size, frames, blocks[frames:] if frames else blocks
        return (out, size, frames, None) if frames else None

    def _delta_run(
        self, blocks: list[bytes], start: int, read: bytes, at: int, tpl: DeltaTemplate, out: list[Out]
    ) -> tuple[int, int]:
        """The run of ``tpl``'s frames from ``blocks[start]`` (``at`` bytes into ``read``), read
        into the part the machine's last delta continued when it is the template's: its chunks
        appended to ``out``; the bytes and the frames it took, and how many frames were the
        template's, plain or not (``delta_run``; none when the part is not the template's)."""
        if tpl.kind is None:  # a message's text: feed_frame's run (machine.py)
            cur = self._run
            if cur is None or cur[0] != tpl.oi or cur[1] != tpl.ci or self._last_msg != tpl.oi:
                return self._after_run(blocks, start, 0, 0)
            part, opened, closed, between = cur[2], cur[4], cur[5], cur[6]
        else:  # a reasoning part's: delta_reads' (_rrun)
            rrun = self._rrun
            if rrun is None or rrun[0] is not tpl.kind or rrun[1] != tpl.oi or rrun[2] != tpl.ci:
                return self._after_run(blocks, start, 0, 0)
            part, opened, closed = rrun[3], rrun[4] + b'"', b'"' + self._after
            between = closed + opened
        raws, text, taken, first, matched = delta_run(blocks, start, read, at, tpl, self._next)
        if not raws:
            return self._after_run(blocks, start, 0, matched)
        part.pieces.append(text)
        if tpl.kind is None:
            self._content_len += len(text)
        self._next = first + len(raws) if first >= 0 else -1
        # The part's frame around each text's JSON string: its bytes in quotes. SSE frames
        # follow one another: the run's are one output (``packed`` counts the others), joined
        # once: [opened, raw, between, raw, ..., closed].
        if self._framing.sse:
            parts = [between] * (2 * len(raws) + 1)
            parts[1::2] = raws
            parts[0] = opened
            parts[-1] = closed
            out.append(b"".join(parts))
            self.packed += len(raws) - 1
        else:
            frame = b"%s%%s%s" % (opened.replace(b"%", b"%%"), closed.replace(b"%", b"%%"))
            out += map(frame.__mod__, raws)
        self._served += len(raws)
        if self._served >= SETTLED:
            self._tries = LEARN_TRIES
        if start + len(raws) < len(blocks):  # (a run to the read's end: nothing after it)
            self._after_run(blocks, start + len(raws), len(raws), matched)
        return taken, len(raws)

    def _after_run(self, blocks: list[bytes], at: int, ran: int, matched: int) -> tuple[int, int]:
        """After a run of ``ran`` frames (``matched`` of them the template's, plain or not) that
        ends at ``blocks[at]``: a delta there the template does not match (another part's, a
        nonce a frame) is learned again, one try less; one it matches around a text that is not
        plain keeps it. Nothing taken: (0, 0)."""
        if matched == ran and at < len(blocks) and blocks[at].startswith(_DELTA_BLOCKS):
            self._relearn()
        return 0, 0
