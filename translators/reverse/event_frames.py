"""Typed decoding of the reverse stream's frames around its text deltas.

Besides its deltas (delta_frames.py), a Responses text stream sends eight frames where a chat
stream sends four, and the biggest of them carry what the machine has already seen: the text of
``output_text.done``, ``content_part.done`` and ``output_item.done`` again, the whole Response
in ``in_progress`` and ``completed``. The machine reads a few of their fields; these structs
declare only those, so the rest (the Response's ``output``, ``tools``, ``instructions``..., a
part's ``logprobs``, ``sequence_number``, ``item_id`` where unread) is skipped without building
Python objects for it, as the forward stream does for chat chunks
(translators/forward/chunk_frames.py).

``closing_event`` makes of a closing frame's bytes the event dict the machine's handler reads: a
``TypedDict`` that declares the keys the handler reads, so msgspec builds the dicts (only of the
keys the frame has: the handlers read absent and ``null`` alike) and the handler does with it
what it does with the whole parsed frame. It returns None for a frame it does not know, and the
caller then parses the frame as plain JSON.

The stream's first frame (``created``; ``in_progress`` or ``queued`` where a server sends none)
carries the whole Response, of which the machine reads the model and the creation time: it is
decoded into ``StartEvent`` (``start_event``).

The frames that send nothing once the stream started (``in_progress``, ``content_part.added``,
the ``output_item.added`` of a message or a reasoning item) are decoded into ``QuietFrame``, the
closing ones into ``ClosingEvent``. Every field is typed ``Json`` (any JSON value, integers as
the plain parse reads them: bounded_json.py) unless the handler requires an object or an array
there: a value of another type makes the decode fail, and the frame goes the
general way (parsed into a dict, fed to ``feed``), which reports it exactly as it always has.
Only frames whose bytes open with the event's ``type`` are decoded this way
(``QUIET_PREFIXES``, ``EVENT_PREFIXES``). The structs are ``gc=False``.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict

import msgspec

from crossfeed.translators.bounded_json import Json
from crossfeed.translators.reverse.delta_frames import FRAME_ERRORS


class ItemHead(msgspec.Struct, gc=False):
    type: Json = None


class QuietFrame(msgspec.Struct, gc=False):
    """``in_progress``, ``content_part.added``, ``output_item.added``: what tells whether the
    frame sends nothing (the added item's type and index)."""

    type: Json = None
    output_index: Json = None
    item: ItemHead | None = None


class Part(TypedDict, total=False):
    """A content part (``content_part.done``'s ``part``, an item's ``content[i]``)."""

    type: Json
    text: Json
    refusal: Json
    annotations: Json


class Item(TypedDict, total=False):
    type: Json
    id: Json
    content: list[Part] | None


class ResponseTail(TypedDict, total=False):
    """What a terminal event's Response tells once its output was streamed."""

    usage: Json
    incomplete_details: Json


class ClosingEvent(TypedDict, total=False):
    """The closing frames: ``output_text.done``, ``content_part.done``, ``output_item.done``,
    ``completed``, ``incomplete``."""

    type: Json
    output_index: Json
    item_id: Json
    content_index: Json
    text: Json
    part: Part | None
    item: Item | None
    response: ResponseTail | None


class ResponseHead(TypedDict, total=False):
    """What the first lifecycle event's Response tells the machine: the stream's identity."""

    model: Json
    created_at: Json


class StartEvent(TypedDict, total=False):
    type: Json
    response: ResponseHead | None


decode_quiet = msgspec.json.Decoder(QuietFrame).decode
_decode_start = msgspec.json.Decoder(StartEvent).decode
_decode_event = msgspec.json.Decoder(ClosingEvent).decode

ITEM_ADDED: Final = "response.output_item.added"
QUIET: Final = frozenset({"response.in_progress", "response.content_part.added"})  # nothing to read
TEXT_DONE: Final = "response.output_text.done"
PART_DONE: Final = "response.content_part.done"
ITEM_DONE: Final = "response.output_item.done"
TERMINAL: Final = frozenset({"response.completed", "response.incomplete"})
QUIET_PREFIXES: Final = tuple(b'{"type":"%s"' % t.encode() for t in (*QUIET, ITEM_ADDED))
START: Final = frozenset({"response.created", "response.in_progress", "response.queued"})
START_PREFIXES: Final = tuple(b'{"type":"%s"' % t.encode() for t in sorted(START))
EVENT_PREFIXES: Final = tuple(b'{"type":"%s"' % t.encode() for t in (TEXT_DONE, PART_DONE, ITEM_DONE, *TERMINAL))


def closing_event(data: bytes) -> dict[str, Any] | None:
    """The event the machine's handler reads, of a closing frame's bytes: a ``*.done`` frame of a
    message's text, or a terminal frame (the machine judges whether its Response's output is
    needed); None for any other frame or shape."""
    try:
        ev: Any = _decode_event(data)
    except FRAME_ERRORS:
        return None
    t = ev.get("type")
    if t in _TEXT_DONES:  # (a str: the tuple holds strs only, and == of another type is False)
        return ev
    if t == ITEM_DONE:
        item = ev.get("item")  # a reasoning item, a call: fields not declared
        return ev if item is not None and item.get("type") == "message" else None
    if type(t) is str and t in TERMINAL:
        return ev if ev.get("response") is not None else None
    return None


_TEXT_DONES: Final = (TEXT_DONE, PART_DONE)
# What ``TextRuns.closing_frame_event`` returns for a ``*.done`` frame that confirms the streamed
# text (text_holder): the machine sends nothing for it.
CONFIRMED: Final[dict[str, Any]] = {"type": "confirmed"}


def start_event(data: bytes) -> dict[str, Any] | None:
    """The event ``_first`` reads, of the first lifecycle frame's bytes: its type and its
    Response's model and creation time, the rest of the Response skipped. None for another
    event or shape (the caller then parses the frame as plain JSON)."""
    try:
        ev: Any = _decode_start(data)
    except FRAME_ERRORS:
        return None
    if ev.get("type") not in START:  # (a repeated ``type``: the last one counts)
        return None
    return ev


# -- a closing frame's text, not decoded again ----------------------------------------------------
#
# ``output_text.done``, ``content_part.done`` and ``output_item.done`` carry the text of the part
# the machine has just streamed, which it has already decoded (a delta at a time): decoding it
# again costs about five instructions a byte, three times. ``spliced`` finds it instead: the
# first ``"text":"`` of the frame opens a key named exactly ``text`` and its string value (inside
# a JSON string every quote is escaped, and this needle holds a quote after a letter; a quote
# that closed a string cannot be followed by ``text"``), and where the bytes there are the
# streamed text's JSON string as orjson writes it (which is how OpenAI, vLLM and most servers
# write it: escapes of quotes, backslashes and control characters only), that string token ends
# where it ends and decodes to that text. The frame is decoded with ``""`` in its place (one
# string token for another: the same structure), and ``restored`` puts the text back where the
# handler reads it.
#
# Most often such a frame only confirms the streamed text: its handler would compare it with what
# was sent, find nothing missing and send nothing. ``text_holder`` says where the handler reads
# the text, and a frame whose text there is the streamed one (cut or decoded) runs no handler
# (``CONFIRMED``): the three handlers and their field checks cost about a seventh of a short
# stream's closing frames.

TEXT_CLOSINGS: Final = tuple(b'{"type":"%s"' % t.encode() for t in (TEXT_DONE, PART_DONE, ITEM_DONE, *TERMINAL))
_TEXT_KEY: Final = b'"text":"'
_KEY_WITHIN: Final = 2048  # where a frame's text key is looked for: the frame's fields before it


def spliced(data: bytes, token: bytes) -> bytes | None:
    """``data`` with the string value of its first ``text`` key cut to ``""``, when that value is
    ``token`` (a whole JSON string, quotes included); None when it is not."""
    at = data.find(_TEXT_KEY, 0, _KEY_WITHIN) + len(_TEXT_KEY) - 1
    if at < len(_TEXT_KEY) - 1 or not data.startswith(token, at):
        return None
    return data[:at] + b'""' + data[at + len(token) :]


def restored(ev: dict[str, Any], oi: int, ci: int, text: str) -> bool:
    """Put ``text`` back in ``ev`` (``closing_event`` of a frame ``spliced`` cut) where the handler
    reads a text of part ``(oi, ci)``, when it reads ``""`` there: the cut value, or a text of
    that part that is empty, which reads as the streamed text does (nothing left to send).
    False for any other event (it is then decoded whole): another part's, a message of several
    parts or with annotations (the cut could be another part's text, or an annotation's). A
    terminal event's text is its output's, which the handler does not read once the output was
    streamed (the machine's ``_event_frame``): True unless an empty string is among the fields
    it reads (the cut could be there)."""
    if ev["type"] in TERMINAL:  # the text is the output's, which is not read: the fields read are whole
        resp = ev["response"]
        return not _holds_empty(resp.get("usage")) and not _holds_empty(resp.get("incomplete_details"))
    holder = text_holder(ev, oi, ci)
    if holder is None or holder.get("text") != "":
        return False
    holder["text"] = text
    return True


def text_holder(ev: dict[str, Any], oi: int, ci: int) -> dict[str, Any] | None:
    """Where the handler of ``ev`` (``closing_event`` of a ``*.done`` frame) reads the final text
    of the output_text part ``(oi, ci)``: the event itself (``output_text.done``), its ``part``
    (``content_part.done``), its message's one part (``output_item.done``, part 0). None for any
    other event: a terminal one, another part's, a message of several parts, a part that is not
    ``output_text`` or that holds annotations (``output_item.done``'s are kept for the terminal
    chunk). Once that text is the streamed one, the handler sends nothing and keeps nothing, and
    none runs (``TextRuns.closing_frame_event`` returns ``CONFIRMED``)."""
    t = ev["type"]
    given = ev.get("output_index")
    if type(given) is not int or given != oi:
        return None
    if t == ITEM_DONE:
        content = ev["item"].get("content")  # (closing_event: a message item)
        if ci or content is None or len(content) != 1:
            return None
        part: dict[str, Any] = content[0]
    else:
        index = ev.get("content_index")
        if type(index) is not int or index != ci:
            return None
        if t == TEXT_DONE:
            return ev
        if t != PART_DONE:
            return None
        given = ev.get("part")
        if given is None:
            return None
        part = given
    if part.get("annotations") or part.get("type") != "output_text":
        return None
    return part


def _holds_empty(value: Any) -> bool:
    if value == "":
        return True
    if type(value) is dict:
        return any(map(_holds_empty, value.values()))
    return type(value) is list and any(map(_holds_empty, value))
