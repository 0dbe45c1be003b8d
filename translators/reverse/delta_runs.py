"""A run of delta frames read without a decode: the pure part of the reverse machine's runs
(text_runs.py ``feed_run``).

A Responses backend writes every delta of one part the same way: the same event line, the same
``item_id``, indexes and key order; only the text and ``sequence_number`` change, and the number
rises by one a frame. ``delta_template`` keeps such a frame's bytes around its two holes,
``frame_blocks`` cuts a read into its frames in one split, and ``delta_run`` takes the run of
frames of a template at once: their texts' bytes, compared with the read in one go.

Each frame a run takes is one the typed decode would have read to the same text: the template's
bytes around a plain text (translators/plain_json.py) and a number.
tests/translators/reverse/test_text_runs.py holds the run to the decode.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Final

from crossfeed.translators.plain_json import plain_bytes, plain_texts
from crossfeed.translators.reverse.delta_frames import PartDelta
from crossfeed.translators.run_frames import frames
from crossfeed.translators.run_frames import numbers as written
from crossfeed.translators.sse import EVENT_SEP

NO_NUMBER, NUMBER_FIRST, TEXT_FIRST = 0, 1, 2
TEXT_HEAD: Final = b"event: response.output_text.delta\ndata: "  # a text delta frame's start
_DELTA: Final = b'"delta":"'
_NUMBER: Final = b'"sequence_number":'
_DIGITS_MAX: Final = 18  # the longest number a run reads (int() refuses thousands of digits)


class DeltaTemplate:
    """A delta frame's bytes around its holes, the text and the number (``delta_template``)."""

    __slots__ = (
        "lead",
        "order",
        "mid",
        "tail",
        "close",
        "oi",
        "ci",
        "kind",
        "head",
        "edge",
        "ll",
        "lm",
        "lt",
        "glue",
        "cuts",
    )

    def __init__(
        self,
        lead: bytes,
        order: int,
        mid: bytes,
        tail: bytes,
        oi: int,
        ci: int,
        edge: bytes,
        kind: Callable[[bytes], PartDelta] | None = None,
    ) -> None:
        self.lead = lead  # the bytes up to the first hole (the event line and the data line's start)
        self.order = order  # the holes in the frame (NO_NUMBER: the text alone)
        self.mid = mid  # between the holes
        self.tail = tail  # after the last hole
        self.close = tail + b"\n\n"  # ... and the blank line
        self.oi, self.ci = oi, ci  # the part's output_index and its index (content or summary)
        self.kind = kind  # None: a message's text; a reasoning part's: its deltas' decoder (_rrun's)
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


def delta_template(
    data: bytes, text: str, oi: int, ci: int, head: bytes = TEXT_HEAD, kind: Callable[[bytes], PartDelta] | None = None
) -> DeltaTemplate | None:
    """The template of ``data``, a delta frame's JSON under the event line ``head`` that decoded
    to ``text`` (plain, non-empty) at ``(oi, ci)``, of a part of ``kind`` (``DeltaTemplate``);
    None when the text or the number cannot be found unambiguously (a key twice, a text written
    with escapes, whitespace around a colon, a number that is not a plain decimal)."""
    raw = text.encode()
    if data.count(b'"delta"') != 1 or not plain_bytes(raw):
        return None
    start = data.find(_DELTA) + len(_DELTA)
    end = start + len(raw)
    if start < len(_DELTA) or data[start:end] != raw or data[end : end + 1] != b'"':
        return None
    numbers = data.count(b'"sequence_number"')
    if numbers == 0:
        return DeltaTemplate(head + data[:start], NO_NUMBER, b"", data[end:], oi, ci, b"", kind)
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
        return DeltaTemplate(head + data[:at], NUMBER_FIRST, mid, data[end:], oi, ci, mid[:1], kind)
    mid = data[end:at]
    return DeltaTemplate(head + data[:start], TEXT_FIRST, mid, data[stop:], oi, ci, mid[-1:], kind)


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
