"""Stop sequences applied by crossfeed (reverse direction): the pure matcher, the stream machine
that uses it (``StoppingChatStream``) and the non-streaming cut (``response_to_chat_completion``).

The matcher's one property: whatever the pieces, the text released equals the whole-text cut.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.reverse.body import response_to_chat_completion
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.stop_sequences import StopMatcher, cut, find_stop, normalize
from crossfeed.translators.reverse.stopping import StoppingChatStream
from crossfeed.translators.sse import DONE_FRAME, render_chat
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import accumulate_chat, validate_chat_chunks, validate_chat_sse

# ---------------------------------------------------------------- the matcher


@pytest.mark.parametrize(
    "text, stops, expected",
    [
        ("Hello END world", ["END"], ("Hello ", True)),
        ("Hello world", ["END"], ("Hello world", False)),
        ("END", ["END"], ("", True)),
        ("a\n\nb", ["\n\n"], ("a", True)),
        ("one two three", ["three", "two"], ("one ", True)),  # the first to occur wins, not the first listed
        ("abcd", ["abcd", "c"], ("ab", True)),  # "c" is complete before "abcd" is: a server stops there
        ("xabc", ["abc", "bc"], ("x", True)),  # both end at 4: the one starting first (the longer)
        ("aXa", ["", "X"], ("a", True)),  # an empty stop sequence is none
        ("ééSTOPé", ["STOP"], ("éé", True)),
    ],
)
def test_cut(text: str, stops: list[str], expected: tuple[str, bool]) -> None:
    assert cut(text, stops) == expected


def test_normalize_and_find_stop() -> None:
    assert normalize(["a", "", "b", "a"]) == ("a", "b")
    assert find_stop("xyz", ("q",)) is None
    with pytest.raises(ValueError):
        StopMatcher(["", ""])


def stream(pieces: list[str], stops: list[str]) -> tuple[str, bool, list[str]]:
    """Feed ``pieces``: (released text, stopped, what each feed released)."""
    m = StopMatcher(stops)
    released = []
    for piece in pieces:
        released.append(m.feed(piece))
        if m.stopped:
            break
    tail = m.finish()
    return "".join(released) + tail, m.stopped, released


def test_holds_back_only_a_possible_start_and_releases_it_when_it_is_not() -> None:
    m = StopMatcher(["END"])
    assert m.feed("Hello E") == "Hello " and m.held == "E"
    assert m.feed("N") == "" and m.held == "EN"
    assert m.feed("x") == "ENx" and m.held == ""  # "ENx" cannot start "END": released at once
    assert m.feed("yE") == "y" and m.feed("ND and more") == "" and m.stopped
    assert m.feed("later") == "" and m.finish() == ""


def test_nothing_is_held_that_cannot_start_a_stop_sequence() -> None:
    m = StopMatcher(["</answer>", "STOP"])
    assert m.feed("plain text") == "plain text" and m.held == ""
    assert m.feed("a <") == "a " and m.held == "<"
    assert m.feed("/ans") == "" and m.held == "</ans"
    assert m.feed("S") == "</ans" and m.held == "S"  # "S" may still start "STOP"
    assert m.finish() == "S"  # the end: what was held was no stop sequence


def test_a_stop_sequence_split_over_many_pieces() -> None:
    assert stream(list("abc<|end|>def"), ["<|end|>"])[:2] == ("abc", True)
    assert stream(["ab", "c<|e", "n", "d|", ">def"], ["<|end|>"])[:2] == ("abc", True)
    assert stream(["<|en", "d"], ["<|end|>"])[:2] == ("<|end", False)


TEXT = st.text(alphabet="abAB \n<>|é", max_size=40)
STOPS = st.lists(st.text(alphabet="abAB \n<>|é", min_size=1, max_size=5), min_size=1, max_size=4)


@settings(max_examples=400, deadline=None)
@given(text=TEXT, stops=STOPS, cuts=st.lists(st.integers(0, 40), max_size=8))
def test_split_anywhere_gives_the_whole_text_cut(text: str, stops: list[str], cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    got, stopped, released = stream(pieces, stops)
    assert (got, stopped) == cut(text, stops)
    # every release is final: what was released by each piece is a prefix of the answer
    assert got.startswith("".join(released))


@settings(max_examples=200, deadline=None)
@given(text=TEXT, stops=STOPS)
def test_character_by_character_and_whole_agree(text: str, stops: list[str]) -> None:
    assert stream(list(text), stops)[:2] == stream([text], stops)[:2] == cut(text, stops)


@settings(max_examples=200, deadline=None)
@given(text=TEXT, stops=STOPS)
def test_held_is_exactly_the_longest_possible_start(text: str, stops: list[str]) -> None:
    m = StopMatcher(stops)
    out = m.feed(text)
    if m.stopped:
        return
    assert out + m.held == text
    starts = [n for n in range(1, len(text) + 1) if any(len(s) > n and s.startswith(text[-n:]) for s in stops)]
    assert len(m.held) == max(starts, default=0)


# ---------------------------------------------------------------- the stream machine

OPTIONS = BackendProfile()
USAGE = {
    "input_tokens": 11,
    "output_tokens": 7,
    "total_tokens": 18,
    "input_tokens_details": {"cached_tokens": 3},
    "output_tokens_details": {"reasoning_tokens": 2},
}


def sse(*events: dict) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


def text_item(oi: int, text: str, **part: Any) -> dict:
    return {
        "type": "message",
        "id": f"msg_{oi}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], **part}],
    }


def text_events(oi: int, deltas: list[str], logprobs: list[list[dict]] | None = None) -> list[dict]:
    events = [
        {"type": "response.output_item.added", "output_index": oi, "item": {"type": "message", "id": f"msg_{oi}"}}
    ]
    for i, d in enumerate(deltas):
        ev = {"type": "response.output_text.delta", "output_index": oi, "content_index": 0, "delta": d}
        if logprobs is not None:
            ev["logprobs"] = logprobs[i]
        events.append(ev)
    events.append({"type": "response.output_item.done", "output_index": oi, "item": text_item(oi, "".join(deltas))})
    return events


def reasoning_events(oi: int, deltas: list[str]) -> list[dict]:
    return [
        {"type": "response.output_item.added", "output_index": oi, "item": {"type": "reasoning", "id": "rs"}},
        *(
            {"type": "response.reasoning_text.delta", "output_index": oi, "content_index": 0, "delta": d}
            for d in deltas
        ),
    ]


def call_events(oi: int, args: list[str]) -> list[dict]:
    return [
        {
            "type": "response.output_item.added",
            "output_index": oi,
            "item": {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "f", "arguments": ""},
        },
        *({"type": "response.function_call_arguments.delta", "output_index": oi, "delta": d} for d in args),
        {
            "type": "response.output_item.done",
            "output_index": oi,
            "item": {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "f", "arguments": "".join(args)},
        },
    ]


def lifecycle(*middle: dict, output: list[dict] | None = None) -> bytes:
    return sse(
        {"type": "response.created", "response": {"id": "r", "created_at": 5, "model": "up", "status": "in_progress"}},
        *middle,
        {
            "type": "response.completed",
            "response": {
                "id": "r",
                "created_at": 5,
                "model": "up",
                "status": "completed",
                "output": output or [],
                "usage": USAGE,
            },
        },
    )


def run(
    data: bytes, pieces: list[bytes] | None = None, *, stop: list[str], usage: bool = True, prompt_tokens: int = 40
) -> tuple[list[dict], StoppingChatStream]:
    machine = StoppingChatStream(
        stop=stop, prompt_tokens=prompt_tokens, include_usage=usage, options=OPTIONS, ids=SequentialIds(), now=lambda: 1
    )
    pump = Pump(machine)
    out: list[dict] = []
    for piece in pieces or [data]:
        out += pump.feed(piece)
    out += pump.finish()
    chunks = validate_chat_sse(render_chat(out) + DONE_FRAME, expect_usage=usage)
    return chunks, machine


def all_splits(data: bytes) -> list[list[bytes]]:
    return [[data], byte_by_byte(data), *(split_points(data, seed, 1 + seed * 3) for seed in range(10))]


def test_content_is_cut_across_deltas_and_the_machine_is_done() -> None:
    data = lifecycle(*text_events(0, ["Hello wor", "ld. EN", "D and then", " more"]))
    for pieces in all_splits(data):
        chunks, machine = run(data, pieces, stop=["END"])
        acc = accumulate_chat(chunks)
        assert acc["content"] == "Hello world. " and acc["finish_reason"] == "stop"
        assert machine.done and machine.finish_reason == "stop"
        assert machine.diagnostics == {"stop_sequence": 1, "usage_estimated": 1}
        # cut before the terminal event: nothing after the cut was read, usage is estimated
        assert acc["usage"] == {
            "prompt_tokens": 40,
            "completion_tokens": math.ceil(len("Hello world. ") / 4),
            "total_tokens": 40 + 4,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }


def test_the_pump_stops_feeding_at_the_cut() -> None:
    """Events after the cut in the same read are never fed (the relay then closes the upstream)."""
    data = lifecycle(*text_events(0, ["a STOP b", "more"]))
    machine = StoppingChatStream(
        stop=["STOP"], include_usage=False, options=OPTIONS, ids=SequentialIds(), now=lambda: 1
    )
    pump = Pump(machine)
    out = pump.feed(data)
    assert pump.done and machine.done
    assert pump.events_in == 3  # created, output_item.added, the delta with the stop sequence
    assert pump.feed(b"event: x\ndata: {}\n\n") == [] and pump.finish() == []
    assert accumulate_chat(validate_chat_sse(render_chat(out) + DONE_FRAME))["content"] == "a "


def test_held_text_is_released_at_the_end_when_no_stop_came() -> None:
    data = lifecycle(*text_events(0, ["answer E", "N"]))
    for pieces in all_splits(data):
        chunks, machine = run(data, pieces, stop=["END"])
        acc = accumulate_chat(chunks)
        assert acc["content"] == "answer EN" and acc["finish_reason"] == "stop"
        assert acc["usage"]["prompt_tokens"] == 11  # the upstream's own usage: the stream ran to its end
        assert "stop_sequence" not in machine.diagnostics


def test_reasoning_and_tool_arguments_are_not_cut() -> None:
    data = lifecycle(
        *reasoning_events(0, ["think END ", "more"]),
        *call_events(1, ['{"x": "END', '"}']),
        *text_events(2, ["text END rest"]),
    )
    chunks, _machine = run(data, stop=["END"])
    acc = accumulate_chat(chunks)
    assert acc["reasoning"] == "think END more"
    assert acc["tool_calls"] == [{"id": "call_1", "name": "f", "arguments": '{"x": "END"}'}]
    assert acc["content"] == "text " and acc["finish_reason"] == "stop"
    # the estimate counts what was sent: content, reasoning, arguments
    sent = len("text ") + len("think END more") + len('{"x": "END"}')
    assert acc["usage"]["completion_tokens"] == math.ceil(sent / 4)
    assert acc["usage"]["completion_tokens_details"]["reasoning_tokens"] == math.ceil(len("think END more") / 4)


def test_stop_across_two_message_items() -> None:
    """Items' text is joined with a blank line, in the stream as in the non-streamed answer."""
    data = lifecycle(*text_events(0, ["first"]), *text_events(1, ["second"]))
    chunks, _ = run(data, stop=["\n\nsec"])
    assert accumulate_chat(chunks)["content"] == "first"


def test_done_only_stream_is_cut_in_the_replayed_output() -> None:
    """No item events: the terminal Response's output is replayed, and cut; its usage is real."""
    data = lifecycle(output=[text_item(0, "one STOP two")])
    chunks, machine = run(data, stop=["STOP"])
    acc = accumulate_chat(chunks)
    assert acc["content"] == "one " and acc["finish_reason"] == "stop"
    assert acc["usage"]["prompt_tokens"] == 11 and "usage_estimated" not in machine.diagnostics


def test_without_include_usage_no_usage_chunk() -> None:
    data = lifecycle(*text_events(0, ["a STOP"]))
    chunks, machine = run(data, stop=["STOP"], usage=False)
    assert all(c.get("usage") is None for c in chunks)
    assert machine.usage == {"input_tokens": 40, "output_tokens": 1}  # the driver's accounting


def test_a_failure_after_held_text_releases_it_before_the_error() -> None:
    data = sse(
        {"type": "response.created", "response": {"id": "r", "created_at": 5, "model": "up"}},
        *text_events(0, ["abc S"])[:2],
    )
    chunks, _machine = run(data, stop=["STOP"])  # the stream ends without a terminal event
    assert chunks[-1]["error"]["code"] == "upstream_protocol_error"
    assert accumulate_chat(chunks)["content"] == "abc S"


def test_logprobs_go_with_their_text_and_are_cut_with_it() -> None:
    def lp(token: str) -> dict:
        return {"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}

    deltas = ["Hi ", "th", "ere S", "TOP x"]
    tokens = [["Hi", " "], ["th"], ["ere", " S"], ["TOP", " x"]]
    data = lifecycle(*text_events(0, deltas, [[lp(t) for t in ts] for ts in tokens]))
    for pieces in all_splits(data):
        chunks, _ = run(data, pieces, stop=["STOP"])
        sent = [
            e["token"] for c in chunks for ch in c["choices"] if ch.get("logprobs") for e in ch["logprobs"]["content"]
        ]
        assert accumulate_chat(chunks)["content"] == "Hi there "
        # " S" starts in text that was sent (the space) and goes; "TOP" and " x" are past the cut
        assert sent == ["Hi", " ", "th", "ere", " S"]


def test_an_open_custom_call_is_closed_at_the_cut() -> None:
    data = lifecycle(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "custom_tool_call", "id": "ct", "call_id": "call_c", "name": "patch", "input": ""},
        },
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": "raw"},
        *text_events(1, ["x STOP"]),
    )
    chunks, _ = run(data, stop=["STOP"])
    acc = accumulate_chat(chunks)
    assert orjson.loads(acc["tool_calls"][0]["arguments"]) == "raw"
    assert acc["finish_reason"] == "stop"


def test_the_plain_machine_is_unchanged() -> None:
    """Without stop the proxy uses ResponsesToChatStream itself: the stop sequence is content."""
    data = lifecycle(*text_events(0, ["a STOP b"]))
    machine = ResponsesToChatStream(include_usage=False, options=OPTIONS, ids=SequentialIds(), now=lambda: 1)
    pump = Pump(machine)
    out = pump.feed(data) + pump.finish()
    assert accumulate_chat(validate_chat_sse(render_chat(out) + DONE_FRAME))["content"] == "a STOP b"


# ---------------------------------------------------------------- non-streaming


def final(*output: dict, status: str = "completed") -> dict:
    return {
        "id": "r",
        "object": "response",
        "created_at": 5,
        "model": "up",
        "status": status,
        "output": list(output),
        "usage": USAGE,
    }


def complete(resp: dict, stop: list[str]) -> dict:
    return response_to_chat_completion(resp, options=OPTIONS, ids=SequentialIds(), stop=stop)


def test_non_streamed_content_is_cut_and_later_items_dropped() -> None:
    call = {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "f", "arguments": "{}"}
    out = complete(final(text_item(0, "Hello END world"), call), ["END"])
    choice = out["choices"][0]
    assert choice["message"]["content"] == "Hello " and choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]  # it came after the stop
    assert out["usage"]["prompt_tokens"] == 11  # what the upstream generated and reported


def test_non_streamed_calls_before_the_cut_stay_and_finish_is_stop() -> None:
    call = {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "f", "arguments": "{}"}
    out = complete(final(call, text_item(1, "ok. STOP")), ["STOP"])
    assert out["choices"][0]["message"]["tool_calls"][0]["id"] == "call_1"
    assert out["choices"][0]["finish_reason"] == "stop"


def test_non_streamed_annotations_and_logprobs_past_the_cut_are_dropped() -> None:
    ann = [
        {"type": "url_citation", "start_index": 0, "end_index": 8, "title": "t", "url": "u"},
        {"type": "url_citation", "start_index": 12, "end_index": 14, "title": "t2", "url": "u2"},
    ]
    lps = [
        {"token": t, "logprob": -1.0, "bytes": None, "top_logprobs": []} for t in ("Cited", " text", " ", "STOP", " x")
    ]
    item = text_item(0, "Cited text STOP x")
    item["content"][0].update(annotations=ann, logprobs=lps)
    out = complete(final(item), ["STOP"])
    msg = out["choices"][0]["message"]
    assert msg["content"] == "Cited text "
    assert [a["url_citation"]["url"] for a in msg["annotations"]] == ["u"]
    assert [e["token"] for e in out["choices"][0]["logprobs"]["content"]] == ["Cited", " text", " "]


def test_non_streamed_without_a_match_is_unchanged() -> None:
    resp = final(text_item(0, "nothing to cut"), status="incomplete")
    assert complete(resp, ["STOP"]) == complete(resp, [])


@pytest.mark.parametrize(
    "deltas, stop",
    [
        (["Hello wor", "ld. EN", "D and then"], ["END"]),
        (["no stop ", "here E"], ["END"]),
        (["a\n", "\nb"], ["\n\n"]),
        (["x", "yz"], ["abcd", "z"]),
    ],
)
def test_stream_and_non_stream_cut_the_same(deltas: list[str], stop: list[str]) -> None:
    text = "".join(deltas)
    data = lifecycle(*text_events(0, deltas), *text_events(1, ["tail"]))
    chunks, _ = run(data, stop=stop)
    streamed = accumulate_chat(chunks)
    whole = complete(final(text_item(0, text), text_item(1, "tail")), stop)["choices"][0]
    assert streamed["content"] == whole["message"]["content"]
    assert streamed["finish_reason"] == whole["finish_reason"] == "stop"
    validate_chat_chunks(chunks)
