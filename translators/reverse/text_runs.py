"""Text deltas read without a decode: the layer of the reverse machine between its call stream
(tool_calls.py) and its event loop (machine.py).

A Responses backend writes every text delta of a message the same way: the same event line, the
same ``item_id``, indexes and key order; only the text and ``sequence_number`` change, and the
number rises by one a frame. Once the machine has decoded such a frame (``feed_frame``, the run
of a text part: machine.py), it keeps the frame's bytes around its two holes
(``delta_template``), and ``feed_run`` reads the run of frames that opens a read at once
(``delta_run``): the pump offers it every read of 1 KiB or more that starts where a frame
starts (translators/pump.py). A backend that writes a nonce in every delta (OpenAI's
``obfuscation``) matches no template: a stream learns ``LEARN_TRIES`` in a row at most, and a
template that served ``SETTLED`` frames gives the tries back.

Each frame a run takes is one the typed decode would have read to the same text: the template's
bytes around a plain text (translators/plain_json.py) and a number. The chunk it writes is the
part's content frame around the text's JSON string, which for a plain text is its bytes between
quotes. tests/translators/reverse/test_text_runs.py holds the run to the decode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any, ClassVar, Final

import orjson

from crossfeed.translators.plain_json import plain_bytes, plain_texts
from crossfeed.translators.pump import RunTaken
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
from crossfeed.translators.run_frames import frames
from crossfeed.translators.run_frames import numbers as written
from crossfeed.translators.sse import EVENT_SEP, Out

_dumps = orjson.dumps
_loads = orjson.loads


class DeltaTemplate:
    """A text delta frame's bytes around its holes, the text and the number (``delta_template``)."""

    __slots__ = ("lead", "order", "mid", "tail", "close", "oi", "ci", "head", "edge", "ll", "lm", "lt", "glue", "cuts")

    def __init__(self, lead: bytes, order: int, mid: bytes, tail: bytes, oi: int, ci: int, edge: bytes) -> None:
        self.lead = lead  # the bytes up to the first hole (the event line and the data line's start)
        self.order = order  # the holes in the frame (NO_NUMBER: the text alone)
        self.mid = mid  # between the holes
        self.tail = tail  # after the last hole
        self.close = tail + b"\n\n"  # ... and the blank line
        self.oi, self.ci = oi, ci  # the text part's output_index and content_index
        self.head = lead[7:]  # a block's start (frame_blocks: without ``event: ``)
        self.edge = edge  # the byte of ``mid`` next to the number (not a digit: where it ends)
        self.ll, self.lm, self.lt = len(self.head), len(mid), len(tail)
        self.glue = self.close + lead  # between two frames
        self.cuts: dict[int, Callable[[bytes], bytes]] = {}  # a block's text, by its number's width (cut)

    def cut(self, width: int) -> Callable[[bytes], bytes]:
        """What takes the text of a block whose number has ``width`` digits (made once a width)."""
        got = self.cuts.get(width)
        if got is None:
            if self.order == NUMBER_FIRST:
                got = itemgetter(slice(self.ll + width + self.lm, -self.lt))
            else:
                got = itemgetter(slice(self.ll, -(self.lm + width + self.lt)))
            self.cuts[width] = got
        return got


# The text part a run continues: (output_index, content_index, part, the content frame's head,
# the head and a quote, a quote and what follows the text, the latter two joined: between two).
TextRun = tuple[int, int, Part, bytes, bytes, bytes, bytes]
NO_NUMBER, NUMBER_FIRST, TEXT_FIRST = 0, 1, 2

_EVENT: Final = b"response.output_text.delta"
_NAME: Final = _EVENT + b"\ndata: "  # a text delta's block (frame_blocks)
_HEAD: Final = b"event: " + _NAME
_DELTA: Final = b'"delta":"'
_NUMBER: Final = b'"sequence_number":'
LEARN_TRIES: Final = 4  # templates a stream learns in a row, none of them serving SETTLED frames
SETTLED: Final = 16
_DIGITS_MAX: Final = 18  # the longest number a run reads (int() refuses thousands of digits)
# The content a stream has sent, in characters, from which its closing frames are decoded without
# their text (closing_frame_event): about where decoding the text four times (some five
# instructions a byte each) costs what finding and cutting it does (some 250 bytecodes a frame).
_SPLICED_MIN: Final = 2048


def delta_template(data: bytes, text: str, oi: int, ci: int) -> DeltaTemplate | None:
    """The template of ``data``, a text delta frame's JSON that decoded to ``text`` (plain,
    non-empty) at ``(oi, ci)``; None when the text or the number cannot be found unambiguously
    (a key twice, a text written with escapes, whitespace around a colon, a number that is not
    a plain decimal)."""
    raw = text.encode()
    if data.count(b'"delta"') != 1 or not plain_bytes(raw):
        return None
    start = data.find(_DELTA) + len(_DELTA)
    end = start + len(raw)
    if start < len(_DELTA) or data[start:end] != raw or data[end : end + 1] != b'"':
        return None
    numbers = data.count(b'"sequence_number"')
    if numbers == 0:
        return DeltaTemplate(_HEAD + data[:start], NO_NUMBER, b"", data[end:], oi, ci, b"")
    at = data.find(_NUMBER) + len(_NUMBER)
    if numbers != 1 or at < len(_NUMBER):
        return None
    stop = at
    while data[stop : stop + 1].isdigit():
        stop += 1
    digits = data[at:stop]
    if not digits or len(digits) > _DIGITS_MAX or b"%d" % int(digits) != digits:
        return None
    if at < start:
        mid = data[stop:start]
        return DeltaTemplate(_HEAD + data[:at], NUMBER_FIRST, mid, data[end:], oi, ci, mid[:1])
    mid = data[end:at]
    return DeltaTemplate(_HEAD + data[:start], TEXT_FIRST, mid, data[stop:], oi, ci, mid[-1:])


def frame_blocks(read: bytes) -> tuple[list[bytes], bool]:
    """The frames of ``read`` (upstream bytes that start where a frame starts), each without its
    ``event: `` and its blank line: ``<name>\\ndata: <json>`` for a frame of one event line and
    one data line. A frame takes ``len(block) + 9`` bytes. And whether the read ends where a
    frame ends: else its last piece, not whole yet, is left out.

    The read is cut in one split, at ``event: `` after a blank line (a needle of 9 bytes costs
    about one instruction a byte, LF LF four), and the frames after the run go on as they are
    (``feed_run``'s rest) rather than be split again, and a closing frame carries the whole
    text or the whole Response. A piece may hold more than a frame (a comment, a frame of
    another shape); none such is a frame of the template (``delta_run`` compares every frame it
    takes with the read), nor one ``named_events`` reads (its data holds an LF)."""
    if read[:7] != b"event: ":
        return [], False
    blocks = read.split(EVENT_SEP)  # (the separator cannot meet the first 7 bytes nor the last 2)
    blocks[0] = blocks[0][7:]
    if read[-2:] == b"\n\n":
        blocks[-1] = blocks[-1][:-2]
        return blocks, True
    blocks.pop()
    return blocks, False


def delta_run(
    blocks: list[bytes], start: int, read: bytes, at: int, tpl: DeltaTemplate, guess: int
) -> tuple[list[bytes], str, int, int, int]:
    """The frames of ``blocks`` (``frame_blocks`` of ``read``) from ``start`` on, ``at`` bytes
    into the read, that are ``tpl`` around a plain non-empty text and a number: their texts'
    bytes, the texts joined, the bytes the frames take, the number of the first (-1 for none)
    and how many frames were the template's, plain or not. The first frame that is not ends
    the run.

    The frames at the end that are not the template (the frames after the run) are left out,
    each other one's text is taken at the template's offsets (the numbers rise by one a frame:
    the offsets move where they gain a digit), and the frames those texts and numbers make are
    joined (the list of their parts built by slice assignment, no loop) and compared with the
    read in one go. The numbers are not read but written (``run_frames.numbers``): the comparison
    holds each one to the JSON integer, one more than the one before, that the decode would
    skip. The first is ``guess`` (one more than the last run's last) when the first frame holds
    it, else read from the frame."""
    head, tail, ll, lt = tpl.head, tpl.tail, tpl.ll, tpl.lt
    stop = len(blocks)
    while stop > start and (blocks[stop - 1][:ll] != head or blocks[stop - 1][-lt:] != tail):
        stop -= 1  # the frames after the run (the closing ones, another item's...)
    if stop == start:
        return [], "", 0, -1, 0
    run = blocks[start:stop] if start or stop < len(blocks) else blocks
    numbers: list[bytes] = []
    first = -1
    if tpl.order == NO_NUMBER:
        raws = list(map(itemgetter(slice(ll, -lt)), run))
    else:
        if guess >= 0:
            numbers = written(guess, len(run))
            first = guess if _holds(run[0], tpl, numbers[0]) else -1
        if first < 0:
            first = _number(run[0], tpl)
            numbers = written(first, len(run)) if first >= 0 else []
        if first < 0:
            raws = []
        elif first + len(run) <= 10 ** len(numbers[0]):  # the numbers have as many digits: one cut
            raws = list(map(tpl.cuts.get(len(numbers[0])) or tpl.cut(len(numbers[0])), run))
        else:
            raws = _numbered(run, tpl, first, numbers)
    expected = _frames(tpl, raws, numbers)
    if expected == read or read.startswith(expected, at):  # (a whole read: one compare, no arguments)
        size = len(expected)
    else:
        size = kept = 0  # the run ends at the first frame that is not the template's
        for k, raw in enumerate(raws):
            frame = _frames(tpl, [raw], numbers[k : k + 1])
            if not read.startswith(frame, at + size):
                break
            size += len(frame)
            kept += 1
        del raws[kept:]
    n = len(raws)
    text = _texts(raws)
    if len(raws) < n:  # the frames from the first text that is not plain: the decode's
        size = len(_frames(tpl, raws, numbers))
    return raws, text, size, first, n


def _holds(block: bytes, tpl: DeltaTemplate, digits: bytes) -> bool:
    """``block`` (a frame of ``tpl`` without its ``event: ``) holds the number ``digits``: they
    are where the number starts (or ends), the template's edge byte next to them."""
    w = len(digits)
    if tpl.order == NUMBER_FIRST:
        ll = tpl.ll
        return block[ll : ll + w] == digits and block[ll + w : ll + w + 1] == tpl.edge
    lt = tpl.lt
    return block[-(lt + w) : -lt] == digits and block[-(lt + w + 1) : -(lt + w)] == tpl.edge


def _number(block: bytes, tpl: DeltaTemplate) -> int:
    """The number ``block`` holds (a frame of ``tpl`` without its ``event: ``), when it is a JSON
    integer (no leading zero) of at most ``_DIGITS_MAX`` digits; -1 when not."""
    mid, ll = tpl.mid, tpl.ll
    if tpl.order == NUMBER_FIRST:
        number = block[ll : block.find(mid, ll)]
    else:
        number = block[block.rfind(mid, ll) + len(mid) : -tpl.lt]
    if not number.isdigit() or len(number) > _DIGITS_MAX or b"%d" % int(number) != number:
        return -1
    return int(number)


def _numbered(blocks: list[bytes], tpl: DeltaTemplate, first: int, numbers: list[bytes]) -> list[bytes]:
    """The texts of ``blocks`` (frames of ``tpl`` without their ``event: ``) whose numbers are
    ``numbers`` (``first`` and on), across a width (``_frames`` holds each to its own): the frames
    whose numbers have as many digits take one cut."""
    raws: list[bytes] = []
    done, n, width = 0, first, len(numbers[0])
    while done < len(blocks):
        group = blocks[done : done + 10**width - n]
        raws += map(tpl.cut(width), group)
        done += len(group)
        n += len(group)
        width += 1
    return raws


def _frames(tpl: DeltaTemplate, raws: list[bytes], numbers: list[bytes]) -> bytes:
    """The frames of ``raws`` (and their ``numbers``) as the template writes them."""
    order = tpl.order
    if order == NUMBER_FIRST:
        return frames(tpl.lead, numbers, tpl.mid, raws, tpl.close, tpl.glue)
    if order == TEXT_FIRST:
        return frames(tpl.lead, raws, tpl.mid, numbers, tpl.close, tpl.glue)
    return b"".join([tpl.lead, tpl.glue.join(raws), tpl.close]) if raws else b""


def _texts(raws: list[bytes]) -> str:
    """The texts of ``raws`` joined, and ``raws`` cut where one is not plain: empty, holding
    what JSON escapes, or not valid UTF-8 on its own. One ``translate`` checks them all; ASCII
    is valid UTF-8 however it is cut, and other texts are decoded joined with a NUL (which JSON
    escapes, so no plain text holds one), which a character cut between two of them fails."""
    joined = b"".join(raws)
    if all(raws) and plain_bytes(joined):
        if joined.isascii():
            return joined.decode()
        try:
            b"\x00".join(raws).decode()  # (each text on its own: the NULs are where one ends)
            return joined.decode()
        except UnicodeDecodeError:
            pass
    return "".join(plain_texts(raws))


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

    def _learn(self, data: bytes, text: str, oi: int, ci: int) -> None:
        """Keep the template of ``data``, a text delta ``feed_frame`` read into the current
        run as ``text``: one try of ``LEARN_TRIES``."""
        self._learning = False
        self._tries -= 1
        self._served = 0
        self._template = delta_template(data, text, oi, ci)

    def _relearn(self) -> None:
        """The template matched no frame where a text delta starts: learned again, tries left."""
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
        frames at its start that the machine reads at once, the bytes and the frames they took,
        and, when the read ends where a frame ends, the blocks of the frames after them (the
        pump reads those without splitting the read again); None for none (the pump then reads
        them the usual way). The read is cut into its frames once (``frame_blocks``). Until a
        template is known, the frames of one event line and one data line are read one by one,
        as the pump would read them (a frame's reader, else ``feed_frame``, else ``feed`` of its
        parse), until the second text delta of a part teaches it (wherever in the read, after a
        reasoning item or a call); then the run of frames that match it (``delta_run``)."""
        tpl = self._template
        if tpl is None:
            if not self._tries:
                return None
        elif read[: len(tpl.lead)] != tpl.lead:  # no run at the start (the closing frames): no search
            if read[: len(_HEAD)] == _HEAD:  # a text delta the template does not match
                self._relearn()
            return None
        blocks, whole = frame_blocks(read)
        if not blocks:
            return None
        out: list[Out] = []
        size = frames = 0
        if tpl is None:  # (the machine is not done: the pump offers it no read then)
            readers = self.block_readers  # a call's or a reasoning delta's frame: its reader
            for block in blocks:
                name, sep, data = block.partition(b"\ndata: ")
                if not sep or name == b"error" or 10 in name or 13 in name or 10 in data or 13 in data:
                    break  # not one event line and one data line: the SSE decoder's matter
                if name == _EVENT:  # a read with text deltas: feed_frame learns from the next one
                    self._learning = True
                more = readers[name](self, data) if name in readers else self.feed_frame(data)
                if more is None:
                    more = self._parsed(data)
                    if more is None:
                        break
                out += more
                size += len(block) + 9
                frames += 1
                tpl = self._template
                if tpl is not None or self.done:
                    break
        if tpl is not None and frames < len(blocks) and not self.done:
            cur = self._run
            if cur is not None and cur[0] == tpl.oi and cur[1] == tpl.ci and self._last_msg == tpl.oi:
                raws, text, taken, first, matched = delta_run(blocks, frames, read, size, tpl, self._next)
                if raws:
                    cur[2].pieces.append(text)
                    self._content_len += len(text)
                    self._next = first + len(raws) if first >= 0 else -1
                    # The part's content frame around each text's JSON string: its bytes in
                    # quotes. SSE frames follow one another: the run's are one output (``packed``
                    # counts the others), joined once: [head, raw, between, raw, ..., after].
                    if self._framing.sse:
                        parts = [cur[6]] * (2 * len(raws) + 1)
                        parts[1::2] = raws
                        parts[0] = cur[4]
                        parts[-1] = cur[5]
                        out.append(b"".join(parts))
                        self.packed += len(raws) - 1
                    else:
                        frame = b"%s%%s%s" % (cur[4].replace(b"%", b"%%"), cur[5].replace(b"%", b"%%"))
                        out += map(frame.__mod__, raws)
                    size += taken
                    frames += len(raws)
                    self._served += len(raws)
                    if self._served >= SETTLED:
                        self._tries = LEARN_TRIES
                elif not matched and blocks[frames].startswith(_NAME):  # (a text that is not plain: kept)
                    self._relearn()
            elif blocks[frames].startswith(_NAME):  # another part's text
                self._relearn()
        if whole and frames < len(blocks):
            return out, size, frames, blocks[frames:] if frames else blocks
        return (out, size, frames, None) if frames else None
