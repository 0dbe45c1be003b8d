"""The pure parts of compaction: trigger placement, the window, system placement, the estimate,
and the summary leg's edge cases. (The seal's domain separation for summaries is tested with the
seal: tests/proxy/state/test_reasoning_seal.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.translators.errors import InvalidRequest, StreamStateError, UpstreamProtocolError
from crossfeed.translators.forward.compaction import (
    SUMMARY_PREFIX,
    SummaryLeg,
    compact_threshold,
    compacted_output,
    estimate_tokens,
    place_system,
    summary_message,
    summary_of_completion,
    summary_request,
    trigger_in,
    window,
)
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from tests.support.chat_chunks import chat_chunk

S = {"role": "system", "content": "s"}
U = {"role": "user", "content": "u"}
A = {"role": "assistant", "content": "a"}


def test_trigger_must_be_last_and_alone() -> None:
    assert trigger_in([U, {"type": "compaction_trigger"}]) is True
    assert trigger_in([U]) is False and trigger_in("hi") is False and trigger_in([]) is False
    with pytest.raises(InvalidRequest) as info:
        trigger_in([{"type": "compaction_trigger"}, U])
    assert info.value.param == "input[0]"
    with pytest.raises(InvalidRequest) as info:
        trigger_in([{"type": "compaction_trigger", "id": "ct_1"}, {"type": "compaction_trigger"}])
    assert info.value.param == "input[0]"


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        ("merge", [{"role": "system", "content": "s\n\nd1\n\nd2"}, U, A, U]),
        ("keep", [S, {"role": "system", "content": "d1"}, U, A, {"role": "system", "content": "d2"}, U]),
        ("user", [S, {"role": "user", "content": "d1"}, U, A, {"role": "user", "content": "d2"}, U]),
    ],
)
def test_system_placement(placement: Any, expected: list[dict[str, Any]]) -> None:
    messages = [S, {"role": "system", "content": "d1"}, U, A, {"role": "system", "content": "d2"}, U]
    assert place_system(messages, placement, "system") == expected


def test_merge_leaves_a_well_formed_history_alone_and_moves_a_late_one_to_the_front() -> None:
    ok = [S, U, A]
    assert place_system(ok, "merge", "system") is ok
    assert place_system([U, S], "merge", "system") == [S, U]
    assert place_system([U, A], "merge", "system") == [U, A]
    dev = [{"role": "developer", "content": "x"}, U, {"role": "developer", "content": [{"type": "text", "text": "y"}]}]
    assert place_system(dev, "merge", "developer") == [{"role": "developer", "content": "x\n\ny"}, U]


def test_window_keeps_system_and_user_messages_but_not_older_summaries() -> None:
    old = summary_message("old")
    assert window([S, U, A, {"role": "tool", "tool_call_id": "c", "content": "o"}, old, U], "system") == [S, U, U]
    assert old["content"].startswith(SUMMARY_PREFIX)


def test_summary_request_has_no_tools_and_ends_with_the_prompt() -> None:
    chat = {
        "model": "m",
        "messages": [S, U],
        "tools": [{}],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "response_format": {"type": "json_object"},
        "temperature": 0.2,
        "stream": True,
    }
    asked = summary_request(chat, "P")
    assert asked == {
        "model": "m",
        "messages": [S, U, {"role": "user", "content": "P"}],
        "temperature": 0.2,
        "stream": True,
    }
    assert chat["messages"] == [S, U]  # not changed in place


def test_estimate_grows_with_the_input_and_counts_tools() -> None:
    one = estimate_tokens([U])
    assert one == -(-len(b'[{"role":"user","content":"u"}]') // 4) + 4
    assert estimate_tokens([U, {"role": "user", "content": "x" * 400}]) > one + 100
    assert estimate_tokens([U], [{"type": "function", "function": {"name": "f" * 80}}]) > one + 20


@pytest.mark.parametrize(
    ("entries", "param"),
    [
        ([{"type": "other"}], "context_management[0].type"),
        ([{"type": "compaction", "compact_threshold": 0}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": "9"}], "context_management[0].compact_threshold"),
        (["x"], "context_management[0]"),
    ],
)
def test_bad_context_management(entries: list[Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        compact_threshold({"context_management": entries})
    assert info.value.param == param


def test_threshold() -> None:
    assert compact_threshold({"context_management": [{"type": "compaction", "compact_threshold": 500}]}) == 500
    assert compact_threshold({"context_management": [{"type": "compaction"}]}) is None
    assert compact_threshold({}) is None


def test_compacted_output_is_the_user_messages_then_the_item() -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "t"}
    items = [
        {"type": "message", "role": "developer", "content": []},
        {"type": "message", "role": "user", "content": []},
        {"type": "function_call", "call_id": "c"},
        {"type": "message", "role": "assistant", "content": []},
        {"role": "user", "content": "x"},
    ]
    done = {"status": "completed"}
    assert compacted_output(items, item) == [{**items[1], **done}, {**items[4], **done}, item]


def _leg(last: bool = True, think: bool = False) -> tuple[ChatToResponsesStream, SummaryLeg]:
    main = ChatToResponsesStream({"model": "m"}, ids=SequentialIds(), now=lambda: 1)
    return main, SummaryLeg(main, lambda s: "sealed:" + s, "cmp_1", last=last, profile=BackendProfile(think_tags=think))


def test_summary_leg_ignores_other_choices_and_reasoning() -> None:
    main, leg = _leg()
    leg.start()
    leg.feed({"choices": [{"index": 1, "delta": {"content": "other"}}]})
    leg.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm", "content": "A"}}]})
    leg.feed(chat_chunk({"content": "B"}, "stop"))
    leg.feed(chat_chunk(None, usage=(3, 2)))
    out = leg.finish()
    final = main.final_response
    assert final is not None and final["output"] == [
        {"id": "cmp_1", "type": "compaction", "encrypted_content": "sealed:AB"}
    ]
    assert final["usage"]["total_tokens"] == 5 and out[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    ("chunks", "clean", "code"),
    [
        ([chat_chunk({"content": "x"})], False, "upstream_truncated"),
        ([chat_chunk({"content": "x"}, "content_filter")], True, "content_filter"),
        ([chat_chunk({"content": "  \n"}, "stop")], True, "empty_summary"),
        ([{"error": {"message": "boom", "code": "overloaded"}}], True, "overloaded"),
        ([{"choices": "nope"}], True, "upstream_protocol_error"),
    ],
)
def test_summary_leg_failures(chunks: list[dict[str, Any]], clean: bool, code: str) -> None:
    main, leg = _leg()
    leg.start()
    for c in chunks:
        leg.feed(c)
    if not main.done:
        leg.finish(clean=clean)
    final = main.final_response
    assert final is not None and final["status"] == "failed" and final["error"]["code"] == code
    assert final["output"] == []


def test_summary_leg_not_last_leaves_the_response_open_for_the_answer() -> None:
    main, leg = _leg(last=False)
    leg.start()
    leg.feed(chat_chunk({"content": "sum"}, "stop"))
    leg.finish()
    assert not main.done
    main.feed(chat_chunk({"content": "answer"}, "stop"))
    main.finish()
    final = main.final_response
    assert final is not None and [o["type"] for o in final["output"]] == ["compaction", "message"]


def test_begin_item_refuses_while_an_upstream_item_is_open() -> None:
    main = ChatToResponsesStream({"model": "m"}, ids=SequentialIds(), now=lambda: 1)
    main.start()
    main.feed(chat_chunk({"content": "half"}))
    with pytest.raises(StreamStateError):
        main.begin_item({"id": "x", "type": "compaction"})


def test_summary_of_a_completion() -> None:
    c = {"choices": [{"message": {"content": "<think>no</think>  yes  "}}], "usage": {"total_tokens": 3}}
    assert summary_of_completion(c) == ("yes", {"total_tokens": 3})
    assert summary_of_completion({"choices": [{"message": {"content": None}}]}) == ("", None)
    for bad in ([], {"choices": []}, {"choices": [{"message": "x"}]}):
        with pytest.raises(UpstreamProtocolError):
            summary_of_completion(bad)
