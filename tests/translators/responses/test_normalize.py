"""NormalizeResponses: a sloppy native /v1/responses stream (llama-server's) re-emitted strict.

The llama-server streams here follow its emitter (tools/server/server-task.cpp,
``to_json_oaicompat_resp`` for the streamed events, ``to_json_oaicompat_resp_stream`` for the
final ones): no sequence_number, output_index or content_index; a minimal Response on
created/in_progress (repeated while the prompt is processed); no content_part.added for
reasoning; no reasoning_text.done, no function_call_arguments.done; every item's done event only
at the end, after the next items opened; ``response.completed`` even when the token budget cut the
answer; errors as a bare ``data: {"error": {...}}`` frame.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import orjson
import pytest

from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.pump import Pump
from crossfeed.translators.responses.normalize import NormalizeResponses
from crossfeed.translators.sse import render_responses
from tests.support import validators
from tests.support.captures import capture_files, data_objects, read_capture
from tests.support.open_responses import check_events
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import StreamViolation

# The normaliser guarantees the strict-client rules for any producer; the fields a third party's
# Response carries are its own, so the Open Responses schema is checked only on the recorded
# llama-server streams (test_recorded_llama_server_streams_are_open_responses).
validate_responses_events = functools.partial(validators.validate_responses_events, open_responses=False)
validate_responses_sse = functools.partial(validators.validate_responses_sse, open_responses=False)

RESP, RS, MSG = "resp_llama0001", "rs_llama0002", "msg_llama0003"
TERMINALS = ("response.completed", "response.incomplete", "response.failed")


# -- llama-server streams -------------------------------------------------------------------


def _lifecycle(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "response": {"id": RESP, "object": "response", "status": "in_progress"}, **extra}


def llama_opening(progress: int = 1) -> list[dict[str, Any]]:
    events = [_lifecycle("response.created"), _lifecycle("response.in_progress")]
    for n in range(progress):  # is_progress: another in_progress per prompt-processing report
        events.append(_lifecycle("response.in_progress", prompt_progress={"total": 40, "processed": 20 * (n + 1)}))
    return events


def llama_reasoning(pieces: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "item": {
                "id": RS,
                "summary": [],
                "type": "reasoning",
                "content": [],
                "encrypted_content": "",
                "status": "in_progress",
            },
        }
    ]
    return events + [{"type": "response.reasoning_text.delta", "delta": p, "item_id": RS} for p in pieces]


def llama_text(pieces: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "item": {"content": [], "id": MSG, "role": "assistant", "status": "in_progress", "type": "message"},
        },
        {"type": "response.content_part.added", "item_id": MSG, "part": {"type": "output_text", "text": ""}},
    ]
    return events + [{"type": "response.output_text.delta", "item_id": MSG, "delta": p} for p in pieces]


def llama_call(call: str, name: str, pieces: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "item": {
                "id": "fc_" + call,
                "arguments": "",
                "call_id": "call_" + call,
                "name": name,
                "type": "function_call",
                "status": "in_progress",
            },
        }
    ]
    return events + [
        {"type": "response.function_call_arguments.delta", "delta": p, "item_id": "fc_" + call} for p in pieces
    ]


def llama_final(
    reasoning: str = "", text: str = "", calls: tuple[tuple[str, str, str], ...] = (), output_tokens: int = 12
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    output: list[dict[str, Any]] = []
    if reasoning:
        item = {
            "id": RS,
            "summary": [],
            "type": "reasoning",
            "encrypted_content": "",
            "content": [{"text": reasoning, "type": "reasoning_text"}],
        }
        events.append({"type": "response.output_item.done", "item": item})
        output.append(item)
    if text:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        item = {"type": "message", "status": "completed", "id": MSG, "content": [part], "role": "assistant"}
        events += [
            {"type": "response.output_text.done", "item_id": MSG, "text": text},
            {"type": "response.content_part.done", "item_id": MSG, "part": part},
            {"type": "response.output_item.done", "item": item},
        ]
        output.append(item)
    for call, name, args in calls:
        item = {
            "id": "fc_" + call,
            "type": "function_call",
            "status": "completed",
            "arguments": args,
            "call_id": "call_" + call,
            "name": name,
        }
        events.append({"type": "response.output_item.done", "item": item})
        output.append(item)
    usage = {
        "input_tokens": 30,
        "output_tokens": output_tokens,
        "total_tokens": 30 + output_tokens,
        "input_tokens_details": {"cached_tokens": 0},
    }
    events.append(
        {
            "type": "response.completed",
            "timings": {"predicted_n": output_tokens},
            "response": {
                "id": RESP,
                "object": "response",
                "created_at": 1750000000,
                "status": "completed",
                "model": "qwen3-8b",
                "output": output,
                "usage": usage,
            },
        }
    )
    return events


LLAMA_TEXT = llama_opening() + llama_text(["Hello", ",", " world", "!"]) + llama_final(text="Hello, world!")
LLAMA_REASONING_TEXT = (
    llama_opening(2)
    + llama_reasoning(["The user", " greets me."])
    + llama_text(["Hi", " there."])
    + llama_final(reasoning="The user greets me.", text="Hi there.")
)
CALLS = (("A1", "get_weather", '{"city": "Paris"}'), ("B2", "get_time", '{"tz": "CET"}'))
LLAMA_CALLS = (
    llama_opening()
    + llama_call("A1", "get_weather", ['{"city"', ': "Paris"}'])
    + llama_call("B2", "get_time", ['{"tz": "CET"}'])
    + llama_final(calls=CALLS)
)
LLAMA_CUT = (
    llama_opening()
    + llama_text(["The capital", " of France", " is Par"])
    + llama_final(text="The capital of France is Par", output_tokens=8)
)
LLAMA_STREAMS = {"text": LLAMA_TEXT, "reasoning_text": LLAMA_REASONING_TEXT, "calls": LLAMA_CALLS, "cut": LLAMA_CUT}


def sse(events: list[dict[str, Any]]) -> bytes:
    """llama-server's framing (format_oai_resp_sse): ``event:`` + ``data:``; errors data-only."""
    out = b":\n\n"  # its keep-alive ping
    for e in events:
        head = b"" if "type" not in e else b"event: " + e["type"].encode() + b"\n"
        out += head + b"data: " + orjson.dumps(e) + b"\n\n"
    return out


# -- helpers --------------------------------------------------------------------------------


def machine(**kw: Any) -> NormalizeResponses:
    return NormalizeResponses(ids=SequentialIds(), now=lambda: 1700000000, **kw)


def check(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Strict for the validator, as events and as SSE; exactly one terminal event, the last."""
    validate_responses_events(out)
    assert validate_responses_sse(render_responses(out)) == orjson.loads(orjson.dumps(out))
    assert [e["type"] for e in out if e["type"] in TERMINALS] == [out[-1]["type"]]
    return out


def run(events: list[dict[str, Any]], *, clean: bool = True, validate: bool = True, **kw: Any) -> list[dict[str, Any]]:
    m = machine(**kw)
    out: list[dict[str, Any]] = []
    for e in copy.deepcopy(events):  # the machine fills in the events it is given
        out += m.feed(e)
    if not m.done:
        out += m.finish(clean=clean)
    assert m.done
    return check(out) if validate else out


def types(out: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in out]


def text_of(item: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in item["content"])


def pumped(raw: bytes, pieces: list[bytes] | None = None, **kw: Any) -> list[dict[str, Any]]:
    pump = Pump(machine(**kw))  # type: ignore[arg-type]  # (Machine's outputs may be bytes too)
    out: list[Any] = []
    for piece in pieces if pieces is not None else [raw]:
        out += pump.feed(piece)
    out += pump.finish()
    return out


# -- the llama-server streams ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LLAMA_STREAMS))
def test_raw_llama_streams_are_rejected(name: str) -> None:
    """The un-normalized streams break the strict rules, and not only for lack of numbering."""
    raw = copy.deepcopy(LLAMA_STREAMS[name])
    with pytest.raises(StreamViolation, match="sequence_number"):
        validate_responses_events(raw)
    for seq, event in enumerate(raw):
        event["sequence_number"] = seq
    with pytest.raises(StreamViolation):
        validate_responses_events(raw)


def test_llama_text() -> None:
    out = run(LLAMA_TEXT)
    assert types(out) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        *["output_text.delta"] * 4,
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert out[0]["response"]["id"] == out[-1]["response"]["id"] == RESP
    assert out[0]["response"]["created_at"] == 1700000000 and out[0]["response"]["output"] == []
    assert all(e["output_index"] == 0 and e["item_id"] == MSG for e in out[3:9])
    assert all(e["content_index"] == 0 and e["logprobs"] == [] for e in out[4:9])
    assert out[3]["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    final = out[-1]["response"]
    assert [i["id"] for i in final["output"]] == [MSG] and text_of(final["output"][0]) == "Hello, world!"
    assert final["model"] == "qwen3-8b" and final["status"] == "completed"
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}
    assert final["usage"]["output_tokens"] == 12 and final["usage"]["total_tokens"] == 42


def test_llama_reasoning_then_text() -> None:
    """Reasoning is closed (with the done events llama never sends) when the message opens;
    llama's own reasoning done, sent at the very end, is dropped."""
    out = run(LLAMA_REASONING_TEXT)
    assert types(out) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    reasoning, message = out[8]["item"], out[15]["item"]
    assert out[6]["text"] == "The user greets me." and out[6]["output_index"] == 0
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "The user greets me."}]
    assert reasoning["status"] == "completed" and reasoning["encrypted_content"] == ""
    assert out[9]["output_index"] == 1 and all(e["output_index"] == 1 for e in out[10:16])
    assert text_of(message) == "Hi there." and message["status"] == "completed"
    assert out[-1]["response"]["output"] == [reasoning, message]


def test_llama_function_calls() -> None:
    """Each call's arguments.done is emitted (llama sends none); the first call closes when the
    second opens, and the final output keeps llama's ids and call ids."""
    out = run(LLAMA_CALLS)
    assert types(out) == [
        "created",
        "in_progress",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    assert out[5]["arguments"] == '{"city": "Paris"}' and out[5]["item_id"] == "fc_A1"
    assert out[9] | {"sequence_number": 0} == {
        "type": "response.function_call_arguments.done",
        "item_id": "fc_B2",
        "output_index": 1,
        "arguments": '{"tz": "CET"}',
        "sequence_number": 0,
    }
    output = out[-1]["response"]["output"]
    assert [(i["id"], i["call_id"], i["name"], i["arguments"], i["status"]) for i in output] == [
        ("fc_A1", "call_A1", "get_weather", '{"city": "Paris"}', "completed"),
        ("fc_B2", "call_B2", "get_time", '{"tz": "CET"}', "completed"),
    ]


# -- the max-tokens heuristic ---------------------------------------------------------------


def test_max_tokens_cut_becomes_incomplete() -> None:
    out = run(LLAMA_CUT, max_output_tokens=8)
    assert types(out)[-1] == "incomplete"
    final = out[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert text_of(final["output"][0]) == "The capital of France is Par"


def test_max_tokens_heuristic_needs_the_budget_spent_and_no_natural_end() -> None:
    assert types(run(LLAMA_CUT))[-1] == "completed"  # no budget given
    assert types(run(LLAMA_CUT, max_output_tokens=9))[-1] == "completed"  # 8 tokens < 9
    natural = llama_opening() + llama_text(["Paris."]) + llama_final(text="Paris.", output_tokens=8)
    assert types(run(natural, max_output_tokens=8))[-1] == "completed"
    call = (
        llama_opening()
        + llama_call("A1", "f", ['{"a": 1}'])
        + llama_final(calls=(("A1", "f", '{"a": 1}'),), output_tokens=8)
    )
    assert types(run(call, max_output_tokens=8))[-1] == "completed"  # the call's JSON is complete
    cut_call = (
        llama_opening()
        + llama_call("A1", "f", ['{"a": [1, 2'])
        + llama_final(calls=(("A1", "f", '{"a": [1, 2'),), output_tokens=8)
    )
    assert types(run(cut_call, max_output_tokens=8))[-1] == "incomplete"
    thinking = (
        llama_opening() + llama_reasoning(["Let me think"]) + llama_final(reasoning="Let me think", output_tokens=8)
    )
    out = run(thinking, max_output_tokens=8)
    assert types(out)[-1] == "incomplete" and out[-1]["response"]["output"][0]["type"] == "reasoning"


def test_incomplete_from_upstream_keeps_its_reason() -> None:
    events = llama_opening() + llama_text(["Hi"])
    events.append(
        {
            "type": "response.incomplete",
            "response": {"id": RESP, "object": "response", "incomplete_details": {"reason": "content_filter"}},
        }
    )
    out = run(events)
    assert types(out)[-4:] == ["output_text.done", "content_part.done", "output_item.done", "incomplete"]
    assert out[-2]["item"]["status"] == "incomplete"
    assert out[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}


# -- strict streams -------------------------------------------------------------------------

STRICT = [
    "openai-gpt5-reasoning-function-call-usage.sse",
    "openai-gpt4omini-text-logprobs.sse",
    "openai-gpt5-web-search-call.sse",
    "openai-o3mini-reasoning-summary-multipart.sse",
    "openai-gpt4omini-parallel-function-calls.sse",
    "openai-gpt5nano-error-then-failed.sse",
]


@pytest.mark.parametrize("name", STRICT)
def test_strict_capture_comes_out_unchanged(name: str) -> None:
    """Every event equal (ids, indexes, text, numbering); the lifecycle Responses keep every
    field the upstream sent. An upstream error ends the stream: its response.failed is dropped."""
    upstream = data_objects(read_capture(f"responses/{name}"))
    validate_responses_events(upstream, open_responses=False)  # OpenAI's own stream: the strict rules
    out = run(upstream)
    if name.endswith("error-then-failed.sse"):  # the error event gains the flat fields OpenAI also sends
        assert out[2] == {
            **upstream[2],
            "code": "insufficient_quota",
            "message": upstream[2]["error"]["message"],
            "param": None,
        }
        upstream[2] = out[2]
    assert types(out) == types(upstream)
    for got, sent in zip(out, upstream, strict=True):
        if "response" in sent:
            # every field the upstream sent is kept (the normaliser may add the ones the Open
            # Responses schema requires: completed_at, the penalties, reasoning.summary)
            assert {k: _sent_part(got["response"][k], v) for k, v in sent["response"].items() if k != "output"} == {
                k: v for k, v in sent["response"].items() if k != "output"
            }
            assert _sealed(got["response"]["output"]) == _sealed(sent["response"]["output"])
        else:
            assert got == sent


def _sent_part(got: Any, sent: Any) -> Any:
    """``got`` restricted to the keys of ``sent`` when both are objects."""
    if isinstance(got, dict) and isinstance(sent, dict):
        return {k: got.get(k) for k in sent}
    return got


def _sealed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI re-encrypts ``encrypted_content`` between output_item.done and the terminal event;
    the terminal output is the items as done, so only its presence is compared."""
    return [{**i, "encrypted_content": bool(i["encrypted_content"])} if "encrypted_content" in i else i for i in items]


def strip(events: list[dict[str, Any]], kinds: set[str]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"].removeprefix("response.") not in kinds]


def test_missing_created_is_synthesized() -> None:
    upstream = data_objects(read_capture("responses/openai-gpt5-reasoning-function-call-usage.sse"))
    out = run(strip(upstream, {"created", "in_progress"}), model="gpt-test")
    assert types(out) == types(upstream)
    assert out[0]["response"]["id"] == out[1]["response"]["id"] == out[-1]["response"]["id"] == "resp_0001"
    assert out[0]["response"]["model"] == "gpt-test" and out[0]["response"]["status"] == "in_progress"
    assert _sealed(out[-1]["response"]["output"]) == _sealed(upstream[-1]["response"]["output"])


def test_created_made_from_the_first_event_with_a_response() -> None:
    llama = LLAMA_TEXT[:]
    assert llama[0]["type"] == "response.created"
    out = run(llama[3:])  # no lifecycle event: the first event has no Response, so the id is minted
    assert out[0]["response"]["id"] == out[-1]["response"]["id"] == "resp_0001"
    first = [{"type": "response.in_progress", "response": {"id": "resp_X", "object": "response", "model": "m1"}}]
    out = run(first + LLAMA_TEXT[3:])
    assert types(out)[:3] == ["created", "in_progress", "output_item.added"]
    assert out[0]["response"]["id"] == "resp_X" and out[0]["response"]["model"] == "m1"
    assert out[-1]["response"]["id"] == "resp_X"


DONE_KINDS = {
    "output_text.done",
    "content_part.done",
    "function_call_arguments.done",
    "output_item.done",
    "reasoning_summary_text.done",
    "reasoning_summary_part.done",
}


@pytest.mark.parametrize(
    "name",
    [
        "openai-gpt5-reasoning-function-call-usage.sse",
        "openai-gpt4omini-text-logprobs.sse",
        "openai-o3mini-reasoning-summary-multipart.sse",
        "openai-gpt4omini-parallel-function-calls.sse",
    ],
)
def test_missing_done_events_are_emitted(name: str) -> None:
    upstream = data_objects(read_capture(f"responses/{name}"))
    out = run(strip(upstream, DONE_KINDS))
    assert types(out) == types(upstream)  # every done event back, in the original's places
    want = upstream[-1]["response"]["output"]
    got = out[-1]["response"]["output"]
    assert [(i["id"], i["type"]) for i in got] == [(i["id"], i["type"]) for i in want]
    for g, w in zip(got, want, strict=True):
        for key in ("content", "summary", "arguments", "call_id", "name"):
            if key in w:
                assert _no_logprobs(g[key]) == _no_logprobs(w[key]), key


def _no_logprobs(value: Any) -> Any:
    if isinstance(value, list):
        return [{k: v for k, v in p.items() if k != "logprobs"} for p in value]
    return value


def test_done_text_longer_than_deltas_is_caught_up() -> None:
    """lmstudio: function_call_arguments.done with arguments no delta carried."""
    out = run(data_objects(read_capture("responses/lmstudio-glm47flash-reasoning-text-function-call.sse")))
    i = types(out).index("function_call_arguments.done")
    assert types(out)[i - 1] == "function_call_arguments.delta"
    assert out[i - 1]["delta"] == out[i]["arguments"] == '{"location":"San Francisco"}'


@pytest.mark.parametrize("path", capture_files("responses/*.sse"), ids=lambda p: p.name)
def test_every_responses_capture_normalizes_strict(path: Any) -> None:
    upstream = data_objects(read_capture(f"responses/{path.name}"))
    unknown = [e for e in upstream if e["type"].startswith("response.apply_patch_call_operation_diff.")]
    out = run(upstream, validate=not unknown)
    if unknown:  # an event type strict clients do not know: relayed, never dropped
        assert [e for e in out if e["type"] in {u["type"] for u in unknown}] == unknown
        assert [e["sequence_number"] for e in out] == list(range(len(out)))


# -- failures -------------------------------------------------------------------------------


def test_upstream_error_midstream_ends_failed_with_its_code_and_message() -> None:
    error = {"error": {"code": 500, "message": "boom", "type": "server_error"}}  # no type: a bare data frame
    events = llama_opening() + llama_text(["Hel"]) + [error]
    events += llama_text(["lo"]) + llama_final(text="Hello")  # never read
    out = run(events)
    assert types(out)[-6:] == [
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "error",
        "failed",
    ]
    assert out[-3]["item"]["status"] == "incomplete" and text_of(out[-3]["item"]) == "Hel"
    assert out[-2]["error"] == {"type": "server_error", "code": "500", "message": "boom", "param": None}
    final = out[-1]["response"]
    assert final["error"] == {"code": "500", "message": "boom"} and final["status"] == "failed"
    assert final["output"] == [out[-3]["item"]]


def test_openai_shaped_error_before_anything() -> None:
    out = run([{"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None}])
    assert types(out) == ["created", "in_progress", "error", "failed"]
    assert out[-1]["response"]["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}


def test_upstream_response_failed_keeps_its_error() -> None:
    events = (
        llama_opening()
        + llama_text(["Hi"])
        + [
            {
                "type": "response.failed",
                "response": {
                    "id": RESP,
                    "object": "response",
                    "status": "failed",
                    "error": {"code": "server_error", "message": "oops"},
                },
            }
        ]
    )
    out = run(events)
    assert types(out)[-4:] == ["output_text.done", "content_part.done", "output_item.done", "failed"]
    assert out[-1]["response"]["error"] == {"code": "server_error", "message": "oops"}


@pytest.mark.parametrize("clean", [False, True])
def test_cut_stream_ends_failed(clean: bool) -> None:
    out = run(LLAMA_REASONING_TEXT[:10], clean=clean)  # cut inside the message's text
    assert types(out)[-6:] == [
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "error",
        "failed",
    ]
    assert out[-1]["response"]["error"] == {
        "code": "upstream_truncated",
        "message": "the upstream closed the stream before it finished",
    }
    assert [i["status"] for i in out[-1]["response"]["output"]] == ["completed", "incomplete"]


def test_driver_failure_before_any_event() -> None:
    m = machine()
    out = check(m.fail("upstream_timeout", "no answer in time"))
    assert types(out) == ["created", "in_progress", "error", "failed"] and m.done
    assert m.feed({"type": "response.created"}) == [] and m.finish() == [] and m.fail("x", "y") == []


def test_malformed_event_ends_with_protocol_error() -> None:
    out = run([*llama_opening(), {"type": "response.output_text.delta", "item_id": MSG, "delta": 5}])
    assert out[-1]["response"]["error"]["code"] == "upstream_protocol_error"


def test_events_after_the_terminal_are_dropped() -> None:
    m = machine()
    out: list[dict[str, Any]] = []
    for e in copy.deepcopy(LLAMA_TEXT):
        out += m.feed(e)
    assert m.done and out[-1]["type"] == "response.completed"
    for e in copy.deepcopy(llama_text(["more"]) + llama_final(text="more")):
        assert m.feed(e) == []
    assert m.finish(clean=False) == [] and m.fail("late", "late") == []
    assert m.diagnostics["after_terminal"] == 7
    assert m.final_response is out[-1]["response"]
    check(out)


# -- repairs of other shapes ----------------------------------------------------------------


def test_events_without_their_item_open_one() -> None:
    events: list[dict[str, Any]] = [
        {"type": "response.output_text.delta", "delta": "Hi"},
        {"type": "response.function_call_arguments.delta", "delta": "{}"},
        {"type": "response.completed", "response": {"usage": {"input_tokens": 1, "output_tokens": 2}}},
    ]
    out = run(events)
    assert types(out) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    call = out[-2]["item"]
    assert call["id"] == "fc_0003" and call["call_id"] == "call_0004" and call["arguments"] == "{}"
    assert out[-1]["response"]["usage"]["total_tokens"] == 3


def test_done_events_without_ids_go_to_the_last_item_of_their_type() -> None:
    """A repeated output_text.done / content_part.done naming no item: for the message already
    closed (dropped), not a new message; a function call in between does not change that."""
    events = llama_opening() + llama_text(["Hi."]) + llama_final(text="Hi.")[:3]
    events += llama_call("A1", "f", ["{}"]) + llama_final(text="Hi.")[:2]
    events.append(llama_final(calls=(("A1", "f", "{}"),))[-1])
    m = machine()
    out = [o for e in copy.deepcopy(events) for o in m.feed(e)]
    check(out)
    assert [i["type"] for i in out[-1]["response"]["output"]] == ["message", "function_call"]
    assert m.diagnostics["late_event"] == 2


def test_done_only_upstream_replays_the_terminal_output() -> None:
    out = run([*llama_opening(), llama_final(text="Hi.")[-1]])
    assert types(out) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    assert out[4]["delta"] == "Hi." and out[-1]["response"]["output"][0]["id"] == MSG


def test_unknown_events_pass_through_with_ids_filled() -> None:
    """Even when they name an item already closed; a known hosted-tool event for a closed item is dropped."""
    search = {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}
    events = [
        *LLAMA_TEXT[:3],
        {"type": "response.output_item.added", "item": search},
        {"type": "response.output_item.done", "item": {**search, "status": "completed"}},
        {"type": "response.web_search_call.completed", "item_id": "ws_1"},
    ]
    events += [*LLAMA_TEXT[3:6], {"type": "response.vendor.note", "item_id": MSG, "note": 1}, {"type": "keepalive"}]
    events += [*LLAMA_TEXT[6:-1], {"type": "response.vendor.note", "item_id": MSG, "note": 2}, LLAMA_TEXT[-1]]
    out = run(events, validate=False)
    vendor = [e for e in out if e["type"] == "response.vendor.note"]
    assert vendor == [
        {"type": "response.vendor.note", "item_id": MSG, "note": n, "output_index": 1, "sequence_number": out.index(v)}
        for n, v in ((1, vendor[0]), (2, vendor[1]))
    ]
    assert types(out)[-3:] == ["output_item.done", "vendor.note", "completed"]
    assert types(out)[2:5] == ["output_item.added", "output_item.done", "output_item.added"]
    assert sum(e["type"] == "keepalive" for e in out) == 1
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    validate_responses_events(
        [
            dict(e, sequence_number=n)
            for n, e in enumerate(e for e in out if e["type"] not in ("response.vendor.note", "keepalive"))
        ]
    )


def test_duplicate_ids_are_replaced() -> None:
    """llama-server names calls after the model's ids, which may repeat."""
    calls = (("A1", "f", "{}"), ("B2", "g", "[]"), ("A1", "f", "{}"))
    events = llama_opening() + [e for c in calls for e in llama_call(c[0], c[1], [c[2]])] + llama_final(calls=calls)
    output = run(events)[-1]["response"]["output"]
    assert [(i["id"], i["call_id"]) for i in output] == [
        ("fc_A1", "call_A1"),
        ("fc_B2", "call_B2"),
        ("fc_0001", "call_0002"),
    ]


# -- bytes through the pump -----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LLAMA_STREAMS))
def test_frames_split_anywhere_give_the_same_output(name: str) -> None:
    events = LLAMA_STREAMS[name]
    raw = sse(events)
    whole = check(pumped(raw, max_output_tokens=8))
    assert whole == run(events, max_output_tokens=8)  # the pump feeds the same events
    for seed in range(5):
        assert pumped(raw, split_points(raw, seed, 3 + seed * 17), max_output_tokens=8) == whole
    assert pumped(raw, byte_by_byte(raw), max_output_tokens=8) == whole


def test_pumped_error_frame_and_eof() -> None:
    raw = sse(llama_opening() + llama_text(["Hi"]))
    cut = check(pumped(raw))
    assert cut[-1]["response"]["error"]["code"] == "upstream_truncated"
    frame = b'data: {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}\n\n'
    failed = check(pumped(raw + frame))
    assert failed[-1]["response"]["error"] == {"code": "503", "message": "Loading model"}
    assert failed[-2]["error"]["message"] == "Loading model"


@pytest.mark.parametrize("name", ["llamaserver-native-text", "llamaserver-native-cut", "llamaserver-native-tool-call"])
def test_recorded_llama_server_streams_are_open_responses(name: str) -> None:
    upstream = data_objects(read_capture(f"recorded/responses/{name}.sse"))
    out = run(upstream)
    check_events(out)
    assert out[-1]["response"]["completed_at"] == 1700000000 or out[-1]["type"] != "response.completed"


def test_message_phase_from_the_backend_is_kept() -> None:
    """A Responses backend's assistant ``phase`` (commentary / final_answer) survives normalising."""
    events = llama_opening() + llama_text(["Done."]) + llama_final(text="Done.")
    for e in events:
        item = e.get("item")
        if isinstance(item, dict) and item.get("type") == "message":
            item["phase"] = "final_answer"
    out = run(events)
    done = [e["item"] for e in out if e["type"] == "response.output_item.done"]
    assert [i.get("phase") for i in done] == ["final_answer"]
    assert out[-1]["response"]["output"][0]["phase"] == "final_answer"
    check_events(out)
