"""The forward machine's two ways of reading chat chunk frames, side by side: the typed path
(``feed_frame``, its text and argument templates and runs) and plain JSON into ``feed``
(``typed_frames=False``); and the typed path with its templates against the typed decode of every
frame (``assert_as_decoded``). Used by tests/translators/forward/test_chunk_frames.py,
test_text_frames.py and test_args_frames.py."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any
from unittest import mock

import orjson

import crossfeed.translators.forward.frame_runs as runs_mod
import crossfeed.translators.forward.machine as c2r
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


def fed(reads: list[bytes], *, wire: bool) -> tuple[list[Any], Any, dict]:
    """The outputs, final Response and diagnostics of ``reads`` through the pump, ended cleanly."""
    m = machine(wire=wire)
    pump = Pump(m)
    out = m.start()
    for read in reads:
        out += pump.feed(read)
    out += pump.feed(b"data: [DONE]\n\n") + pump.finish()
    return out, m.final_response, m.diagnostics


def assert_as_decoded(frames: list[bytes], cuts: Sequence[int] = (), *, plain: bool = False) -> None:
    """The events with templates are those of the typed decode of every frame (no template ever
    learned), in dicts and in wire mode: frame by frame, the whole stream in one read (feed_run's
    runs) and the stream cut at ``cuts``. ``plain``: and those of plain JSON into ``feed`` (where
    the two decodes judge no frame differently)."""
    with mock.patch.object(runs_mod, "LEARN_TRIES", 0), mock.patch.object(c2r, "LEARN_TRIES", 0):
        decoded = fed(frames, wire=False)
    body = b"".join(frames)
    bounds = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    for reads in (frames, [body], [body[a:b] for a, b in itertools.pairwise(bounds)]):
        assert fed(reads, wire=False) == decoded
        wire = fed(reads, wire=True)
        assert render_responses(wire[0]) == render_responses(decoded[0])
        assert wire[1:] == decoded[1:]
    if plain:
        assert_same(frames)
    validate_responses_events(decoded[0])
