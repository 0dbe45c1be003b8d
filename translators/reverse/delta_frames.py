"""Typed decoding of the reverse stream's most frequent frame: ``response.output_text.delta``.

A text delta carries seven fields, and the machine reads four (``delta``, ``output_index``,
``content_index``, ``logprobs``). Decoding them into a msgspec struct that declares only those
skips the rest (``item_id``, ``sequence_number``, ``obfuscation``...) without building Python
objects for them, as the forward stream does for chat chunks (translators/forward/chunk_frames.py).

Only frames whose bytes open with the event's ``type`` are decoded this way (OpenAI, vLLM,
llama-server and the Open Responses servers write ``type`` first); any other frame, and any
text delta of another shape (an index that is not an integer, logprobs, a ``delta`` that is not
a string, an index past 64 bits: the struct's types, checked by the decoder), goes the general
way: parsed to a dict and fed to the machine's handler, which reports a wrong shape exactly as it
always has.

The struct is ``gc=False``: decoded JSON cannot hold a reference cycle.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from crossfeed.translators.bounded_json import Int, Json

TEXT_DELTA_PREFIX = b'{"type":"response.output_text.delta"'


class TextDelta(msgspec.Struct, gc=False):
    """The shape the typed path takes; a delta of any other fails to decode, and goes the general
    way (no ``output_index``: an ``item_id`` to read; a ``null`` index; logprobs not an array)."""

    type: Literal["response.output_text.delta"]
    delta: str
    output_index: Int
    content_index: Int = 0  # absent: 0, as the general path reads it
    logprobs: list[Json] | None = None


decode_text_delta = msgspec.json.Decoder(TextDelta).decode
FRAME_ERRORS = (msgspec.DecodeError, RecursionError)
