"""A long ``POST /v1/responses`` body decoded with its long tool outputs left as JSON (issue 33).

Codex on HTTP sends the whole history every turn, and most of a long history is tool outputs
(a 3 MiB Codex body: 2.8 MB of ``function_call_output`` text). Read with ``orjson.loads`` each
output becomes a ``str``, and writing the chat body turns each back into UTF-8 JSON; both passes
cost more than the rest of the request together, for text crossfeed only carries across.

``decode_create`` reads the body once with msgspec, keeping every value's JSON span
(``msgspec.Raw``: no objects built for it), then builds the same dict ``orjson.loads`` would,
value by value, except that the ``output`` string of a ``function_call_output`` or
``custom_tool_call_output`` item of ``RAW_OUTPUT_MIN`` bytes or more stays JSON, as an
``orjson.Fragment``: ``orjson.dumps`` writes it as it came, anywhere it goes (the chat body, the
store). Code that reads such an output as text asks ``output_text``.

The fast way never changes what a request means. Where it cannot give exactly what
``orjson.loads`` gives, it answers ``None`` and the caller parses the plain way, which also gives
any error its usual words:
  - a body that is not valid JSON, not an object, or whose ``input`` is not a string or a list
    of objects; a top-level field this module does not list (``FIELDS``); nesting past
    msgspec's limit;
  - a value orjson refuses (invalid UTF-8 anywhere: msgspec checks the JSON grammar of a span
    it skips, orjson also its UTF-8).
msgspec's pass refuses what orjson refuses in a span's JSON, escapes included (a ``\\uD800``
with no low surrogate after it, a low one alone), but not invalid UTF-8: an output kept as JSON
is checked for that (``bytes.isascii``, else a decode). tests/translators/responses/
test_create_body.py holds both parsers to that, case by case.

The dict's top-level keys come in ``FIELDS`` order, not the body's; an item's keys keep theirs.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import orjson
from msgspec import UNSET, Raw, UnsetType

from crossfeed.translators.bounded_json import DECODE_ERRORS, Json

RAW_OUTPUT_MIN: Final = 2048  # bytes of JSON: a shorter output is read as a str
TOOL_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output"})

# The top-level fields of a create request: the Responses API's, and what Codex sends besides.
FIELDS: Final = (
    "model",
    "instructions",
    "input",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "store",
    "stream",
    "stream_options",
    "include",
    "previous_response_id",
    "conversation",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "metadata",
    "client_metadata",
    "user",
    "max_output_tokens",
    "max_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "truncation",
    "background",
    "prompt",
    "context_management",
    "moderation",
)

# A WebSocket ``response.create`` frame is the body with these besides (proxy/http/websocket.py).
FRAME_FIELDS: Final = ("type", "stream_id", "generate", *FIELDS)


def _struct(name: str, fields: tuple[str, ...]) -> msgspec.json.Decoder[Any]:
    spec = [(f, str | list[dict[str, Raw]] | UnsetType if f == "input" else Raw | UnsetType, UNSET) for f in fields]
    return msgspec.json.Decoder(msgspec.defstruct(name, spec, forbid_unknown_fields=True))


_DECODER: Final = _struct("_Body", FIELDS)
_FRAME_DECODER: Final = _struct("_Frame", FRAME_FIELDS)
_json = msgspec.json.Decoder(Json).decode
_loads = orjson.loads
_Fragment = orjson.Fragment


def decode_create(raw: bytes) -> dict[str, Any] | None:
    """The body as ``orjson.loads`` reads it, long tool outputs as ``orjson.Fragment``; ``None``
    where that cannot be had this way (the caller parses the plain way)."""
    return _build(_DECODER, FIELDS, raw)


def decode_create_frame(data: str | bytes) -> dict[str, Any] | None:
    """``decode_create`` for a WebSocket text frame (its ``type`` and ``stream_id`` first). A
    frame's text holds no invalid UTF-8, but a ``str`` may hold a lone surrogate (escaped in the
    JSON it is read from, never in the text): orjson refuses it, and so does this, with None."""
    return _build(_FRAME_DECODER, FRAME_FIELDS, data)


def _build(decoder: msgspec.json.Decoder[Any], fields: tuple[str, ...], raw: str | bytes) -> dict[str, Any] | None:
    try:
        decoded = decoder.decode(raw)
    except (*DECODE_ERRORS, UnicodeEncodeError):
        return None
    body: dict[str, Any] = {}
    try:
        for name in fields:
            value = getattr(decoded, name)
            if value is UNSET:
                continue
            if name == "input":
                body[name] = value if value.__class__ is str else [_item(item) for item in value]
            else:
                body[name] = _value(value)
    except orjson.JSONDecodeError:
        return None
    return body


def _value(span: Raw) -> Any:
    """A span's value as orjson reads it: msgspec's decode into ``Json`` where it gives the same
    (twice as fast as ``orjson.loads`` of a memoryview), else orjson's (an integer past int64, a
    number past a double, a value nested deeper than ``JSON_DEPTH``)."""
    try:
        return _json(span)
    except DECODE_ERRORS:
        return _loads(memoryview(span))


def _item(spans: dict[str, Raw]) -> dict[str, Any]:
    item: dict[str, Any] = {}
    for key, span in spans.items():
        if key == "output" and len(span) >= RAW_OUTPUT_MIN:
            item[key] = span
            continue
        try:  # _value, inlined: an item has several values, a long history hundreds of items
            item[key] = _json(span)
        except DECODE_ERRORS:
            item[key] = _loads(memoryview(span))
    long = item.get("output")
    if long.__class__ is Raw:
        kind = item.get("type")
        item["output"] = _output(long, kind.__class__ is str and kind in TOOL_OUTPUTS)
    return item


def _output(span: Raw, keep: bool) -> Any:
    """A long ``output``: kept as JSON when it is a tool output's string that orjson reads
    without a doubt, else read."""
    data = bytes(span)
    if not keep or data[0] != 0x22:  # not a string: a list of content parts
        return _loads(data)
    if not data.isascii():
        try:
            data.decode()
        except UnicodeDecodeError:
            return _loads(data)  # raises orjson's error: the caller reads the body the plain way
    return _Fragment(data)


def output_text(output: Any) -> Any:
    """A tool output as text where it was kept as JSON; anything else as it is."""
    return _loads(orjson.dumps(output)) if output.__class__ is _Fragment else output
