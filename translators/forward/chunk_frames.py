"""Typed decoding of ``chat.completion.chunk`` frames: the forward stream's per-frame parse.

A chunk carries a dozen fields, and the stream machine reads four of them at the top
(``choices``, ``usage``, ``error``, ``x_groq``), four in a choice and eight in a delta. Decoding
into msgspec structs that declare only those skips the rest (``id``, ``object``, ``created``,
``model``, ``system_fingerprint``...) without building a Python object for them: measured at
less than half the cost of ``orjson.loads`` into dicts (docs/DESIGN.md), on the hot path of
every token.

Every field the machine reads is typed ``Json`` (any JSON value, integers as the plain parse
reads them: bounded_json.py) unless its container shape is fixed by the protocol (``choices`` a
list of objects, ``delta`` an object): a value of another type makes the decode fail, and the
caller then parses the frame as plain JSON so the machine reports the problem exactly as it
always has. A field nobody reads is skipped unchecked, so an upstream
that puts garbage in ``id`` no longer fails a stream it could serve (orjson validated those
bytes too; msgspec still rejects invalid UTF-8 in every field it keeps).

Structs are ``gc=False``: decoded JSON cannot hold a reference cycle, and untracked structs
do not count towards the collector's allocation threshold.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import msgspec

from crossfeed.translators.bounded_json import DECODE_ERRORS, Json
from crossfeed.translators.plain_json import plain_bytes, plain_texts


class Delta(msgspec.Struct, gc=False):
    content: Json = None
    reasoning_content: Json = None
    reasoning: Json = None
    reasoning_details: Json = None
    refusal: Json = None
    annotations: Json = None
    tool_calls: Json = None
    function_call: Json = None


class Choice(msgspec.Struct, gc=False):
    index: Json = 0
    delta: Delta | None = None
    finish_reason: Json = None
    logprobs: Json = None


class Chunk(msgspec.Struct, gc=False):
    choices: list[Choice] | None = None
    usage: Json = None
    error: Json = None
    x_groq: Json = None


decode_chunk = msgspec.json.Decoder(Chunk).decode
FRAME_ERRORS = DECODE_ERRORS  # not JSON, not an object, a field of the wrong shape, or nested too deep


def as_dict(chunk: Chunk) -> dict[str, Any]:
    """The chunk as the dicts ``feed`` reads: only the fields above (the only ones it reads),
    an absent field as None (``feed`` treats both alike)."""
    return msgspec.to_builtins(chunk)


# -- frames that differ only in their text -------------------------------------------------------
#
# Most frames of a stream are byte for byte the frame before them but for the delta's text: the
# same id, model, created, fingerprint, the same keys in the same order. Once one such frame has
# been decoded, the next one that starts and ends with the same bytes around a plain string (no
# quote, no backslash, no control character: a string whose JSON is its UTF-8 as it is) decodes
# to the same structs with that string in place of the text, so it is read with a slice instead.

_KEYS = {"content": b'"content"', "reasoning_content": b'"reasoning_content"', "reasoning": b'"reasoning"'}

# A frame's template: (head, len(head), tail, -len(tail), reasoning, left, lead, close, at).
# ``head`` + text + ``tail`` is the frame; ``reasoning``: the text is the delta's reasoning
# (else its content); ``left``: templates the stream may still learn in a row; ``lead`` and
# ``close``: the SSE frame around the text (``data: `` + head, tail + LF LF); ``at``: the
# machine's event count when it was learned. A plain tuple: the per-frame check unpacks it in
# one step.
TextFrame = tuple[bytes, int, bytes, int, bool, int, bytes, bytes, int]
# Templates a stream learns in a row at most: one learned from every frame is a backend with a
# nonce in each, and learning stops. One that served SETTLED events or more before it stopped
# matching (a backend whose "created" ticks every second) gives the tries back.
LEARN_TRIES = 4
SETTLED = 16
# Matches no frame (a frame is JSON text, and no read starts with a NUL).
NO_FRAME: TextFrame = (b"\x00" * 8, 8, b"", 0, False, 0, b"\x00" * 8, b"", 0)


def text_frame(data: bytes, field: str, text: str, *, reasoning: bool, left: int, at: int) -> TextFrame | None:
    """The template of ``data``, a frame that decoded to one choice whose delta's ``field`` is
    ``text`` (a plain, non-empty string) and nothing else the machine acts on; None when the
    text's bytes cannot be found unambiguously (the key twice, the string written with escapes)."""
    key = _KEYS[field]
    raw = text.encode()
    if data.count(key) == 1 and plain_bytes(raw):
        after = data.index(key) + len(key)
        start = data.find(b'"', after) + 1
        end = start + len(raw)
        if start and data[after : start - 1].strip() == b":" and data[start:end] == raw and data[end : end + 1] == b'"':
            head, tail = data[:start], data[end:]
            return (head, start, tail, end - len(data), reasoning, left, b"data: " + head, tail + b"\n\n", at)
    return None


def text_run(read: bytes, frame: TextFrame, at: int = 0, before: int = 0) -> tuple[list[bytes], list[str], int]:
    """The whole SSE frames at the start of ``read`` (upstream bytes that start where a frame
    starts) that are ``frame`` around a plain non-empty text: their texts' bytes and strings,
    and the bytes they take. The first frame that is not ends the run: it and the rest of the
    read go the usual way. ``at``: where the run may start in ``read``, after ``before`` frames
    of one ``data:`` line each (those the machine read one by one): the read is split whole,
    never copied from ``at`` on first.

    The read is cut at its frame boundaries (LF LF ``data: ``) in one split; the pieces at its
    end that are not the template (the frames after the run) are dropped, each other piece's
    text is taken at the template's offsets, and the frames those texts would make are compared
    with the read in place (the texts joined by what goes between two frames, the lead before
    them, the close after): equal, every piece was the template around its text.
    (Comparing each piece's head and tail costs two slices a frame; splitting at the whole joint
    between two texts, a needle over 100 bytes, makes CPython prepare it again for every
    match.) When they differ, each piece is checked in turn."""
    head, start, tail, end, lead, close = frame[0], frame[1], frame[2], frame[3], frame[6], frame[7]
    if read[at : at + 6] != b"data: ":
        return [], [], 0
    # Split whole: a slice of the read first would copy it all once more. The first piece is
    # the ``data: `` line of the first frame (or of the first of ``before``, which are dropped).
    pieces = read.split(b"\n\ndata: ")
    if before:
        del pieces[:before]
    if pieces[-1][-2:] == b"\n\n":
        pieces[-1] = pieces[-1][:-2]
    else:
        pieces.pop()  # the last frame is not whole yet
    if pieces and not before:
        pieces[0] = pieces[0][6:]
    while pieces and (pieces[-1][:start] != head or pieces[-1][end:] != tail):
        pieces.pop()  # the frames after the run (the finish_reason, the usage, [DONE]...)
    raws = list(map(itemgetter(slice(start, end)), pieces))  # (a slice a piece, no loop in Python)
    if raws:
        # The frames these texts make, compared with the read in place: the lead, the texts
        # joined by what goes between two, the close (not joined once more into one run).
        inner = (close + lead).join(raws)
        after = at + len(lead)
        if not (
            read.startswith(lead, at) and read.startswith(inner, after) and read.startswith(close, after + len(inner))
        ):
            raws = []
            for piece in pieces:  # the run ends at the first piece that is not the template
                if piece[:start] != head or piece[end:] != tail:
                    break
                raws.append(piece[start:end])
    joined = b"".join(raws)
    texts: list[str] = []
    # Plain: nothing SPECIAL (one C pass over the texts joined; str.isprintable costs several
    # times as much per character), and each text valid UTF-8 on its own.
    if all(raws) and plain_bytes(joined):
        try:
            texts = list(map(bytes.decode, raws))
        except UnicodeDecodeError:
            texts = []
    if len(texts) != len(raws):  # one of them is not plain: the run ends before it
        texts = plain_texts(raws)
        joined = b"".join(raws)
    return raws, texts, len(joined) + len(raws) * (start - end + 8)
