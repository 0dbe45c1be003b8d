"""``Continuing`` (proxy/turns/continuation.py): which failures it keeps for a continuation and which
go to the machine as before; the budget; the repeated prefill dropped on the continuation leg."""

from __future__ import annotations

import pytest

from crossfeed.proxy.turns.continuation import Continuing
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.pump import Pump
from tests.support.chat_chunks import DONE, chunk
from tests.support.validators import validate_responses_events


def continuing(budget: int = 1) -> Continuing:
    machine = ChatToResponsesStream({"model": "m", "stream": True}, ids=SequentialIds(), now=lambda: 1)
    return Continuing(machine, budget)


@pytest.mark.parametrize("code", ["upstream_disconnected", "upstream_idle_timeout"])
def test_a_broken_stream_mid_text_is_kept_for_a_continuation(code: str) -> None:
    cont = continuing()
    out = cont.start() + Pump(cont).feed(chunk({"content": "Hello, wor"}))
    assert cont.fail(code, "gone") == [] and cont.done and cont.broken == (code, "gone")
    assert cont.prefill == "Hello, wor" and not cont.machine.done
    cont.resume()
    pump = Pump(cont)
    out += pump.feed(chunk({"role": "assistant", "content": None}) + chunk({"content": "Hello, world"}))
    out += pump.feed(chunk({}, "stop") + DONE)
    validate_responses_events(out)
    assert out[-1]["type"] == "response.completed"
    assert out[-1]["response"]["output"][0]["content"][0]["text"] == "Hello, world"  # the repetition dropped


def test_a_close_without_finish_is_kept_and_one_with_a_finish_is_not() -> None:
    cont = continuing()
    cont.start()
    Pump(cont).feed(chunk({"content": "x"}))
    assert cont.finish(clean=False) == [] and cont.broken is not None
    done = continuing()
    done.start()
    Pump(done).feed(chunk({"content": "x"}, "stop"))
    assert done.finish(clean=False)[-1]["type"] == "response.completed"


@pytest.mark.parametrize("code", ["upstream_timeout", "server_shutting_down", "upstream_protocol_error"])
def test_other_failures_are_the_machines(code: str) -> None:
    cont = continuing()
    cont.start()
    Pump(cont).feed(chunk({"content": "x"}))
    assert cont.fail(code, "no")[-1]["type"] == "response.failed" and cont.broken is None


def test_the_budget_and_giving_up() -> None:
    cont = continuing(budget=1)
    cont.start()
    Pump(cont).feed(chunk({"content": "x"}))
    cont.fail("upstream_disconnected", "gone")
    cont.resume()
    Pump(cont).feed(chunk({"content": "y"}))
    out = cont.fail("upstream_disconnected", "gone again")  # none left: the machine fails
    assert out[-1]["type"] == "response.failed" and out[-1]["response"]["error"]["code"] == "upstream_disconnected"
    other = continuing()
    other.start()
    Pump(other).feed(chunk({"content": "x"}))
    other.fail("upstream_idle_timeout", "quiet")
    out = other.give_up()  # no replica to take it: the failure it would have had
    assert out[-1]["response"]["error"]["code"] == "upstream_idle_timeout" and other.machine.done


@pytest.mark.parametrize(
    "rest",
    [
        chunk({"reasoning_content": "ink."}) + chunk({"content": "Answer"}),  # a reasoning parser
        chunk({"content": "ink.</think>\n\nAnswer"}),  # raw content: the block the prefill opened
        chunk({"content": "<think>\nLet me th"}) + chunk({"content": "ink.</think>\n\nAnswer"}),  # repeated first
    ],
    ids=["reasoning_deltas", "raw_content", "repeated_raw_content"],
)
def test_a_stream_broken_in_its_reasoning_goes_on_in_one_reasoning_item(rest: bytes) -> None:
    cont = continuing()
    out = cont.start() + Pump(cont).feed(
        chunk({"role": "assistant", "content": ""}) + chunk({"reasoning": "Let me th"})
    )
    assert cont.fail("upstream_disconnected", "gone") == [] and cont.broken is not None
    assert (cont.prefill, cont.reasoning) == ("Let me th", True)
    cont.resume()
    pump = Pump(cont)
    out += pump.feed(chunk({"role": "assistant", "content": None}) + rest)
    out += pump.feed(chunk({}, "stop") + DONE)
    validate_responses_events(out)
    final = out[-1]["response"]
    assert out[-1]["type"] == "response.completed"
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert final["output"][0]["content"][0]["text"] == "Let me think."
    assert final["output"][1]["content"][0]["text"] == "Answer"


def test_a_stream_broken_in_a_call_after_reasoning_is_the_machines() -> None:
    cont = continuing()
    cont.start()
    Pump(cont).feed(
        chunk({"reasoning_content": "call it"})
        + chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}]})
    )
    assert cont.fail("upstream_disconnected", "gone")[-1]["type"] == "response.failed" and cont.broken is None
