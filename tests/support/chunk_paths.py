"""The forward machine's two ways of reading chat chunk frames, side by side: the typed path
(``feed_frame``, its text templates and runs) and plain JSON into ``feed`` (``typed_frames=False``).
Used by tests/translators/forward/test_chunk_frames.py and test_text_frames.py."""

from __future__ import annotations

from typing import Any

import orjson

from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile, ToolContext
from crossfeed.translators.pump import Pump
from crossfeed.translators.sse import render_responses
from tests.support.validators import validate_responses_events


def machine(think_tags: bool = False, wire: bool = False) -> ChatToResponsesStream:
    tools = ToolContext(custom_tools=frozenset({"apply_patch"}))
    return ChatToResponsesStream(
        {"model": "m", "stream": True},
        ids=SequentialIds(),
        now=lambda: 1,
        tools=tools,
        profile=BackendProfile(think_tags=think_tags),
        wire=wire,
    )


def translate(
    frames: list[bytes],
    *,
    typed: bool,
    think_tags: bool = False,
    whole: bool = False,
    clean: bool = True,
    wire: bool = False,
) -> tuple[list[Any], Any, dict]:
    m = machine(think_tags, wire)
    pump = Pump(m, typed_frames=typed)
    out = m.start()
    for piece in [b"".join(frames)] if whole else frames:
        out += pump.feed(piece)
    if clean:
        out += pump.feed(b"data: [DONE]\n\n")
    out += pump.finish()
    return out, m.final_response, m.diagnostics


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def assert_same(frames: list[bytes], **kw: Any) -> list[dict]:
    typed = translate(frames, typed=True, **kw)
    plain = translate(frames, typed=False, **kw)
    assert typed == plain
    wire = translate(frames, typed=True, wire=True, **kw)
    assert render_responses(wire[0]) == render_responses(plain[0])
    assert wire[1:] == plain[1:]
    validate_responses_events(typed[0])
    return typed[0]
