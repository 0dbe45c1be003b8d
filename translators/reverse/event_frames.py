"""Typed decoding of the reverse stream's frames around its text deltas.

Besides its deltas (delta_frames.py), a Responses text stream sends eight frames where a chat
stream sends four, and the biggest of them carry what the machine has already seen: the text of
``output_text.done``, ``content_part.done`` and ``output_item.done`` again, the whole Response
in ``in_progress`` and ``completed``. The machine reads a few of their fields; these structs
declare only those, so the rest (the Response's ``output``, ``tools``, ``instructions``..., a
part's ``logprobs``, ``sequence_number``, ``item_id`` where unread) is skipped without building
Python objects for it, as the forward stream does for chat chunks
(translators/forward/chunk_frames.py).

``closing_event`` makes of a closing frame's bytes the event dict the machine's handler reads:
every key the handler reads, ``None`` where the frame had none (the handlers read absent and
``null`` alike), so the handler does with it what it does with the whole parsed frame. It
returns None for a frame it does not know, and the caller then parses the frame as plain JSON.

The frames that send nothing once the stream started (``in_progress``, ``content_part.added``,
the ``output_item.added`` of a message or a reasoning item) are decoded into ``QuietFrame``, the
closing ones into ``EventFrame``. Every field is typed ``Any`` unless the handler requires an
object or an array there: a value of another type makes the decode fail, and the frame goes the
general way (parsed into a dict, fed to ``feed``), which reports it exactly as it always has.
Only frames whose bytes open with the event's ``type`` are decoded this way
(``QUIET_PREFIXES``, ``EVENT_PREFIXES``). Structs are ``gc=False``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from crossfeed.translators.reverse.delta_frames import FRAME_ERRORS


class ItemHead(msgspec.Struct, gc=False):
    type: Any = None


class QuietFrame(msgspec.Struct, gc=False):
    """``in_progress``, ``content_part.added``, ``output_item.added``: what tells whether the
    frame sends nothing (the added item's type and index)."""

    type: Any = None
    output_index: Any = None
    item: ItemHead | None = None


class PartBody(msgspec.Struct, gc=False):
    """A content part (``content_part.done``'s ``part``, an item's ``content[i]``)."""

    type: Any = None
    text: Any = None
    refusal: Any = None
    annotations: Any = None


class ItemBody(msgspec.Struct, gc=False):
    type: Any = None
    id: Any = None
    content: list[PartBody] | None = None


class ResponseTail(msgspec.Struct, gc=False):
    """What a terminal event's Response tells once its output was streamed."""

    usage: Any = None
    incomplete_details: Any = None


class EventFrame(msgspec.Struct, gc=False):
    """The closing frames: ``output_text.done``, ``content_part.done``, ``output_item.done``,
    ``completed``, ``incomplete``."""

    type: Any = None
    output_index: Any = None
    item_id: Any = None
    content_index: Any = None
    text: Any = None
    part: PartBody | None = None
    item: ItemBody | None = None
    response: ResponseTail | None = None


decode_quiet = msgspec.json.Decoder(QuietFrame).decode
_decode_event = msgspec.json.Decoder(EventFrame).decode

ITEM_ADDED: Final = "response.output_item.added"
QUIET: Final = frozenset({"response.in_progress", "response.content_part.added"})  # nothing to read
TEXT_DONE: Final = "response.output_text.done"
PART_DONE: Final = "response.content_part.done"
ITEM_DONE: Final = "response.output_item.done"
TERMINAL: Final = frozenset({"response.completed", "response.incomplete"})
QUIET_PREFIXES: Final = tuple(b'{"type":"%s"' % t.encode() for t in (*QUIET, ITEM_ADDED))
EVENT_PREFIXES: Final = tuple(b'{"type":"%s"' % t.encode() for t in (TEXT_DONE, PART_DONE, ITEM_DONE, *TERMINAL))


def _part(p: PartBody) -> dict[str, Any]:
    return {"type": p.type, "text": p.text, "refusal": p.refusal, "annotations": p.annotations}


def closing_event(data: bytes) -> dict[str, Any] | None:
    """The event the machine's handler reads, of a closing frame's bytes: a ``*.done`` frame of a
    message's text, or a terminal frame (the machine judges whether its Response's output is
    needed); None for any other frame or shape."""
    try:
        ev = _decode_event(data)
    except FRAME_ERRORS:
        return None
    t = ev.type
    if type(t) is not str:
        return None
    if t == TEXT_DONE:
        return {
            "type": t,
            "output_index": ev.output_index,
            "item_id": ev.item_id,
            "content_index": ev.content_index,
            "text": ev.text,
        }
    if t == PART_DONE:
        part = ev.part
        return {
            "type": t,
            "output_index": ev.output_index,
            "item_id": ev.item_id,
            "content_index": ev.content_index,
            "part": None if part is None else _part(part),
        }
    if t == ITEM_DONE:
        item = ev.item
        if item is None or item.type != "message":  # (a reasoning item, a call: fields not declared)
            return None
        content = item.content
        return {
            "type": t,
            "output_index": ev.output_index,
            "item_id": ev.item_id,
            "item": {
                "type": "message",
                "id": item.id,
                "content": None if content is None else [_part(p) for p in content],
            },
        }
    if t in TERMINAL:
        resp = ev.response
        if resp is None:
            return None
        return {"type": t, "response": {"usage": resp.usage, "incomplete_details": resp.incomplete_details}}
    return None
