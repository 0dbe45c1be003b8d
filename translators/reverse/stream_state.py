"""What the reverse stream machine keeps of one stream, and how it reads an upstream event's ids.

The text parts it sends are keyed ``(kind, item, index)`` (``PartKey``): the part's kind (one of
the four below), the item it belongs to (``item_key``: its ``output_index``, else its
``item_id``) and its ``content_index`` / ``summary_index``. Tool calls are keyed by item.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import orjson

from crossfeed.translators.responses.fields import bad_field

# The kinds of text part a chat stream carries (the Responses part types they come from).
PartKind = Literal["output_text", "refusal", "summary_text", "reasoning_text"]
OUTPUT_TEXT: Final = "output_text"  # -> delta.content
REFUSAL: Final = "refusal"  # -> delta.refusal
SUMMARY_TEXT: Final = "summary_text"  # -> the reasoning field; each summary part is a segment
REASONING_TEXT: Final = "reasoning_text"  # -> the reasoning field; one segment per reasoning item
REASONING_KINDS: Final = (SUMMARY_TEXT, REASONING_TEXT)

# (kind, item key, content_index or summary_index)
PartKey = tuple[PartKind, Any, int]

CALL_TYPES: Final = {"function_call": False, "custom_tool_call": True}  # item type -> is custom


class PartField:
    """Where a part's final text is: its kind, and the field of the part that holds the text."""

    __slots__ = ("kind", "field")

    def __init__(self, kind: PartKind, field: str) -> None:
        self.kind = kind
        self.field = field


class DoneField:
    """A ``*.done`` text event: the kind of its part, the key of its part index, its text field."""

    __slots__ = ("kind", "index_key", "field")

    def __init__(self, kind: PartKind, index_key: str, field: str) -> None:
        self.kind = kind
        self.index_key = index_key
        self.field = field


# The delta events of a kind other than output_text (which has a handler of its own).
DELTA_KINDS: Final[dict[str, PartKind]] = {
    "response.refusal.delta": REFUSAL,
    "response.reasoning_summary_text.delta": SUMMARY_TEXT,
    "response.reasoning_text.delta": REASONING_TEXT,
    "response.reasoning.delta": REASONING_TEXT,  # the Open Responses name of the same event
}
# A content part (of a message or a reasoning item) by its ``type``.
PART_FIELDS: Final[dict[str | None, PartField]] = {
    "output_text": PartField(OUTPUT_TEXT, "text"),
    "refusal": PartField(REFUSAL, "refusal"),
    "reasoning_text": PartField(REASONING_TEXT, "text"),
}
DONE_FIELDS: Final = {
    "response.output_text.done": DoneField(OUTPUT_TEXT, "content_index", "text"),
    "response.refusal.done": DoneField(REFUSAL, "content_index", "refusal"),
    "response.reasoning_text.done": DoneField(REASONING_TEXT, "content_index", "text"),
    "response.reasoning.done": DoneField(REASONING_TEXT, "content_index", "text"),
    "response.reasoning_summary_text.done": DoneField(SUMMARY_TEXT, "summary_index", "text"),
}


def part_text(part: dict[str, Any], label: str, index: int | None = None) -> tuple[PartKind, str | None] | None:
    """A content part's text kind and text (``None`` when absent); ``None`` for a part of a type
    that carries no text. A ``type`` or text that is not a string is an error naming the part:
    ``label``, with ``[index]`` when given (built only then: this runs for every part)."""
    kind = part.get("type")
    if kind is not None and type(kind) is not str:
        raise bad_field(_where(label, index), "type", kind, "a string")
    found = PART_FIELDS.get(kind)
    if found is None:
        return None
    text = part.get(found.field)
    if text is not None and type(text) is not str:
        raise bad_field(_where(label, index), found.field, text, "a string")
    return found.kind, text


def _where(label: str, index: int | None) -> str:
    return label if index is None else f"{label}[{index}]"


class Part:
    """A text part sent so far."""

    __slots__ = ("pieces", "base")

    def __init__(self, base: int) -> None:
        self.pieces: list[str] = []  # upstream text sent so far (separators excluded)
        self.base = base  # offset of this part in the joined content (annotations)


class Call:
    """A tool call sent so far: its chat ``index`` and what of its arguments went out."""

    __slots__ = ("index", "custom", "pieces", "closed", "head", "tail")

    def __init__(self, index: int, custom: bool) -> None:
        self.index = index
        self.custom = custom
        self.pieces: list[str] = []  # raw arguments / input sent so far
        self.closed = False  # custom: closing quote sent
        # wire mode: an arguments chunk's frame before and after the fragment's JSON string
        self.head = self.tail = b""


class Held:
    """Argument fragments of a call whose ``output_item.added`` (with its name) has not come yet."""

    __slots__ = ("pieces", "final")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.final: str | None = None  # from function_call_arguments.done / custom_tool_call_input.done


def escape_json(text: str) -> str:
    """JSON-escape a piece of a string literal (escaping is per character, so pieces concatenate)."""
    return orjson.dumps(text)[1:-1].decode()


def item_key(ev: dict[str, Any]) -> Any:
    """The item an event belongs to: ``output_index`` (an integer), else ``item_id`` (a string)."""
    oi = ev.get("output_index")
    if type(oi) is int:
        return oi
    if oi is not None:
        raise bad_field(ev["type"], "output_index", oi, "an integer")
    item_id = ev.get("item_id")
    if item_id is None or type(item_id) is str:
        return item_id
    raise bad_field(ev["type"], "item_id", item_id, "a string")


def added_item_key(ev: dict[str, Any], item: dict[str, Any]) -> Any:
    """``item_key`` of an item event; with neither index nor ``item_id`` (llama-server), the
    item's own id, which its deltas name as ``item_id``."""
    oi = item_key(ev)
    if oi is None and type(item.get("id")) is str:
        return item["id"]
    return oi


def part_index(ev: dict[str, Any], key: str) -> int:
    """``content_index`` / ``summary_index`` / ``annotation_index``: 0 when absent."""
    value = ev.get(key)
    if type(value) is int:
        return value
    if value is None:
        return 0
    raise bad_field(ev["type"], key, value, "an integer")


def delta_text(ev: dict[str, Any]) -> str:
    d = ev.get("delta")
    if type(d) is str:
        return d
    raise bad_field(ev["type"], "delta", d, "a string")


def event_item(ev: dict[str, Any]) -> dict[str, Any]:
    """The ``item`` of an ``output_item.*`` event, an object with a string ``type``."""
    item = ev.get("item")
    if type(item) is not dict:
        raise bad_field(ev["type"], "item", item, "an object")
    kind = item.get("type")
    if type(kind) is not str:
        raise bad_field(ev["type"], "item.type", kind, "a string")
    return item
