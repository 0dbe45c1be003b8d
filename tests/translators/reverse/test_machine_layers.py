"""The reverse machine's layers (chunks, text parts, tool calls, text runs, other deltas, the
machine) cost nothing a chunk: no instance dict, and a content delta after the first runs three
Python calls (``feed``, its handler, ``_content``), its frame made from the stream's template
without a call to ``_frame`` (docs/benchmark.md, "the reverse machine in layers")."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.reverse.chunks import ChunkWriter
from crossfeed.translators.reverse.delta_reads import DeltaReads
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.stopping import StoppingChatStream
from crossfeed.translators.reverse.stream_state import DELTA_KINDS, DONE_FIELDS, PART_FIELDS, REASONING_KINDS
from crossfeed.translators.reverse.text_parts import TextStream
from crossfeed.translators.reverse.text_runs import TextRuns
from crossfeed.translators.reverse.tool_calls import CallStream

CREATED = {"type": "response.created", "response": {"id": "resp_1", "created_at": 1, "model": "m"}}


def text_delta(delta: str = "w") -> dict[str, Any]:
    return {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": delta}


def reasoning_delta(delta: str = "r") -> dict[str, Any]:
    return {"type": "response.reasoning_text.delta", "output_index": 1, "content_index": 0, "delta": delta}


def machine() -> ResponsesToChatStream:
    return ResponsesToChatStream(
        include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 0, wire=True
    )


def calls_of(m: ResponsesToChatStream, event: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """The Python functions ``m.feed(event)`` runs, in order, and what it returned."""
    names: list[str] = []

    def profile(frame: FrameType, event_name: str, arg: Any) -> None:
        if event_name == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = m.feed(event)
    finally:
        sys.setprofile(None)
    return names, out


def test_the_layers_in_order_and_no_instance_dict() -> None:
    assert ResponsesToChatStream.__mro__[1:] == (DeltaReads, TextRuns, CallStream, TextStream, ChunkWriter, object)
    for cls in (*ResponsesToChatStream.__mro__[:-1], StoppingChatStream):
        assert "__slots__" in vars(cls), cls
    m = machine()
    assert not hasattr(m, "__dict__")
    stopping = StoppingChatStream(
        stop=["x"], include_usage=False, options=BackendProfile(), ids=SequentialIds(), now=lambda: 0
    )
    assert not hasattr(stopping, "__dict__")


def test_a_text_delta_is_three_calls_and_its_frame_the_template() -> None:
    m = machine()
    m.feed(CREATED)
    first = m.feed(text_delta("a"))  # the role chunk, then the first frame (which makes the template)
    assert len(first) == 2
    names, out = calls_of(m, text_delta("b"))
    assert names == ["feed", "_on_text_delta", "_content"]
    assert out == [
        b'data: {"id":"chatcmpl-0001","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"b"},"logprobs":null,"finish_reason":null}]}\n\n'
    ]


def test_a_reasoning_delta_after_the_first_does_not_call_frame() -> None:
    m = machine()
    m.feed(CREATED)
    m.feed(reasoning_delta("a"))
    names, out = calls_of(m, reasoning_delta("b"))
    assert "_frame" not in names
    assert names[:2] == ["feed", "_on_other_delta"] and names[-1] == "_reasoning"
    assert out == [
        b'data: {"id":"chatcmpl-0001","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"reasoning_content":"b"},"logprobs":null,"finish_reason":null}]}\n\n'
    ]


def test_part_kinds_are_the_responses_part_types() -> None:
    assert {f.kind for f in PART_FIELDS.values()} | set(DELTA_KINDS.values()) | {
        d.kind for d in DONE_FIELDS.values()
    } == {"output_text", "refusal", "summary_text", "reasoning_text"}
    assert set(REASONING_KINDS) == {"summary_text", "reasoning_text"}
    for part_type, found in PART_FIELDS.items():
        assert found.kind == part_type
