"""The strict-client validators: real captures that conform pass, each rule has a mutation that
breaks it and must be reported with a precise message."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from crossfeed.translators.sse import DONE_FRAME, SSEDecoder
from tests.support.captures import CAPTURES, capture_path, captures_dir
from tests.support.chat_chunks import chat_chunk
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import (
    StreamViolation,
    accumulate_chat,
    sse_frames,
    validate_chat_chunks,
    validate_chat_sse,
    validate_responses_events,
    validate_responses_sse,
)

# These tests are about the strict-client rules alone, on streams of every producer (captures,
# hand-built ones): the Open Responses schema check has its own tests (test_open_responses.py).
validate_responses_events = functools.partial(validate_responses_events, open_responses=False)
validate_responses_sse = functools.partial(validate_responses_sse, open_responses=False)

RESP = CAPTURES / "responses"
CHAT = CAPTURES / "chat"


def _read(path: Path) -> bytes:
    return capture_path(path).read_bytes()


def _data_frames(raw: bytes) -> list[dict]:
    decoder = SSEDecoder()
    frames = [*decoder.feed(raw), *decoder.finish()]
    return [orjson.loads(data) for _, data in frames if data != b"[DONE]"]


def encode_named(event_type: bytes, data: bytes) -> bytes:
    """One Responses frame: ``event: <type>`` then ``data: <json>``."""
    return b"event: " + event_type + b"\ndata: " + data + b"\n\n"


def encode_data(data: bytes) -> bytes:
    """One Chat Completions frame: ``data: <json>`` alone."""
    return b"data: " + data + b"\n\n"


# ---------------------------------------------------------------------------------------------
# Real Responses captures
# ---------------------------------------------------------------------------------------------

# Complete streams with sequence numbers that follow every rule.
RESPONSES_OK = [
    "azure-gpt51-function-call.sse",
    "azure-gpt5mini-reasoning-summary-3-parts.sse",
    "bedrock-mantle-gpt56-function-call.sse",
    "deepseek-v4flash-responses-function-call.sse",
    "deepseek-v4flash-responses-reasoning-text.sse",
    "openai-gpt4omini-parallel-function-calls.sse",
    "openai-gpt4omini-text-after-parallel-calls.sse",
    "openai-gpt4omini-text-logprobs.sse",
    "openai-gpt5-reasoning-function-call-usage.sse",
    "openai-gpt5-reasoning-parallel-function-calls.sse",
    "openai-gpt5-reasoning-summary-function-call.sse",
    "openai-gpt5-web-search-call.sse",
    "openai-gpt51codexmax-reasoning-encrypted-function-call.sse",
    "openai-gpt55-phase-commentary-function-call.sse",
    "openai-gpt5nano-error-then-failed.sse",
    "openai-o3mini-reasoning-summary-multipart.sse",
]

# Captures a strict client (and so crossfeed's output) must NOT look like, with the rule each
# breaks. They are the reason crossfeed exists; the validator must reject them.
RESPONSES_REJECTED = {
    # 2025-03 wire shape: no sequence_number at all.
    "openai-gpt4o-function-call-no-seq.sse": "missing or non-integer sequence_number",
    "openai-gpt4o-text-no-seq.sse": "missing or non-integer sequence_number",
    # trimmed by its source: events 1-3 and custom_tool_call_input.done are missing.
    "openai-gpt52codex-custom-tool-call.sse": "sequence_number 4 != 1",
    # built-in apply_patch item streams an event type outside the SDK union (node throws).
    "openai-gpt51-apply-patch-call.sse": "unknown event type 'response.apply_patch_call_operation_diff.delta'",
    # GitHub Copilot rotates the response id and item ids on every event.
    "githubcopilot-gpt53codex-rotating-item-ids.sse": "response id changed",
    # LM Studio sends the arguments only in function_call_arguments.done.
    "lmstudio-glm47flash-reasoning-text-function-call.sse": ".done arguments differs from the concatenated deltas",
    # xAI adds items already completed, and omits logprobs on output_text.done.
    "xai-grok4fast-web-search-call.sse": "added item has status 'completed'",
    "xai-grokcodefast-reasoning-summary.sse": "output_text event needs a `logprobs` list",
    # OpenRouter: data-only frames (no `event:` lines) and a trailing [DONE].
    "openrouter-gptoss20b-responses-raw-cot.sse": "missing `event:` line",
}


@pytest.mark.parametrize("name", RESPONSES_OK)
def test_conforming_responses_capture_passes(name: str) -> None:
    events = validate_responses_sse(_read(RESP / name))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.failed")


@pytest.mark.parametrize("name, fragment", sorted(RESPONSES_REJECTED.items()))
def test_nonconforming_responses_capture_is_rejected(name: str, fragment: str) -> None:
    with pytest.raises(StreamViolation) as info:
        validate_responses_sse(_read(RESP / name))
    assert fragment in str(info.value)


def test_openrouter_events_fail_on_rotated_temporary_ids() -> None:
    # Framing aside, its terminal output carries a different reasoning id than was streamed.
    events = _data_frames(_read(RESP / "openrouter-gptoss20b-responses-raw-cot.sse"))
    with pytest.raises(StreamViolation, match=r"response.output\[0\] id 'rs_tmp_\w+' != streamed id"):
        validate_responses_events(events)


def test_a_background_capture_with_its_queued_event_passes() -> None:
    """OpenAI's background stream: response.created and response.queued (status queued), then
    response.in_progress; a queued event anywhere else is refused."""
    events = _data_frames(_read(RESP / "openai-gpt4o-background-queued.sse"))
    assert [e["type"] for e in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
    validate_responses_events(events)
    moved = _renumber([events[0], events[2], events[1], *events[3:]])
    with pytest.raises(StreamViolation, match=r"response\.queued may only be the second event"):
        validate_responses_events(moved)


def test_background_capture_without_queued_event_passes() -> None:
    events = [
        e for e in _data_frames(_read(RESP / "openai-gpt4o-background-queued.sse")) if e["type"] != "response.queued"
    ]
    validate_responses_events(_renumber(events))


def test_every_prefix_of_a_real_capture_passes_without_terminal() -> None:
    events = _data_frames(_read(RESP / "openai-gpt5-web-search-call.sse"))
    for end in range(1, len(events)):
        validate_responses_events(events[:end], require_terminal=False)
    with pytest.raises(StreamViolation, match="without a terminal event"):
        validate_responses_events(events[:-1])


# ---------------------------------------------------------------------------------------------
# Synthetic Responses stream covering every event family crossfeed emits
# ---------------------------------------------------------------------------------------------

USAGE = {
    "input_tokens": 5,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 12,
}


def _renumber(events: list[dict]) -> list[dict]:
    for pos, event in enumerate(events):
        event["sequence_number"] = pos
    return events


def _response(status: str, output: list, **extra: object) -> dict:
    base = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": status,
        "output": output,
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    return {**base, **extra}


def build_responses(terminal: str = "completed") -> list[dict]:
    """A valid stream: reasoning (summary + raw text), message (text + refusal), function call,
    custom tool call, then the terminal event."""
    ev: list[dict] = []

    def emit(etype: str, **fields: object) -> None:
        ev.append({"type": etype, "sequence_number": len(ev), **fields})

    emit("response.created", response=_response("in_progress", []))
    emit("response.in_progress", response=_response("in_progress", []))
    rs = {"item_id": "rs_1", "output_index": 0}
    emit(
        "response.output_item.added",
        output_index=0,
        item={"id": "rs_1", "type": "reasoning", "summary": [], "content": []},
    )
    emit("response.reasoning_summary_part.added", **rs, summary_index=0, part={"type": "summary_text", "text": ""})
    for piece in ("Thin", "king"):
        emit("response.reasoning_summary_text.delta", **rs, summary_index=0, delta=piece)
    emit("response.reasoning_summary_text.done", **rs, summary_index=0, text="Thinking")
    summary = {"type": "summary_text", "text": "Thinking"}
    emit("response.reasoning_summary_part.done", **rs, summary_index=0, part=summary)
    emit("response.content_part.added", **rs, content_index=0, part={"type": "reasoning_text", "text": ""})
    for piece in ("raw", " cot"):
        emit("response.reasoning_text.delta", **rs, content_index=0, delta=piece)
    emit("response.reasoning_text.done", **rs, content_index=0, text="raw cot")
    raw = {"type": "reasoning_text", "text": "raw cot"}
    emit("response.content_part.done", **rs, content_index=0, part=raw)
    emit(
        "response.output_item.done",
        output_index=0,
        item={"id": "rs_1", "type": "reasoning", "summary": [summary], "content": [raw]},
    )

    msg = {"item_id": "msg_1", "output_index": 1}
    emit(
        "response.output_item.added",
        output_index=1,
        item={"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []},
    )
    emit(
        "response.content_part.added",
        **msg,
        content_index=0,
        part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
    )
    for piece in ("Hel", "lo"):
        emit("response.output_text.delta", **msg, content_index=0, delta=piece, logprobs=[])
    annotation = {"type": "url_citation", "url": "https://example.com", "title": "t", "start_index": 0, "end_index": 5}
    emit("response.output_text.annotation.added", **msg, content_index=0, annotation_index=0, annotation=annotation)
    emit("response.output_text.done", **msg, content_index=0, text="Hello", logprobs=[])
    text = {"type": "output_text", "text": "Hello", "annotations": [annotation], "logprobs": []}
    emit("response.content_part.done", **msg, content_index=0, part=text)
    emit("response.content_part.added", **msg, content_index=1, part={"type": "refusal", "refusal": ""})
    emit("response.refusal.delta", **msg, content_index=1, delta="No.")
    emit("response.refusal.done", **msg, content_index=1, refusal="No.")
    refusal = {"type": "refusal", "refusal": "No."}
    emit("response.content_part.done", **msg, content_index=1, part=refusal)
    emit(
        "response.output_item.done",
        output_index=1,
        item={"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [text, refusal]},
    )

    fc = {"item_id": "fc_1", "output_index": 2}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "add"}
    emit("response.output_item.added", output_index=2, item={**call, "arguments": "", "status": "in_progress"})
    for piece in ('{"a":', "1}"):
        emit("response.function_call_arguments.delta", **fc, delta=piece)
    emit("response.function_call_arguments.done", **fc, arguments='{"a":1}')
    emit("response.output_item.done", output_index=2, item={**call, "arguments": '{"a":1}', "status": "completed"})

    ct = {"item_id": "ctc_1", "output_index": 3}
    custom = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "call_2", "name": "patch"}
    emit("response.output_item.added", output_index=3, item={**custom, "input": "", "status": "in_progress"})
    for piece in ("*** Begin", " Patch"):
        emit("response.custom_tool_call_input.delta", **ct, delta=piece)
    emit("response.custom_tool_call_input.done", **ct, input="*** Begin Patch")
    emit(
        "response.output_item.done", output_index=3, item={**custom, "input": "*** Begin Patch", "status": "completed"}
    )

    output = [copy.deepcopy(e["item"]) for e in ev if e["type"] == "response.output_item.done"]
    if terminal == "completed":
        emit("response.completed", response=_response("completed", output, usage=copy.deepcopy(USAGE)))
    elif terminal == "incomplete":
        emit(
            "response.incomplete",
            response=_response(
                "incomplete", output, usage=copy.deepcopy(USAGE), incomplete_details={"reason": "max_output_tokens"}
            ),
        )
    else:
        error = {"type": "server_error", "code": "server_error", "message": "boom", "param": None}
        emit("error", error=error, code="server_error", message="boom", param=None)
        emit("response.failed", response=_response("failed", output, error={"code": "server_error", "message": "boom"}))
    return ev


def _find(ev: list[dict], etype: str, nth: int = 0) -> int:
    hits = [pos for pos, e in enumerate(ev) if e["type"] == etype]
    return hits[nth]


@pytest.mark.parametrize("terminal", ["completed", "incomplete", "failed"])
def test_synthetic_stream_passes(terminal: str) -> None:
    ev = build_responses(terminal)
    validate_responses_events(ev)
    raw = b"".join(encode_named(e["type"].encode(), orjson.dumps(e)) for e in ev)
    assert validate_responses_sse(raw) == ev


def _set(etype: str, key: str, value: object, nth: int = 0) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        target = ev[_find(ev, etype, nth)]
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value

    return mutate


def _drop(etype: str, nth: int = 0) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        del ev[_find(ev, etype, nth)]
        _renumber(ev)

    return mutate


def _delete_key(etype: str, key: str, nth: int = 0) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        target = ev[_find(ev, etype, nth)]
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        del target[last]

    return mutate


def _insert_copy(etype: str, before: str, nth: int = 0) -> Callable[[list[dict]], None]:
    """Insert a copy of the nth `etype` event in front of the first `before` event."""

    def mutate(ev: list[dict]) -> None:
        clone = copy.deepcopy(ev[_find(ev, etype, nth)])
        ev.insert(_find(ev, before), clone)
        _renumber(ev)

    return mutate


def _swap(first: str, second: str) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        a, b = _find(ev, first), _find(ev, second)
        ev[a], ev[b] = ev[b], ev[a]
        _renumber(ev)

    return mutate


def _rename_item(old: str, new: str) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        for event in ev:
            if event.get("item_id") == old:
                event["item_id"] = new
            if event.get("item", {}).get("id") == old:
                event["item"]["id"] = new
            for item in (event.get("response") or {}).get("output", []):
                if item.get("id") == old:
                    item["id"] = new

    return mutate


def _terminal_output(index: int, key: str, value: object) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        ev[-1]["response"]["output"][index][key] = value

    return mutate


def _seq_all_plus_one(ev: list[dict]) -> None:
    for event in ev:
        event["sequence_number"] += 1


def _truncate_after(etype: str) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        del ev[_find(ev, etype) + 1 :]

    return mutate


def _inject(etype: str, before_done: int, **changes: object) -> Callable[[list[dict]], None]:
    """Insert a changed copy of the first `etype` event before the nth output_item.done."""

    def mutate(ev: list[dict]) -> None:
        clone = {**copy.deepcopy(ev[_find(ev, etype)]), **changes}
        ev.insert(_find(ev, "response.output_item.done", before_done), clone)
        _renumber(ev)

    return mutate


def _copy_after(etype: str, after: str, after_nth: int) -> Callable[[list[dict]], None]:
    """Insert a copy of the first `etype` event right after the nth `after` event."""

    def mutate(ev: list[dict]) -> None:
        clone = copy.deepcopy(ev[_find(ev, etype)])
        ev.insert(_find(ev, after, after_nth) + 1, clone)
        _renumber(ev)

    return mutate


def _copy_to_end(etype: str) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        ev.append(copy.deepcopy(ev[_find(ev, etype)]))
        _renumber(ev)

    return mutate


def _incomplete_item_everywhere(index: int) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        ev[_find(ev, "response.output_item.done", index)]["item"]["status"] = "incomplete"
        ev[-1]["response"]["output"][index]["status"] = "incomplete"

    return mutate


def _insert_error_before(etype: str) -> Callable[[list[dict]], None]:
    def mutate(ev: list[dict]) -> None:
        ev.insert(_find(ev, etype), {"type": "error", "error": {"type": "server_error", "message": "x"}})
        _renumber(ev)

    return mutate


RESPONSES_MUTATIONS: dict[str, tuple[Callable[[list[dict]], None], str]] = {
    # lifecycle and numbering
    "drop created": (_drop("response.created"), "event #0 must be response.created"),
    "drop in_progress": (_drop("response.in_progress"), "event #1 must be response.in_progress"),
    "swap opening events": (_swap("response.created", "response.in_progress"), "must be response.created"),
    "bump a sequence number": (_set("response.output_text.delta", "sequence_number", 99), "sequence_number 99 !="),
    "sequence starts at 1": (_seq_all_plus_one, "sequence_number 1 != 0"),
    "missing sequence number": (
        _delete_key("response.output_item.added", "sequence_number"),
        "missing or non-integer sequence_number",
    ),
    "response id changes": (_set("response.completed", "response.id", "resp_2"), "response id changed"),
    "created has output": (_set("response.created", "response.output", [{"id": "x"}]), "output must be []"),
    "in_progress status": (_set("response.in_progress", "response.status", "completed"), "expected 'in_progress'"),
    "response.object": (_set("response.created", "response.object", "chat"), "response.object"),
    "repeated in_progress": (
        _insert_copy("response.in_progress", "response.completed"),
        "may only be the second event",
    ),
    "unknown event type": (
        _set("response.refusal.delta", "type", "response.refusal.partial"),
        "unknown event type 'response.refusal.partial'",
    ),
    # items
    "output_index gap": (_set("response.output_item.added", "output_index", 1), "not append-only"),
    "output_index reused": (_set("response.output_item.added", "output_index", 1, nth=2), "not append-only"),
    "item without id": (_set("response.output_item.added", "item.id", ""), "needs a non-empty id"),
    "call without call_id": (
        _delete_key("response.output_item.added", "item.call_id", nth=2),
        "needs a non-empty call_id",
    ),
    "duplicate item id": (_rename_item("fc_1", "msg_1"), "duplicate item id 'msg_1'"),
    "duplicate call_id": (
        _set("response.output_item.added", "item.call_id", "call_1", nth=3),
        "duplicate call_id 'call_1'",
    ),
    "added item not empty": (
        _set("response.output_item.added", "item.arguments", "{", nth=2),
        "must start with arguments=''",
    ),
    "added item completed": (
        _set("response.output_item.added", "item.status", "completed", nth=1),
        "added item has status 'completed'",
    ),
    "item_id mismatch": (_set("response.output_text.delta", "item_id", "msg_other"), "item_id 'msg_other' !="),
    "wrong family": (
        _inject("response.function_call_arguments.delta", 1, output_index=1),
        "item_id 'fc_1' != item id 'msg_1'",
    ),
    "family type mismatch": (
        _inject("response.function_call_arguments.delta", 1, output_index=1, item_id="msg_1"),
        "belongs to a function_call item, item is message",
    ),
    "event before its item": (
        _set("response.reasoning_summary_part.added", "output_index", 5),
        "output_index 5 names no added item",
    ),
    # content parts
    "content_index skips": (
        _set("response.content_part.added", "content_index", 2, nth=2),
        "content_index 2 does not append",
    ),
    "delta before its part": (
        _swap("response.content_part.added", "response.reasoning_text.delta"),
        "content_index 0 names no added part",
    ),
    "text delta on refusal part": (_set("response.output_text.delta", "content_index", 1), "names no added part"),
    "refusal delta on text part": (
        _set("response.content_part.added", "part", {"type": "output_text", "text": "", "annotations": []}, nth=2),
        "needs a refusal part, content part is output_text",
    ),
    "delta on a closed part": (
        _set("response.refusal.delta", "content_index", 0),
        "event for part 0 after its part was done",
    ),
    "reasoning_text part on message": (
        _set("response.content_part.added", "part.type", "reasoning_text", nth=1),
        "a reasoning_text part cannot belong to a message item",
    ),
    "delta without logprobs": (_delete_key("response.output_text.delta", "logprobs"), "`logprobs` list"),
    "text done without logprobs": (_delete_key("response.output_text.done", "logprobs"), "`logprobs` list"),
    "part without annotations": (
        _delete_key("response.content_part.added", "part.annotations", nth=1),
        "needs an `annotations` list",
    ),
    "added part not empty": (
        _set("response.content_part.added", "part.text", "x", nth=1),
        "added output_text part must start empty",
    ),
    "delta not a string": (_set("response.output_text.delta", "delta", 5), "delta must be a string"),
    "annotation index skips": (
        _set("response.output_text.annotation.added", "annotation_index", 1),
        "annotation_index 1 does not append",
    ),
    "summary_index skips": (
        _set("response.reasoning_summary_part.added", "summary_index", 1),
        "summary_index 1 does not append",
    ),
    "summary part type": (_set("response.reasoning_summary_part.added", "part.type", "text"), "type 'summary_text'"),
    # *.done text must equal the deltas
    "output_text.done mismatch": (
        _set("response.output_text.done", "text", "Help"),
        ".done text differs from the concatenated deltas",
    ),
    "refusal.done mismatch": (
        _set("response.refusal.done", "refusal", "Yes"),
        ".done refusal differs from the concatenated deltas",
    ),
    "reasoning_text.done mismatch": (
        _set("response.reasoning_text.done", "text", "raw"),
        ".done text differs from the concatenated deltas",
    ),
    "summary_text.done mismatch": (
        _set("response.reasoning_summary_text.done", "text", "Thin"),
        ".done text differs from the concatenated deltas",
    ),
    "arguments.done mismatch": (
        _set("response.function_call_arguments.done", "arguments", "{}"),
        ".done arguments differs from the concatenated deltas",
    ),
    "custom input.done mismatch": (
        _set("response.custom_tool_call_input.done", "input", "x"),
        ".done input differs from the concatenated deltas",
    ),
    "delta after text done": (
        _copy_after("response.output_text.delta", "response.output_text.done", 0),
        "response.output_text event after its .done",
    ),
    "duplicate text done": (
        _copy_after("response.output_text.done", "response.output_text.done", 0),
        "after its .done",
    ),
    "missing output_text.done": (
        _drop("response.output_text.done"),
        "content_part.done before the output_text .done event",
    ),
    "missing summary_text.done": (
        _drop("response.reasoning_summary_text.done"),
        "reasoning_summary_part.done before reasoning_summary_text.done",
    ),
    "missing arguments.done": (
        _drop("response.function_call_arguments.done"),
        "output_item.done before response.function_call_arguments.done",
    ),
    "missing custom input.done": (
        _drop("response.custom_tool_call_input.done"),
        "output_item.done before response.custom_tool_call_input.done",
    ),
    "content_part.done text mismatch": (
        _set("response.content_part.done", "part.text", "Hell", nth=1),
        "content_part.done text differs",
    ),
    "content_part.done type mismatch": (
        _set("response.content_part.done", "part.type", "refusal", nth=1),
        "content_part.done type refusal != added output_text",
    ),
    "content_part.done annotations": (
        _set("response.content_part.done", "part.annotations", [], nth=1),
        "annotations differ",
    ),
    "summary_part.done mismatch": (
        _set("response.reasoning_summary_part.done", "part.text", "x"),
        "reasoning_summary_part.done text differs",
    ),
    "content part left open": (
        _drop("response.content_part.done", nth=2),
        "output_item.done while content part 1 is still open",
    ),
    "event after its part done": (
        _copy_after("response.refusal.delta", "response.content_part.done", 2),
        "after its part was done",
    ),
    # output_item.done
    "done id changed": (
        _set("response.output_item.done", "item.id", "fc_9", nth=2),
        "done item id 'fc_9' != added 'fc_1'",
    ),
    "done type changed": (_set("response.output_item.done", "item.type", "custom_tool_call", nth=2), "done item type"),
    "done call_id changed": (_set("response.output_item.done", "item.call_id", "call_9", nth=2), "done item call_id"),
    "done arguments differ": (
        _set("response.output_item.done", "item.arguments", "{}", nth=2),
        "done item arguments differs",
    ),
    "done input differs": (_set("response.output_item.done", "item.input", "", nth=3), "done item input differs"),
    "done content differs": (
        _set("response.output_item.done", "item.content", [], nth=1),
        "done message content differs",
    ),
    "done summary differs": (_set("response.output_item.done", "item.summary", []), "done reasoning summary differs"),
    "done reasoning content differs": (
        _set("response.output_item.done", "item.content", []),
        "done reasoning content differs",
    ),
    "done still in progress": (
        _set("response.output_item.done", "item.status", "in_progress", nth=2),
        "still has status 'in_progress'",
    ),
    "event after item done": (
        _copy_after("response.function_call_arguments.delta", "response.output_item.done", 2),
        "event for item 2 after its output_item.done",
    ),
    "duplicate output_item.done": (
        _copy_after("response.output_item.done", "response.output_item.done", 0),
        "event for item 0 after its output_item.done",
    ),
    "missing output_item.done": (
        _drop("response.output_item.done", nth=3),
        "item 3 ('ctc_1') never got output_item.done",
    ),
    # terminal
    "two terminal events": (
        _copy_after("response.completed", "response.completed", 0),
        "event after the terminal event",
    ),
    "event after terminal": (_copy_to_end("response.refusal.delta"), "event after the terminal event"),
    "no terminal": (_drop("response.completed"), "without a terminal event"),
    "terminal output misses an item": (
        lambda ev: ev[-1]["response"]["output"].pop(),
        "response.output has 3 items, 4 were streamed",
    ),
    "terminal output reordered": (
        lambda ev: ev[-1]["response"]["output"].reverse(),
        "response.output[0] id 'ctc_1' != streamed id 'rs_1'",
    ),
    "terminal output item differs": (
        _terminal_output(2, "arguments", "{}"),
        "response.output[2] differs from its output_item.done item",
    ),
    "terminal status mismatch": (
        _set("response.completed", "response.status", "incomplete"),
        "response.status 'incomplete', expected 'completed'",
    ),
    "completed carries error": (
        _set("response.completed", "response.error", {"code": "x", "message": "y"}),
        "error and incomplete_details null",
    ),
    "usage missing": (_set("response.completed", "response.usage", None), "response.usage must be an object"),
    "usage cached_tokens missing": (
        _delete_key("response.completed", "response.usage.input_tokens_details"),
        "usage.input_tokens_details.cached_tokens",
    ),
    "usage reasoning_tokens missing": (
        _delete_key("response.completed", "response.usage.output_tokens_details.reasoning_tokens"),
        "usage.output_tokens_details.reasoning_tokens",
    ),
    "usage total not int": (
        _set("response.completed", "response.usage.total_tokens", "12"),
        "usage.total_tokens must be a non-negative integer",
    ),
    "completed with incomplete item": (
        _incomplete_item_everywhere(1),
        "item 1 is 'incomplete' inside response.completed",
    ),
    "error not before failed": (
        _insert_error_before("response.completed"),
        "must be followed directly by response.failed",
    ),
}


@pytest.mark.parametrize("name", sorted(RESPONSES_MUTATIONS))
def test_responses_rule_violation_is_reported(name: str) -> None:
    _assert_reported(*RESPONSES_MUTATIONS[name])


def _assert_reported(mutate: Callable[[list[dict]], object], fragment: str) -> None:
    """The valid stream, mutated, is rejected with a message containing ``fragment``."""
    events = build_responses()
    mutate(events)
    with pytest.raises(StreamViolation) as info:
        validate_responses_events(events)
    assert fragment in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda ev: ev[-1]["response"].update(incomplete_details=None), "incomplete_details.reason"),
        (lambda ev: ev[-1]["response"].update(incomplete_details={"reason": "length"}), "incomplete_details.reason"),
        (lambda ev: ev[-1]["response"].update(usage=None), "response.usage must be an object"),
    ],
)
def test_incomplete_terminal_rules(mutate: Callable[[list[dict]], None], fragment: str) -> None:
    events = build_responses("incomplete")
    mutate(events)
    with pytest.raises(StreamViolation, match=fragment):
        validate_responses_events(events)


def _steered(ev: list[dict]) -> None:
    ev[-1]["response"]["incomplete_details"] = {"reason": "steered"}


def test_steered_response_may_leave_only_its_last_text_incomplete() -> None:
    events = build_responses("incomplete")
    _steered(events)
    validate_responses_events(events)  # stopped between two items: nothing incomplete
    for index, fragment in ((1, "is not its last item"), (3, "only text or reasoning")):
        events = build_responses("incomplete")
        _steered(events)
        _incomplete_item_everywhere(index)(events)
        with pytest.raises(StreamViolation, match=fragment):
            validate_responses_events(events)


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda ev: ev[-1]["response"].update(error=None), r"response.error \{code, message\}"),
        (lambda ev: ev[-1]["response"].update(error={"code": "", "message": "m"}), r"response.error \{code, message\}"),
        (lambda ev: ev[-2].update(error={"type": "server_error"}), "nested `error` object with a message"),
        (lambda ev: ev[-2].update(message="other"), "flat `message` differs"),
        (_truncate_after("error"), "not followed by response.failed"),
        (_drop("response.output_item.done", nth=3), "never got output_item.done"),
    ],
)
def test_failed_terminal_rules(mutate: Callable[[list[dict]], None], fragment: str) -> None:
    events = build_responses("failed")
    mutate(events)
    with pytest.raises(StreamViolation, match=fragment):
        validate_responses_events(events)


def test_failed_without_error_event_passes() -> None:
    events = build_responses("failed")
    del events[-2]
    validate_responses_events(_renumber(events))


def test_prefixes_pass_without_terminal_and_fail_with_it() -> None:
    events = build_responses()
    for end in range(1, len(events)):
        validate_responses_events(events[:end], require_terminal=False)
        with pytest.raises(StreamViolation, match="without a terminal event"):
            validate_responses_events(events[:end])


def test_empty_responses_stream() -> None:
    with pytest.raises(StreamViolation, match="empty stream"):
        validate_responses_events([])
    validate_responses_events([], require_terminal=False)


def _named(events: list[dict]) -> bytes:
    return b"".join(encode_named(e["type"].encode(), orjson.dumps(e)) for e in events)


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (lambda ev: b"data: " + orjson.dumps(ev[0]) + b"\n\n" + _named(ev[1:]), "frame #0: missing `event:` line"),
        (
            lambda ev: _named(ev[:1]) + encode_named(b"response.created", orjson.dumps(ev[1])) + _named(ev[2:]),
            "event line 'response.created' != data type 'response.in_progress'",
        ),
        (lambda ev: _named(ev) + DONE_FRAME, "`data: [DONE]` is not sent on Responses streams"),
        (lambda ev: encode_named(b"response.created", b"{not json") + _named(ev[1:]), "data is not JSON"),
        (lambda ev: encode_named(b"response.created", b"[1]") + _named(ev[1:]), "not a JSON object"),
        (lambda ev: _named(ev[:-1]), "without a terminal event"),
    ],
)
def test_responses_sse_framing(raw: Callable[[list[dict]], bytes], fragment: str) -> None:
    with pytest.raises(StreamViolation) as info:
        validate_responses_sse(raw(build_responses()))
    assert fragment in str(info.value), str(info.value)


def test_responses_sse_allows_cut_stream_when_asked() -> None:
    events = build_responses()[:-3]
    assert validate_responses_sse(_named(events), require_terminal=False) == events


# ---------------------------------------------------------------------------------------------
# Item status (docs/wire-facts.md, Output items: a missing item status breaks strict clients)
# ---------------------------------------------------------------------------------------------


def _status_everywhere(done_nth: int, value: object) -> Callable[[list[dict]], None]:
    """Set (or, with None, delete) the status of the nth item on its done event and in the
    terminal output, so only the check under test can fire."""

    def mutate(ev: list[dict]) -> None:
        for item in (
            ev[_find(ev, "response.output_item.done", done_nth)]["item"],
            ev[-1]["response"]["output"][done_nth],
        ):
            if value is None:
                item.pop("status", None)
            else:
                item["status"] = value

    return mutate


STATUS_MUTATIONS: dict[str, tuple[Callable[[list[dict]], None], str]] = {
    # missing on output_item.added
    "added message without status": (
        _delete_key("response.output_item.added", "item.status", nth=1),
        "added item (message) has no `status`",
    ),
    "added function_call without status": (
        _delete_key("response.output_item.added", "item.status", nth=2),
        "added item (function_call) has no `status`",
    ),
    "added custom_tool_call without status": (
        _delete_key("response.output_item.added", "item.status", nth=3),
        "added item (custom_tool_call) has no `status`",
    ),
    "added status null": (
        _set("response.output_item.added", "item.status", None, nth=2),
        "added item (function_call) has no `status`",
    ),
    # missing on output_item.done
    "done message without status": (_status_everywhere(1, None), "done item (message) has no `status`"),
    "done function_call without status": (_status_everywhere(2, None), "done item (function_call) has no `status`"),
    "done custom_tool_call without status": (
        _status_everywhere(3, None),
        "done item (custom_tool_call) has no `status`",
    ),
    # missing in the terminal response.output only
    "terminal message without status": (
        lambda ev: ev[-1]["response"]["output"][1].pop("status"),
        "response.output[1] (message) has no `status`",
    ),
    "terminal function_call without status": (
        lambda ev: ev[-1]["response"]["output"][2].pop("status"),
        "response.output[2] (function_call) has no `status`",
    ),
    "terminal custom_tool_call without status": (
        lambda ev: ev[-1]["response"]["output"][3].pop("status"),
        "response.output[3] (custom_tool_call) has no `status`",
    ),
    # values outside the allowed set
    "added status queued": (
        _set("response.output_item.added", "item.status", "queued", nth=2),
        "added item has status 'queued', expected 'in_progress'",
    ),
    "added status incomplete": (
        _set("response.output_item.added", "item.status", "incomplete", nth=1),
        "added item has status 'incomplete', expected 'in_progress'",
    ),
    "done status failed": (
        _status_everywhere(1, "failed"),
        "done item has status 'failed', expected 'completed' or 'incomplete'",
    ),
    "done status searching": (
        _status_everywhere(3, "searching"),
        "done item has status 'searching', expected 'completed' or 'incomplete'",
    ),
    "done status wrong case": (_status_everywhere(2, "Completed"), "done item has status 'Completed'"),
    "terminal status in_progress": (
        _terminal_output(2, "status", "in_progress"),
        "response.output[2] has status 'in_progress'",
    ),
    # reasoning: status optional (real OpenAI items have none), but when sent it must be valid
    "reasoning added completed": (
        _set("response.output_item.added", "item.status", "completed"),
        "added item has status 'completed', expected 'in_progress'",
    ),
    "reasoning done in_progress": (_status_everywhere(0, "in_progress"), "done item still has status 'in_progress'"),
    "reasoning done failed": (
        _status_everywhere(0, "failed"),
        "done item has status 'failed', expected 'completed' or 'incomplete'",
    ),
}


@pytest.mark.parametrize("name", sorted(STATUS_MUTATIONS))
def test_item_status_violation_is_reported(name: str) -> None:
    _assert_reported(*STATUS_MUTATIONS[name])


def test_item_status_good_values_pass() -> None:
    # reasoning without status (as OpenAI sends it) is what build_responses emits
    validate_responses_events(build_responses())
    # reasoning with status, as DeepSeek / LM Studio send it
    events = build_responses()
    events[_find(events, "response.output_item.added")]["item"]["status"] = "in_progress"
    _status_everywhere(0, "completed")(events)
    validate_responses_events(events)
    # items cut by a length limit or a failure are 'incomplete'
    for terminal in ("incomplete", "failed"):
        events = build_responses(terminal)
        for nth in range(4):
            _status_everywhere(nth, "incomplete")(events)
        validate_responses_events(events)


def _web_search_stream(added_item: dict, done_item: dict) -> list[dict]:
    events = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.in_progress", "response": _response("in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": added_item},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": _response("completed", [copy.deepcopy(done_item)], usage=copy.deepcopy(USAGE)),
        },
    ]
    return _renumber(events)


def test_web_search_call_status_is_required_and_may_be_failed() -> None:
    base = {"id": "ws_1", "type": "web_search_call"}
    action = {"action": {"type": "search", "query": "q"}}
    validate_responses_events(
        _web_search_stream({**base, "status": "in_progress"}, {**base, "status": "completed", **action})
    )
    validate_responses_events(
        _web_search_stream({**base, "status": "in_progress"}, {**base, "status": "failed", **action})
    )
    with pytest.raises(StreamViolation, match=r"added item \(web_search_call\) has no `status`"):
        validate_responses_events(_web_search_stream(dict(base), {**base, "status": "completed", **action}))
    with pytest.raises(StreamViolation, match=r"done item \(web_search_call\) has no `status`"):
        validate_responses_events(_web_search_stream({**base, "status": "in_progress"}, {**base, **action}))


def _image_stream(phases: list[dict], added: dict, done: dict) -> list[dict]:
    """An image_generation_call stream with the item-scoped events ``phases`` (each an event
    without item_id/output_index) between its added and done events."""
    scoped = [{**p, "item_id": "ig_1", "output_index": 0} for p in phases]
    events = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.in_progress", "response": _response("in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": added},
        *scoped,
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {
            "type": "response.completed",
            "response": _response("completed", [copy.deepcopy(done)], usage=copy.deepcopy(USAGE)),
        },
    ]
    return _renumber(events)


IMG = {"id": "ig_1", "type": "image_generation_call"}
IMG_ADDED = {**IMG, "status": "in_progress", "result": None}
IMG_DONE = {**IMG, "status": "completed", "result": "iVBORw0KGgo="}


def _img(phase: str, **fields: object) -> dict:
    return {"type": f"response.image_generation_call.{phase}", **fields}


def _partial(n: int) -> dict:
    return _img("partial_image", partial_image_b64="iVBO", partial_image_index=n)


def test_image_generation_call_events_in_order() -> None:
    whole = [_img("in_progress"), _img("generating"), _partial(0), _partial(1), _img("completed")]
    validate_responses_events(_image_stream(whole, IMG_ADDED, IMG_DONE))
    failed = {**IMG, "status": "failed", "result": None}
    validate_responses_events(_image_stream(whole[:3], IMG_ADDED, failed))
    bad = {
        "partial before generating": ([_img("in_progress"), _partial(0)], IMG_DONE, "must follow .generating"),
        "partial index skips": (
            [_img("in_progress"), _img("generating"), _partial(1)],
            IMG_DONE,
            "partial_image_index 1, expected 0",
        ),
        "partial without b64": (
            [_img("in_progress"), _img("generating"), _img("partial_image", partial_image_index=0)],
            IMG_DONE,
            "non-empty partial_image_b64",
        ),
        "completed without its event": ([_img("in_progress"), _img("generating")], IMG_DONE, "its .completed event"),
        "completed twice": ([*whole, _img("completed")], IMG_DONE, "precede .completed"),
        "generating first": ([_img("generating")], IMG_DONE, "generating after"),
        "failed after completed": (whole, {**IMG, "status": "failed", "result": None}, "'failed' after"),
        "completed without result": (whole, {**IMG, "status": "completed", "result": None}, "base64 result"),
    }
    for name, (phases, done, message) in bad.items():
        with pytest.raises(StreamViolation, match=re.escape(message)):
            validate_responses_events(_image_stream(phases, IMG_ADDED, done))
            pytest.fail(name)
    with pytest.raises(StreamViolation, match="start with result null"):
        validate_responses_events(_image_stream(whole, {**IMG_ADDED, "result": "x"}, IMG_DONE))
    with pytest.raises(StreamViolation, match=r"added item \(image_generation_call\) has no `status`"):
        validate_responses_events(_image_stream(whole, dict(IMG), IMG_DONE))


# ---------------------------------------------------------------------------------------------
# The validator's own SSE frame parser
# ---------------------------------------------------------------------------------------------


def test_validator_does_not_use_the_project_sse_decoder() -> None:
    from tests.support import validators

    source = inspect.getsource(validators)
    assert not re.search(r"^\s*(from|import)\s+translators", source, re.MULTILINE)


def _with_line_ends(raw: bytes, end: bytes) -> bytes:
    return raw.replace(b"\n", end)


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_sse_line_endings_are_equivalent(end: bytes) -> None:
    events = build_responses()
    assert validate_responses_sse(_with_line_ends(_named(events), end)) == events
    chunks = build_chat()
    assert validate_chat_sse(_with_line_ends(_data(chunks) + DONE_FRAME, end), expect_usage=True) == chunks


def test_sse_mixed_line_endings() -> None:
    events = build_responses()
    frames = [encode_named(e["type"].encode(), orjson.dumps(e)) for e in events]
    ends = [b"\n", b"\r\n", b"\r"]
    raw = b"".join(f.replace(b"\n", ends[pos % 3]) for pos, f in enumerate(frames))
    assert validate_responses_sse(raw) == events
    # a CR and an LF that are not adjacent are two line ends: the frame ends at the blank line
    assert sse_frames(b"data: a\r\n\rdata: b\n\r") == [(None, b"a"), (None, b"b")]


@pytest.mark.parametrize(
    "raw, frames",
    [
        (b"data: x\n\n", [(None, b"x")]),
        (b"data:x\n\n", [(None, b"x")]),  # the space is optional
        (b"data:  x\n\n", [(None, b" x")]),  # only one space is removed
        (b"data: x \n\n", [(None, b"x ")]),  # trailing space is kept
        (b"event:e\ndata:x\n\n", [("e", b"x")]),
        (b"event: e \ndata: x\n\n", [("e ", b"x")]),
        (b"data: a\ndata: b\ndata:\n\n", [(None, b"a\nb\n")]),  # multi-line data joined with \n
        (b"data:\n\n", [(None, b"")]),
        (b": comment\n\n: another\ndata: x\n: inside a frame\n\n", [(None, b"x")]),
        (b"\n\n\ndata: x\n\n\n\ndata: y\n\n", [(None, b"x"), (None, b"y")]),  # extra blank lines
        (b"data: x\n\n: trailing comment\n", [(None, b"x")]),
        (b"", []),
    ],
)
def test_sse_frames_accepts(raw: bytes, frames: list) -> None:
    assert sse_frames(raw) == frames


@pytest.mark.parametrize(
    "raw, fragment",
    [
        # a trailing partial frame or line at the end of a complete stream
        (b"data: x\n\ndata: y\n", "stream ends inside a frame"),
        (b"data: x\n\ndata: y", "stream ends in the middle of a line"),
        (b"data: x\n\nevent: e\n", "stream ends inside a frame"),
        (b"data: x\n\n: keepalive", "stream ends in the middle of a line"),
        (b"data: x\r\n\r\ndata: y\r\n", "stream ends inside a frame"),
        # lines crossfeed never sends
        (b"id: 1\ndata: x\n\n", "unexpected SSE line (field b'id')"),
        (b"retry: 100\n\n", "unexpected SSE line (field b'retry')"),
        (b"data x\n\n", "unexpected SSE line (field b'data x')"),
        (b"Data: x\n\n", "unexpected SSE line (field b'Data')"),
        (b" data: x\n\n", "unexpected SSE line"),
        (b"event: a\nevent: b\ndata: x\n\n", "line 2: second `event:` line in one frame"),
        (b"event: a\n\n", "line 2: frame with an `event:` line but no `data:` line"),
        (b"event:\ndata: x\n\n", "line 1: empty event name"),
        (b"event: \xff\ndata: x\n\n", "line 1: event name is not UTF-8"),
        (b"\xef\xbb\xbfdata: x\n\n", "byte-order mark"),
    ],
)
def test_sse_frames_rejects(raw: bytes, fragment: str) -> None:
    with pytest.raises(StreamViolation) as info:
        sse_frames(raw)
    assert fragment in str(info.value), str(info.value)


def test_sse_frames_rejects_non_bytes() -> None:
    with pytest.raises(StreamViolation, match="must be bytes"):
        sse_frames("data: x\n\n")  # type: ignore[arg-type]


@pytest.mark.parametrize("cut", [1, 2, 9], ids=["no final LF", "no blank line", "mid data"])
def test_trailing_partial_frame_fails_a_complete_stream(cut: int) -> None:
    events = build_responses()
    raw = _named(events)[:-cut]
    with pytest.raises(StreamViolation, match="stream ends in"):
        validate_responses_sse(raw)
    # a stream accepted as cut drops the open frame, as a client does when the connection ends
    assert validate_responses_sse(raw, require_terminal=False) == events[:-1]
    chunks = build_chat()
    with pytest.raises(StreamViolation, match="stream ends in"):
        validate_chat_sse((_data(chunks) + DONE_FRAME)[:-cut])


def test_multiline_data_frames_validate() -> None:
    """JSON split over several `data:` lines (newlines are JSON whitespace) is one event."""
    events = build_responses()
    raw = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e).replace(b",", b",\ndata: ", 1) + b"\n\n"
        for e in events
    )
    assert validate_responses_sse(raw) == events


def test_comments_and_keepalives_between_frames_validate() -> None:
    events = build_responses()
    raw = b": keepalive\n\n" + b": keepalive\n\n".join(
        encode_named(e["type"].encode(), orjson.dumps(e)) for e in events
    )
    assert validate_responses_sse(raw) == events
    chunks = build_chat()
    assert validate_chat_sse(b": hi\n\n" + _data(chunks) + b": bye\n\n" + DONE_FRAME) == chunks


def test_framing_rule_violations_surface_through_the_public_functions() -> None:
    events = build_responses()
    raw = _named(events)
    with pytest.raises(StreamViolation, match="second `event:` line"):
        validate_responses_sse(b"event: response.created\n" + raw)
    with pytest.raises(StreamViolation, match=r"field b'id'"):
        validate_chat_sse(b"id: 7\n" + _data(build_chat()) + DONE_FRAME)


def test_sse_frames_agree_with_a_whatwg_decoder_on_every_capture() -> None:
    """Differential check on real bodies: the validator's parser and crossfeed's decoder (which
    follows the WHATWG rules) must see the same frames; a disagreement is a bug in one of them."""
    paths = sorted(captures_dir().glob("*/*.sse"))
    assert paths, f"no captures under {CAPTURES}"
    for path in paths:
        raw = path.read_bytes()
        decoder = SSEDecoder()
        assert sse_frames(raw) == [*decoder.feed(raw), *decoder.finish()], path.name
        for end in (b"\r\n", b"\r"):
            assert sse_frames(_with_line_ends(raw, end)) == sse_frames(raw), (path.name, end)


# ---------------------------------------------------------------------------------------------
# Chat Completions
# ---------------------------------------------------------------------------------------------

CHAT_OK = [
    "openai-gpt4o-text-usage.sse",
    "openai-gpt41nano-text-usage-obfuscation.sse",
    "openai-gpt4o-parallel-tool-calls.sse",
    "openai-gpt4o-parallel-tools-two-messages.sse",
    "openai-gpt5-parallel-tool-calls.sse",
    "openai-gpt4omini-tool-call.sse",
    "openai-gpt4omini-text-after-tool.sse",
    "openai-gpt4o-refusal.sse",
    "openai-gpt4o-refusal-logprobs.sse",
    "openai-gpt4o-content-logprobs.sse",
    "openai-gpt4o-length-max-tokens-1.sse",
    "alibaba-qwen3max-reasoning-content.sse",
    "crusoe-vllm-llama33-text.sse",
    "llamacpp-gptoss20b-reasoning-content-tool-call.sse",
    "xai-grok4fast-parallel-tool-calls.sse",
    # error frame (`event: error`, no [DONE]) after a normal start
    "groq-gptoss-error-event-midstream.sse",
]

CHAT_REJECTED = {
    "openai-gpt4o-n3-multiple-choices.sse": "choice must be an object with index 0",
    "openai-gpt5-moderation-extra-chunk.sse": "chunk after the usage chunk",
    "openrouter-claude-reasoning-details.sse": "role repeated",
    "together-deepseek-r1-inline-think.sse": "role repeated",
    "deepseek-chat-length.sse": "a chunk with usage must have choices == []",
    "alibaba-qwen3max-tool-call.sse": "tool call 0: id repeated after the first fragment",
    "azure-openai-model-router-prompt-filter.sse": "object is '', expected 'chat.completion.chunk'",
    "xai-grok3mini-reasoning-content.sse": "created changed",
    "avian-kimik25-reasoning-details-parallel-tools.sse": "id changed",
    "mistral-magistral-thinking-content-array.sse": "delta.content must be a string or null",
    "groq-compound-executed-tools.sse": "first delta must carry role 'assistant'",
}


@pytest.mark.parametrize("name", CHAT_OK)
def test_conforming_chat_capture_passes(name: str) -> None:
    chunks = validate_chat_sse(_read(CHAT / name))
    assert chunks and chunks[0]["object"] == "chat.completion.chunk"


@pytest.mark.parametrize("name, fragment", sorted(CHAT_REJECTED.items()))
def test_nonconforming_chat_capture_is_rejected(name: str, fragment: str) -> None:
    with pytest.raises(StreamViolation) as info:
        validate_chat_sse(_read(CHAT / name))
    assert fragment in str(info.value), str(info.value)


def test_usage_expectation_on_real_capture() -> None:
    raw = _read(CHAT / "openai-gpt4o-text-usage.sse")
    validate_chat_sse(raw, expect_usage=True)
    with pytest.raises(StreamViolation, match="usage was not requested"):
        validate_chat_sse(raw, expect_usage=False)
    chunks = validate_chat_sse(raw)[:-1]
    validate_chat_chunks(chunks, expect_usage=False)
    with pytest.raises(StreamViolation, match="expected a final usage chunk"):
        validate_chat_chunks(chunks, expect_usage=True)


CHAT_USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
# the chunks of these cases: ``"usage": null`` and ``"logprobs": null`` as OpenAI sends them
_chunk = functools.partial(chat_chunk, id="chatcmpl-1", logprobs=None, null_usage=True)


def build_chat(usage: bool = True) -> list[dict]:
    chunks = [
        _chunk({"role": "assistant", "content": "", "refusal": None}),
        _chunk({"reasoning_content": "hmm"}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": ""}}
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
        _chunk(
            {
                "tool_calls": [
                    {"index": 0, "function": {"arguments": "1}"}},
                    {"index": 1, "id": "call_2", "type": "function", "function": {"name": "mul", "arguments": "{}"}},
                ]
            }
        ),
        _chunk({}, "tool_calls"),
    ]
    if usage:
        chunks.append(_chunk(None, usage=(3, 4)))
    return chunks


def _delta(pos: int, **fields: object) -> Callable[[list[dict]], None]:
    return lambda chunks: chunks[pos]["choices"][0]["delta"].update(fields)


def _fragment(pos: int, entry: int, **fields: object) -> Callable[[list[dict]], None]:
    return lambda chunks: chunks[pos]["choices"][0]["delta"]["tool_calls"][entry].update(fields)


def _top(pos: int, **fields: object) -> Callable[[list[dict]], None]:
    return lambda chunks: chunks[pos].update(fields)


def _del_fragment_key(pos: int, entry: int, key: str) -> Callable[[list[dict]], None]:
    return lambda chunks: chunks[pos]["choices"][0]["delta"]["tool_calls"][entry].pop(key)


CHAT_MUTATIONS: dict[str, tuple[Callable[[list[dict]], object], str]] = {
    "wrong object": (_top(2, object="chat.completion"), "object is 'chat.completion'"),
    "id changes": (_top(3, id="chatcmpl-2"), "id changed from 'chatcmpl-1' to 'chatcmpl-2'"),
    "model changes": (_top(3, model="other"), "model changed"),
    "created changes": (_top(3, created=2), "created changed from 1 to 2"),
    "first chunk without id": (_top(0, id=""), "first chunk needs a non-empty id"),
    "no role": (lambda c: c[0]["choices"][0]["delta"].pop("role"), "first delta must carry role 'assistant'"),
    "role repeated": (_delta(2, role="assistant"), "chunk #2: role repeated"),
    "content not a string": (_delta(2, content=["x"]), "delta.content must be a string or null"),
    "fragment without index": (_del_fragment_key(5, 0, "index"), "needs an integer index"),
    "bool index": (_fragment(5, 0, index=True), "needs an integer index"),
    "fragment without function": (_del_fragment_key(5, 0, "function"), "fragment needs a `function` object"),
    "index gap": (_fragment(6, 1, index=2), "tool call index 2 leaves a gap (next is 1)"),
    "first index not 0": (_fragment(4, 0, index=1), "tool call index 1 leaves a gap (next is 0)"),
    "id repeated": (_fragment(5, 0, id="call_1"), "tool call 0: id repeated"),
    "type repeated": (_fragment(5, 0, type="function"), "tool call 0: type repeated"),
    "name repeated": (
        lambda c: c[5]["choices"][0]["delta"]["tool_calls"][0]["function"].update(name="add"),
        "tool call 0: function.name repeated",
    ),
    "first fragment without id": (_del_fragment_key(4, 0, "id"), "first fragment needs id"),
    "first fragment without name": (
        lambda c: c[4]["choices"][0]["delta"]["tool_calls"][0]["function"].pop("name"),
        "first fragment needs id",
    ),
    "arguments not a string": (
        lambda c: c[5]["choices"][0]["delta"]["tool_calls"][0]["function"].update(arguments={"a": 1}),
        "function.arguments must be a string",
    ),
    "no finish_reason": (lambda c: c.__delitem__(slice(-2, None)), "without a finish_reason"),
    "two finish chunks": (lambda c: c.insert(-1, _chunk({}, "stop")), "after finish_reason 'tool_calls'"),
    "content after finish": (lambda c: c.insert(-1, _chunk({"content": "x"})), "that is not the usage chunk"),
    "bad finish_reason": (lambda c: c[-2]["choices"][0].update(finish_reason="done"), "finish_reason 'done'"),
    "tool_calls finish without calls": (lambda c: c.__delitem__(slice(4, 7)), "'tool_calls' without any tool call"),
    "chunk after usage": (lambda c: c.append(_chunk({})), "chunk after the usage chunk"),
    "usage with choices": (lambda c: c[-2].update(usage=dict(CHAT_USAGE)), "usage must have choices == []"),
    "usage before finish": (lambda c: c.insert(-2, c.pop()), "usage chunk before the finish_reason chunk"),
    "usage field not int": (lambda c: c[-1]["usage"].update(total_tokens=None), "usage.total_tokens"),
    "empty choices without usage": (
        lambda c: c.insert(3, _chunk(None)),
        "choices == [] is only allowed on the usage chunk",
    ),
    "two choices": (lambda c: c[2]["choices"].append(copy.deepcopy(c[2]["choices"][0])), "2 choices in one chunk"),
    "choice index 1": (lambda c: c[2]["choices"][0].update(index=1), "choice must be an object with index 0"),
    "delta missing": (lambda c: c[2]["choices"][0].pop("delta"), "choice.delta must be an object"),
    "number repeated": (
        lambda c: (_delta(1, n_tokens=1)(c), _delta(2, n_tokens=2)(c)),
        "number at delta.n_tokens repeated",
    ),
    "object list repeated": (
        lambda c: (
            _delta(2, annotations=[{"type": "url_citation"}])(c),
            _delta(3, annotations=[{"type": "url_citation"}])(c),
        ),
        "delta.annotations (a list of objects without index) sent twice",
    ),
    "error after finish": (
        lambda c: c.insert(-1, {"error": {"message": "x", "type": "server_error"}}),
        "error frame after finish_reason",
    ),
    "chunk after error": (
        lambda c: c.insert(3, {"error": {"message": "x", "type": "server_error"}}),
        "chunk after the error frame",
    ),
    "error without type": (
        lambda c: c.__setitem__(slice(3, None), [{"error": {"message": "x"}}]),
        "error frame needs error {message, type}",
    ),
}


def test_synthetic_chat_stream_passes() -> None:
    validate_chat_chunks(build_chat(), expect_usage=True)
    validate_chat_chunks(build_chat(usage=False), expect_usage=False)
    validate_chat_chunks([*build_chat()[:3], {"error": {"message": "boom", "type": "server_error"}}])
    validate_chat_chunks([{"error": {"message": "boom", "type": "server_error"}}], expect_usage=True)


@pytest.mark.parametrize("name", sorted(CHAT_MUTATIONS))
def test_chat_rule_violation_is_reported(name: str) -> None:
    mutate, fragment = CHAT_MUTATIONS[name]
    chunks = build_chat()
    mutate(chunks)
    with pytest.raises(StreamViolation) as info:
        validate_chat_chunks(chunks)
    assert fragment in str(info.value), str(info.value)


def test_empty_chat_stream() -> None:
    with pytest.raises(StreamViolation, match="empty stream"):
        validate_chat_chunks([])


def _data(chunks: list[dict]) -> bytes:
    return b"".join(encode_data(orjson.dumps(c)) for c in chunks)


def test_chat_sse_round_trip_and_error_frames() -> None:
    chunks = build_chat()
    assert validate_chat_sse(_data(chunks) + DONE_FRAME, expect_usage=True) == chunks
    error = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
    head = _data(chunks[:3])
    assert validate_chat_sse(head + _data([error]))[-1] == error
    assert validate_chat_sse(head + _data([error]) + DONE_FRAME)[-1] == error
    named_error = b"event: error\n" + _data([error])
    assert validate_chat_sse(head + named_error)[-1] == error


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (lambda c: _data(c), "does not end with `data: [DONE]`"),
        (lambda c: _data(c) + DONE_FRAME + DONE_FRAME, "frame after `data: [DONE]`"),
        (lambda c: _data(c[:2]) + DONE_FRAME + _data(c[2:]), "frame after `data: [DONE]`"),
        (lambda c: b"event: chunk\n" + _data(c) + DONE_FRAME, "unexpected `event: chunk` line"),
        (lambda c: _data(c[:2]) + b"event: error\n" + _data(c[2:]) + DONE_FRAME, "unexpected `event: error` line"),
        (lambda c: _data(c) + b"event: done\n" + DONE_FRAME, "`event:` line on the [DONE] frame"),
        (lambda c: _data(c[:1]) + b"data: {oops\n\n" + DONE_FRAME, "frame #1: data is not JSON"),
        (lambda c: _data(c[:-1]) + DONE_FRAME, None),  # valid without usage unless usage is expected
    ],
)
def test_chat_sse_framing(raw: Callable[[list[dict]], bytes], fragment: str | None) -> None:
    body = raw(build_chat())
    if fragment is None:
        validate_chat_sse(body)
        with pytest.raises(StreamViolation, match="expected a final usage chunk"):
            validate_chat_sse(body, expect_usage=True)
        return
    with pytest.raises(StreamViolation) as info:
        validate_chat_sse(body)
    assert fragment in str(info.value), str(info.value)


def test_accumulate_chat_synthetic() -> None:
    assert accumulate_chat(build_chat()) == {
        "content": "Hello",
        "refusal": None,
        "reasoning": "hmm",
        "tool_calls": [
            {"id": "call_1", "name": "add", "arguments": '{"a":1}'},
            {"id": "call_2", "name": "mul", "arguments": "{}"},
        ],
        "finish_reason": "tool_calls",
        "usage": CHAT_USAGE,
        "error": None,
    }
    chunks = build_chat()
    for chunk in chunks:
        for choice in chunk["choices"]:
            if "reasoning_content" in choice["delta"]:
                choice["delta"]["reasoning"] = choice["delta"].pop("reasoning_content")
    assert accumulate_chat(chunks)["reasoning"] is None
    assert accumulate_chat(chunks, reasoning_field="reasoning")["reasoning"] == "hmm"


def test_accumulate_chat_real_captures() -> None:
    calls = accumulate_chat(validate_chat_sse(_read(CHAT / "openai-gpt4o-parallel-tool-calls.sse")))
    assert [c["name"] for c in calls["tool_calls"]] == ["get_country", "get_product_name"]
    assert all(c["id"].startswith("call_") and json.loads(c["arguments"]) == {} for c in calls["tool_calls"])
    assert calls["finish_reason"] == "tool_calls" and calls["usage"]["total_tokens"] == 404
    refusal = accumulate_chat(validate_chat_sse(_read(CHAT / "openai-gpt4o-refusal.sse")))
    assert refusal["content"] is None and refusal["refusal"].startswith("I'm sorry")
    failed = accumulate_chat(validate_chat_sse(_read(CHAT / "groq-gptoss-error-event-midstream.sse")))
    assert failed["finish_reason"] is None and failed["error"]["code"] == "tool_use_failed"


# ---------------------------------------------------------------------------------------------
# Re-chunking helpers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_split_points_is_a_reproducible_partition(seed: int) -> None:
    data = bytes(range(256)) * 3
    pieces = split_points(data, seed, 17)
    assert b"".join(pieces) == data and len(pieces) == 17 and all(pieces)
    assert split_points(data, seed, 17) == pieces
    assert split_points(b"abc", seed, 10) == [b"a", b"b", b"c"]
    assert split_points(b"abc", seed, 0) == [b"abc"]
    assert split_points(b"", seed, 3) == []


def test_split_points_differ_by_seed() -> None:
    data = b"x" * 1000
    assert len({tuple(map(len, split_points(data, seed, 9))) for seed in range(6)}) > 1


@pytest.mark.parametrize("splitter", [byte_by_byte, lambda d: split_points(d, 1, 7), lambda d: split_points(d, 2, 300)])
def test_rechunked_capture_decodes_identically(splitter: Callable[[bytes], list[bytes]]) -> None:
    raw = _read(RESP / "openai-gpt4omini-parallel-function-calls.sse")
    decoder = SSEDecoder()
    frames = [f for piece in splitter(raw) for f in decoder.feed(piece)] + decoder.finish()
    whole = SSEDecoder()
    assert frames == [*whole.feed(raw), *whole.finish()]
    assert byte_by_byte(b"ab\r\n") == [b"a", b"b", b"\r", b"\n"]


# ---------------------------------------------------------------------------------------------
# Cross-check against openai-python's own stream accumulators
# ---------------------------------------------------------------------------------------------


def _sdk():
    pytest.importorskip("openai")
    from openai._models import construct_type_unchecked
    from openai._types import omit
    from openai.lib.streaming.chat._completions import ChatCompletionStreamState
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.chat import ChatCompletionChunk
    from openai.types.responses import ResponseStreamEvent

    def responses(events: list[dict]) -> None:
        state = ResponseStreamState(input_tools=omit, text_format=omit)
        for event in events:
            state.handle_event(construct_type_unchecked(type_=ResponseStreamEvent, value=event))

    def chat(chunks: list[dict]):
        state = ChatCompletionStreamState()
        for chunk in chunks:
            state.handle_chunk(construct_type_unchecked(type_=ChatCompletionChunk, value=chunk))
        return state.current_completion_snapshot  # get_final_completion raises on "length"

    return responses, chat


@pytest.mark.parametrize("terminal", ["completed", "incomplete", "failed"])
def test_sdk_accepts_the_synthetic_responses_stream(terminal: str) -> None:
    responses, _ = _sdk()
    responses(build_responses(terminal))
    broken = build_responses(terminal)
    broken[-1]["response"]["id"] = "resp_other"
    with pytest.raises(RuntimeError, match="identity changed"):
        responses(broken)


@pytest.mark.parametrize("name", [n for n in CHAT_OK if "error" not in n])
def test_accumulate_chat_agrees_with_the_sdk(name: str) -> None:
    _, chat = _sdk()
    chunks = validate_chat_sse(_read(CHAT / name))
    ours = accumulate_chat(chunks)
    final = chat(chunks)
    choice = final.choices[0]
    assert ours["finish_reason"] == choice.finish_reason
    assert ours["content"] == choice.message.content
    assert ours["refusal"] == choice.message.refusal
    sdk_calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in choice.message.tool_calls or []
    ]
    assert ours["tool_calls"] == sdk_calls
    assert (ours["usage"] or {}).get("total_tokens") == (final.usage.total_tokens if final.usage else None)


def test_accumulate_chat_synthetic_agrees_with_the_sdk() -> None:
    _, chat = _sdk()
    message = chat(build_chat()).choices[0].message
    assert message.role == "assistant" and message.content == accumulate_chat(build_chat())["content"]
