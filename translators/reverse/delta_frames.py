"""Typed decoding of the reverse stream's most frequent frames: its deltas.

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

from collections.abc import Callable
from typing import Literal, Protocol

import msgspec

from crossfeed.translators.bounded_json import DECODE_ERRORS, Int, Json

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

# The other deltas of a tool or reasoning stream: a call's arguments (or custom input), a
# reasoning item's text or summary. The machine reads ``delta``, ``output_index`` and the part's
# index; a refusal delta, one with an ``item_id`` instead of an ``output_index``, a ``null``
# index, go the general way as above.
ARGS_DELTAS = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")
REASONING_DELTAS = (
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.reasoning.delta",
)
OTHER_DELTA_PREFIXES = tuple(b'{"type":"' + t.encode() + b'"' for t in (*ARGS_DELTAS, *REASONING_DELTAS))


class OtherDelta(msgspec.Struct, gc=False):
    type: Literal[
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning.delta",
    ]
    delta: str
    output_index: Int
    content_index: Int = 0  # absent: 0 (reasoning_text's part)
    summary_index: Int = 0  # absent: 0 (reasoning_summary_text's part)


decode_other_delta = msgspec.json.Decoder(OtherDelta).decode


class PartDelta(Protocol):
    """A reasoning delta of one kind, its part's index under one name (``part_decoders``)."""

    delta: str
    output_index: int
    index: int


# ``type`` stays declared: a frame naming its type twice decodes as the general path reads it.
class ReasoningTextDelta(msgspec.Struct, gc=False):
    type: Literal["response.reasoning_text.delta"]
    delta: str
    output_index: Int
    index: Int = msgspec.field(default=0, name="content_index")


class ReasoningDelta(msgspec.Struct, gc=False):  # Open Responses' name of reasoning_text.delta
    type: Literal["response.reasoning.delta"]
    delta: str
    output_index: Int
    index: Int = msgspec.field(default=0, name="content_index")


class SummaryTextDelta(msgspec.Struct, gc=False):
    type: Literal["response.reasoning_summary_text.delta"]
    delta: str
    output_index: Int
    index: Int = msgspec.field(default=0, name="summary_index")


# A delta of the reasoning part the last one continued (delta_reads.py ``_rrun``): its kind is
# known, so its struct declares only that kind's index, and no other field has a default to fill.
part_decoders: dict[str, Callable[[bytes], PartDelta]] = {
    "response.reasoning_text.delta": msgspec.json.Decoder(ReasoningTextDelta).decode,
    "response.reasoning.delta": msgspec.json.Decoder(ReasoningDelta).decode,
    "response.reasoning_summary_text.delta": msgspec.json.Decoder(SummaryTextDelta).decode,
}


class ArgsDelta(msgspec.Struct, gc=False):
    """A call's arguments (or custom input) delta alone: what a read under such an event line
    decodes first (delta_reads.call_frame)."""

    type: Literal["response.function_call_arguments.delta", "response.custom_tool_call_input.delta"]
    delta: str
    output_index: Int


decode_args_delta = msgspec.json.Decoder(ArgsDelta).decode
FRAME_ERRORS = DECODE_ERRORS
