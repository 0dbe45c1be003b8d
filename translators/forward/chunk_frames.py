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

from typing import Any

import msgspec

from crossfeed.translators.bounded_json import DECODE_ERRORS, Json


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
