"""A finished Response -> the event stream that would have produced it.

Used by ``GET /v1/responses/{id}?stream=true`` to replay a stored response. The events follow the
same lifecycle rules as a live stream (docs/wire-facts.md, Lifecycle order): created, in_progress, then per item
``output_item.added``, its part events with the whole text as one delta, ``output_item.done``, then
the terminal event matching the stored status. ``events``: the client's dialect of event names
(translators/options.py), as a live stream to that client would name them.
"""

from __future__ import annotations

from typing import Any

from crossfeed.translators.options import OPENAI_EVENTS, EventNames

Event = dict[str, Any]
_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


def replay_events(response: dict[str, Any], events: EventNames = OPENAI_EVENTS) -> list[Event]:
    out: list[Event] = []

    def emit(ev: Event) -> None:
        ev["sequence_number"] = len(out)
        out.append(ev)

    start = {
        **response,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    emit({"type": "response.created", "response": start})
    emit({"type": "response.in_progress", "response": start})
    for index, item in enumerate(response.get("output") or ()):
        _item_events(index, item, emit, events)
    emit({"type": _TERMINAL.get(str(response.get("status")), "response.completed"), "response": response})
    return out


def _item_events(index: int, item: dict[str, Any], emit: Any, names: EventNames) -> None:
    kind = item.get("type")
    base = {"item_id": item.get("id", ""), "output_index": index}
    if kind == "message":
        emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            }
        )
        for ci, part in enumerate(item.get("content") or ()):
            ptype = part.get("type")
            field = "refusal" if ptype == "refusal" else "text"
            empty = {**part, field: ""}
            if ptype == "output_text":
                empty["annotations"] = []
            emit({"type": "response.content_part.added", **base, "content_index": ci, "part": empty})
            text = part.get(field, "")
            if ptype == "refusal":
                emit({"type": "response.refusal.delta", **base, "content_index": ci, "delta": text})
                emit({"type": "response.refusal.done", **base, "content_index": ci, "refusal": text})
            else:
                emit({"type": "response.output_text.delta", **base, "content_index": ci, "delta": text, "logprobs": []})
                for ai, ann in enumerate(part.get("annotations") or ()):
                    emit(
                        {
                            "type": "response.output_text.annotation.added",
                            **base,
                            "content_index": ci,
                            "annotation_index": ai,
                            "annotation": ann,
                        }
                    )
                emit({"type": "response.output_text.done", **base, "content_index": ci, "text": text, "logprobs": []})
            emit({"type": "response.content_part.done", **base, "content_index": ci, "part": part})
    elif kind == "reasoning":
        added = {k: v for k, v in item.items() if k != "encrypted_content"}
        added.update(summary=[], content=[])
        if "status" in added:  # crossfeed's own reasoning items carry one: added, it is in progress
            added["status"] = "in_progress"
        emit({"type": "response.output_item.added", "output_index": index, "item": added})
        for ci, part in enumerate(item.get("content") or ()):
            text = part.get("text", "")
            emit({"type": "response.content_part.added", **base, "content_index": ci, "part": {**part, "text": ""}})
            emit({"type": names.reasoning_delta, **base, "content_index": ci, "delta": text})
            emit({"type": names.reasoning_done, **base, "content_index": ci, "text": text})
            emit({"type": "response.content_part.done", **base, "content_index": ci, "part": part})
    elif kind in ("function_call", "custom_tool_call"):
        field, family = (
            ("arguments", "function_call_arguments") if kind == "function_call" else ("input", "custom_tool_call_input")
        )
        value = item.get(field, "")
        emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", field: ""},
            }
        )
        emit({"type": f"response.{family}.delta", **base, "delta": value})
        done = {"type": f"response.{family}.done", **base, field: value}
        if kind == "function_call":
            done["name"] = item.get("name", "")
        emit(done)
    else:
        emit({"type": "response.output_item.added", "output_index": index, "item": item})
    emit({"type": "response.output_item.done", "output_index": index, "item": item})
