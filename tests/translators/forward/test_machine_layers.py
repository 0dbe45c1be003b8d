"""The forward machine's layers and the numbering core the three Responses machines share.

``ChatToResponsesStream`` (the chunk reader) extends ``FrameRuns``, which extends ``ContentWriter``, which extends
``ResponseAssembler``, which extends the numbering core ``NumberedStream``; the Responses relay
and the normaliser extend the core too. These tests pin what the split promised: one place that
stamps dict events, one error event, and a per-token path no slower than one class's.
"""

from __future__ import annotations

from typing import Any

from crossfeed.translators.forward.assembler import ResponseAssembler
from crossfeed.translators.forward.content_writer import ContentWriter
from crossfeed.translators.forward.frame_runs import FrameRuns
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.responses.normalize import NormalizeResponses
from crossfeed.translators.responses.numbering import NumberedStream
from crossfeed.translators.responses.relay import ResponsesEventRelay

# CPython 3.11 keeps an instance's attributes in the fast layout (values beside a key table its
# class shares) for its first 29 names; with a 30th every attribute read and write of the
# instance takes a slower path (~12 % per access measured, and 1.5 % of the forward per-chunk row
# in bench/account.py). The numbering core's three attributes are slots: they do not count.
SHARED_KEYS_BUDGET = 29


def _machine(**kwargs: Any) -> ChatToResponsesStream:
    return ChatToResponsesStream({"model": "m"}, ids=SequentialIds(), now=lambda: 0, **kwargs)


def test_the_layers_extend_each_other() -> None:
    assert ChatToResponsesStream.__mro__[1:6] == (FrameRuns, ContentWriter, ResponseAssembler, NumberedStream, object)
    assert issubclass(ResponsesEventRelay, NumberedStream)
    assert issubclass(NormalizeResponses, NumberedStream)


def test_only_the_core_stamps_dict_events() -> None:
    for cls in (ChatToResponsesStream, ResponsesEventRelay, NormalizeResponses):
        for klass in cls.__mro__:
            if klass is not NumberedStream:
                assert "_emit" not in vars(klass), klass
                assert "_note" not in vars(klass), klass


def test_the_machine_keeps_its_attributes_in_the_fast_layout() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"reasoning_content": "why"}}]},
        {"choices": [{"index": 0, "delta": {"content": "<think>a</think>text"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 1}},
    ]
    for kwargs in ({}, {"wire": True}, {"profile": BackendProfile(think_tags=True)}):
        m = _machine(**kwargs)
        m.start()
        for chunk in chunks:
            m.feed(chunk)
        m.finish()
        assert len(vars(m)) <= SHARED_KEYS_BUDGET, sorted(vars(m))
    failed = _machine()
    failed.fail("upstream_error", "x")
    assert len(vars(failed)) <= SHARED_KEYS_BUDGET


def test_the_three_machines_send_one_error_event() -> None:
    forward = _machine()
    forward.start()
    relay = ResponsesEventRelay(model="m", ids=SequentialIds(), now=lambda: 0)
    normalize = NormalizeResponses(ids=SequentialIds(), now=lambda: 0, model="m")
    for machine in (forward, relay, normalize):
        out = machine.fail("upstream_truncated", "cut")
        first = 2 if machine is forward else 0  # the forward machine had sent created and in_progress
        assert [e["sequence_number"] for e in out] == list(range(first, first + len(out)))
        assert [e["type"] for e in out[-2:]] == ["error", "response.failed"]
        error = out[-2]
        assert error == {
            "type": "error",
            "code": "upstream_truncated",
            "message": "cut",
            "param": None,
            "error": {"type": "server_error", "code": "upstream_truncated", "message": "cut", "param": None},
            "sequence_number": error["sequence_number"],  # each numbers its own stream
        }
