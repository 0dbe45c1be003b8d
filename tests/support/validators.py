"""Strict-client validators for every stream crossfeed emits.

They describe what crossfeed must OUTPUT, so they are stricter than any single client: each rule
is one that openai-python 3.x or openai-node 7.x enforces (docs/wire-facts.md, "What the SDK
accumulators check" and "Deltas"), or a lifecycle fact of real OpenAI streams whose absence has
broken clients (the rest of its sections 1 and 2). A broken rule raises ``StreamViolation``
naming the event/chunk position and the rule.

Public interface::

    validate_responses_events(events, *, require_terminal=True, dialect="openai") -> None
    validate_responses_sse(raw, *, require_terminal=True, dialect="openai") -> list[dict]  (parsed events)
    validate_chat_chunks(chunks, *, expect_usage=None)         -> None
    validate_chat_sse(raw, *, expect_usage=None)               -> list[dict]  (chunks, no [DONE])
    accumulate_chat(chunks, *, reasoning_field="reasoning_content") -> dict
    sse_frames(raw, *, complete=True)                          -> list[(event name | None, data)]

SSE framing is parsed here by ``sse_frames``, a small strict parser that shares no code with
``translators.sse``, so a bug in crossfeed's own decoder cannot hide itself in the tests.

``dialect``: the client's event names (crossfeed's ``event_dialect``): OpenAI's
(``response.reasoning_text.delta``/``.done``), or ``"open_responses"``, where the raw reasoning
events are ``response.reasoning.delta``/``.done`` and OpenAI's names of them are violations.

Deliberate limits: Chat streams are checked for ``n=1`` only (crossfeed rejects ``n>1``);
``input_tokens_details.cache_write_tokens`` is not required (real OpenAI captures lack it).
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import orjson

from .open_responses import check_events

__all__ = [
    "StreamViolation",
    "accumulate_chat",
    "sse_frames",
    "validate_chat_chunks",
    "validate_chat_sse",
    "validate_responses_events",
    "validate_responses_sse",
]


class StreamViolation(AssertionError):
    """A stream breaks a rule that a strict client relies on."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


# ---------------------------------------------------------------------------------------------
# Responses API
# ---------------------------------------------------------------------------------------------

_TERMINAL = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}
_OPENING = ("response.created", "response.in_progress")
_INCOMPLETE_REASONS = {"max_output_tokens", "content_filter", "max_messages", "steered"}

# Item-scoped event -> the item type it belongs to (None: decided by the part type).
_ITEM_FAMILY: dict[str, str | None] = {
    "response.content_part.added": None,
    "response.content_part.done": None,
    "response.output_text.delta": "message",
    "response.output_text.done": "message",
    "response.output_text.annotation.added": "message",
    "response.refusal.delta": "message",
    "response.refusal.done": "message",
    "response.function_call_arguments.delta": "function_call",
    "response.function_call_arguments.done": "function_call",
    "response.custom_tool_call_input.delta": "custom_tool_call",
    "response.custom_tool_call_input.done": "custom_tool_call",
    "response.reasoning_summary_part.added": "reasoning",
    "response.reasoning_summary_part.done": "reasoning",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_summary_text.done": "reasoning",
    "response.reasoning_text.delta": "reasoning",
    "response.reasoning_text.done": "reasoning",
    "response.code_interpreter_call_code.delta": "code_interpreter_call",
    "response.code_interpreter_call_code.done": "code_interpreter_call",
    "response.image_generation_call.partial_image": "image_generation_call",
    "response.mcp_call_arguments.delta": "mcp_call",
    "response.mcp_call_arguments.done": "mcp_call",
    "response.shell_call_output_content.delta": "shell_call_output",
    "response.shell_call_output_content.done": "shell_call_output",
    "response.compaction.compacting": "compaction",
}
for _family, _phases in {
    "web_search_call": ("in_progress", "searching", "completed"),
    "file_search_call": ("in_progress", "searching", "completed"),
    "code_interpreter_call": ("in_progress", "interpreting", "completed"),
    "image_generation_call": ("in_progress", "generating", "completed"),
    "mcp_call": ("in_progress", "completed", "failed"),
    "mcp_list_tools": ("in_progress", "completed", "failed"),
}.items():
    for _phase in _phases:
        _ITEM_FAMILY[f"response.{_family}.{_phase}"] = _family
# Scoped by output_index only (no item_id on the wire).
_INDEX_ONLY = {f"response.shell_call_command.{p}": "shell_call" for p in ("added", "delta", "done")}
_UNSCOPED = {
    "error",
    "response.queued",
    "response.output_item.added",
    "response.output_item.done",
    "response.audio.delta",
    "response.audio.done",
    "response.audio.transcript.delta",
    "response.audio.transcript.done",
    *_OPENING,
    *_TERMINAL,
}
KNOWN_RESPONSES_EVENTS = frozenset(_ITEM_FAMILY) | frozenset(_INDEX_ONLY) | frozenset(_UNSCOPED)
# The Open Responses dialect's names -> OpenAI's, which the rules below are written in.
_OPEN_RESPONSES_NAMES = {
    "response.reasoning.delta": "response.reasoning_text.delta",
    "response.reasoning.done": "response.reasoning_text.done",
}
_DIALECTS = ("openai", "open_responses")

# Text streamed into a content part: delta event prefix -> (part type, field of part and of *.done).
_PART_TEXT = {
    "response.output_text": ("output_text", "text"),
    "response.refusal": ("refusal", "refusal"),
    "response.reasoning_text": ("reasoning_text", "text"),
}
_PART_OWNER = {"output_text": "message", "refusal": "message", "reasoning_text": "reasoning"}
# Text streamed into the item itself: event prefix -> field of the item and of *.done.
_ITEM_TEXT = {
    "response.function_call_arguments": "arguments",
    "response.custom_tool_call_input": "input",
    "response.code_interpreter_call_code": "code",
    "response.mcp_call_arguments": "arguments",
}
# Item types whose text stream must be closed by its *.done event before output_item.done.
_REQUIRED_ITEM_TEXT = {
    "function_call": "response.function_call_arguments",
    "custom_tool_call": "response.custom_tool_call_input",
}
_CALL_ID_TYPES = {"function_call", "custom_tool_call", "shell_call", "shell_call_output"}
# Item `status` (docs/wire-facts.md, Output items: a missing item status breaks strict clients).
# Required on these types in output_item.added / .done and in the terminal response.output;
# real OpenAI reasoning items carry none, so there it is optional but, when
# present, held to the same values. Added items are always in_progress.
_STATUS_REQUIRED = frozenset(
    {
        "message",
        "function_call",
        "custom_tool_call",
        "web_search_call",
        "tool_search_call",
        "tool_search_output",
        "image_generation_call",
    }
)
# The fields of the tool search items (openai-python's ResponseToolSearchCall and
# ResponseToolSearchOutputItem): no other key, each of its type.
_TOOL_SEARCH_KEYS = {
    "tool_search_call": frozenset({"id", "type", "call_id", "execution", "status", "arguments", "created_by"}),
    "tool_search_output": frozenset({"id", "type", "call_id", "execution", "status", "tools", "created_by"}),
}
_DONE_STATUSES = {
    "message": ("completed", "incomplete"),
    "function_call": ("completed", "incomplete"),
    "custom_tool_call": ("completed", "incomplete"),
    "reasoning": ("completed", "incomplete"),
}
_DONE_STATUSES_OTHER = ("completed", "incomplete", "failed")  # hosted calls (web_search_call, mcp_call...)


def _comparable(item: Any) -> Any:
    """An output item for equality: ``encrypted_content`` is opaque and OpenAI re-encrypts it
    between output_item.done and the terminal event, so only its presence is compared."""
    if isinstance(item, dict) and "encrypted_content" in item:
        return {**item, "encrypted_content": item["encrypted_content"] is not None}
    return item


def _parts(parts: Any) -> Any:
    """Message content parts for equality: ``logprobs`` is left out (OpenAI fills it on the
    done item but not on content_part.done, and the shapes differ from delta logprobs)."""
    if not isinstance(parts, list):
        return parts
    return [{k: v for k, v in p.items() if k != "logprobs"} if isinstance(p, dict) else p for p in parts]


class _Part:
    __slots__ = ("type", "pieces", "text_done", "final", "annotations")

    def __init__(self, part_type: str) -> None:
        self.type = part_type
        self.pieces: list[str] = []
        self.text_done = False  # the family's *.done text event was seen
        self.final: dict | None = None  # the part carried by *_part.done
        self.annotations: list = []

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class _Item:
    __slots__ = ("added", "parts", "summary", "streams", "streams_done", "final", "phases")

    def __init__(self, added: dict) -> None:
        self.added = added
        self.parts: list[_Part] = []
        self.summary: list[_Part] = []
        self.streams: dict[str, list[str]] = {}
        self.streams_done: set[str] = set()
        self.final: dict | None = None
        self.phases: list[str] = []  # an image_generation_call's events, in order

    @property
    def type(self) -> str:
        return self.added["type"]


class _ResponsesChecker:
    def __init__(self, dialect: str = "openai") -> None:
        if dialect not in _DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}")
        self.renamed = _OPEN_RESPONSES_NAMES if dialect == "open_responses" else {}
        self.items: list[_Item] = []
        self.ids: set[str] = set()
        self.call_ids: set[str] = set()
        self.response_id: str | None = None
        self.terminal: str | None = None
        self.error_at: int | None = None
        self.pos = 0
        self.etype = ""
        self.queued = False  # a response.queued came second (a background response waiting to start)

    def fail(self, message: str) -> NoReturn:
        raise StreamViolation(f"event #{self.pos} ({self.etype}): {message}")

    # -- driver ---------------------------------------------------------------------------

    def run(self, events: list[dict], require_terminal: bool) -> None:
        if not events:
            if require_terminal:
                raise StreamViolation("empty stream: no events at all")
            return
        for pos, event in enumerate(events):
            self.pos, self.etype = pos, "?"
            self.event(event)
        if self.error_at is not None and self.terminal is None and require_terminal:
            raise StreamViolation(f"event #{self.error_at} (error): not followed by response.failed")
        if require_terminal and self.terminal is None:
            raise StreamViolation(
                f"stream ended after {len(events)} events without a terminal event "
                "(response.completed / response.incomplete / response.failed)"
            )

    def event(self, event: Any) -> None:
        if not isinstance(event, dict) or not _nonempty_str(event.get("type")):
            self.fail("event is not an object with a string `type`")
        self.etype = etype = event["type"]
        if self.renamed:
            if etype in self.renamed.values():
                self.fail(f"{etype!r} is OpenAI's name; the open_responses dialect names it otherwise")
            self.etype = etype = self.renamed.get(etype, etype)
        seq = event.get("sequence_number")
        if not _is_int(seq):
            self.fail("missing or non-integer sequence_number")
        if seq != self.pos:
            self.fail(f"sequence_number {seq} != {self.pos} (must start at 0 and grow by 1)")
        if self.terminal is not None:
            self.fail(f"event after the terminal event {self.terminal}")
        if etype not in KNOWN_RESPONSES_EVENTS:
            self.fail(f"unknown event type {etype!r} (openai-node throws on it)")
        if self.error_at is not None and etype != "response.failed":
            self.fail("an `error` event must be followed directly by response.failed")
        if self.pos < 2 and etype != _OPENING[self.pos] and not (self.pos == 1 and etype == "response.queued"):
            self.fail(f"event #{self.pos} must be {_OPENING[self.pos]}")
        if self.queued and self.pos == 2 and etype != "response.in_progress":
            self.fail("event #2 must be response.in_progress (after response.queued)")
        if etype in _ITEM_FAMILY or etype in _INDEX_ONLY:
            self.scoped(event)
        else:
            getattr(self, "on_" + etype.replace("response.", "").replace(".", "_"))(event)

    # -- lifecycle ------------------------------------------------------------------------

    def lifecycle_response(self, event: dict) -> dict:
        response = event.get("response")
        if not isinstance(response, dict) or not _nonempty_str(response.get("id")):
            self.fail("lifecycle event without a `response` object carrying an id")
        if response.get("object") != "response":
            self.fail(f"response.object is {response.get('object')!r}, expected 'response'")
        if self.response_id is None:
            self.response_id = response["id"]
        elif response["id"] != self.response_id:
            self.fail(f"response id changed from {self.response_id!r} to {response['id']!r}")
        if not isinstance(response.get("output"), list):
            self.fail("response.output must be a list")
        return response

    def on_created(self, event: dict) -> None:
        if self.pos != 0:
            self.fail("response.created may only be the first event")
        self.opening(event)

    def on_in_progress(self, event: dict) -> None:
        if self.pos != (2 if self.queued else 1):
            self.fail("response.in_progress may only be the second event (the third after response.queued)")
        self.opening(event)

    def on_queued(self, event: dict) -> None:
        """A background response may wait to start: response.created, response.queued (status
        queued), then response.in_progress. (crossfeed's runs start at once, in_progress: it
        sends none, but a stream that has one in its place is valid.)"""
        if self.pos != 1:
            self.fail("response.queued may only be the second event, right after response.created")
        self.opening(event)
        if event["response"].get("status") != "queued":
            self.fail(f"response.queued with status {event['response'].get('status')!r}, expected 'queued'")
        self.queued = True

    def opening(self, event: dict) -> None:
        response = self.lifecycle_response(event)
        if response["output"] != []:
            self.fail("response.output must be [] before the terminal event")
        if response.get("status") not in ("in_progress", "queued"):
            self.fail(f"status {response.get('status')!r}, expected 'in_progress' (or 'queued')")

    def on_error(self, event: dict) -> None:
        nested = event.get("error")
        if not isinstance(nested, dict) or not _nonempty_str(nested.get("message")):
            self.fail("error event needs a nested `error` object with a message")
        if "message" in event and event["message"] != nested["message"]:
            self.fail("flat `message` differs from error.message")
        self.error_at = self.pos

    def on_completed(self, event: dict) -> None:
        self.terminate(event)

    on_incomplete = on_failed = on_completed

    def on_audio_delta(self, event: dict) -> None:
        """Audio events are not item-scoped; nothing to track."""

    on_audio_done = on_audio_transcript_delta = on_audio_transcript_done = on_audio_delta

    def terminate(self, event: dict) -> None:
        response = self.lifecycle_response(event)
        status = _TERMINAL[self.etype]
        self.terminal = self.etype
        if self.etype == "response.failed" and response.get("status") == "cancelled":
            # a response the client cancelled (WebSocket response.cancel): no error, no error event
            status = "cancelled"
            if response.get("error") is not None or self.error_at is not None:
                self.fail("a cancelled response has error null and no error event")
        if response.get("status") != status:
            self.fail(f"response.status {response.get('status')!r}, expected {status!r}")
        for index, item in enumerate(self.items):
            if item.final is None:
                self.fail(f"item {index} ({item.added['id']!r}) never got output_item.done")
        done = [item.final for item in self.items]
        output = response["output"]
        if len(output) != len(done):
            self.fail(f"response.output has {len(output)} items, {len(done)} were streamed")
        for index, (sent, streamed) in enumerate(zip(output, done, strict=True)):
            if not isinstance(sent, dict) or sent.get("id") != streamed.get("id"):
                got = sent.get("id") if isinstance(sent, dict) else sent
                self.fail(f"response.output[{index}] id {got!r} != streamed id {streamed.get('id')!r}")
            self.item_status(
                sent, f"response.output[{index}]", _DONE_STATUSES.get(sent.get("type"), _DONE_STATUSES_OTHER)
            )
            if _comparable(sent) != _comparable(streamed):
                self.fail(f"response.output[{index}] differs from its output_item.done item")
        if status == "failed":
            error = response.get("error")
            if not (
                isinstance(error, dict) and _nonempty_str(error.get("code")) and _nonempty_str(error.get("message"))
            ):
                self.fail("response.failed needs response.error {code, message}")
            return
        if status == "cancelled":
            return
        if status == "incomplete":
            details = response.get("incomplete_details")
            if not isinstance(details, dict) or details.get("reason") not in _INCOMPLETE_REASONS:
                self.fail(f"incomplete_details.reason must be one of {sorted(_INCOMPLETE_REASONS)}")
            if details["reason"] == "steered":
                self.steered(done)
        elif response.get("error") is not None or response.get("incomplete_details") is not None:
            self.fail("a completed response must have error and incomplete_details null")
        self.usage(response.get("usage"))
        if status == "completed":
            for index, item in enumerate(done):
                if item.get("status") == "incomplete":
                    self.fail(f"item {index} is 'incomplete' inside response.completed")

    def steered(self, done: list[dict]) -> None:
        """A response steering ended (WebSocket ``response.steer``) stopped at a safe boundary:
        between two deltas of a message's text or reasoning, never inside a call. Only its last
        item may be ``incomplete`` (the one that was streaming), and only a message or reasoning."""
        for index, item in enumerate(done):
            if item.get("status") != "incomplete":
                continue
            if index != len(done) - 1:
                self.fail(f"item {index} is 'incomplete' in a steered response but is not its last item")
            if item.get("type") not in ("message", "reasoning"):
                self.fail(f"item {index} ({item.get('type')!r}) was cut by steering: only text or reasoning may be")

    def usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            self.fail("response.usage must be an object")
        for path in (
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "input_tokens_details.cached_tokens",
            "output_tokens_details.reasoning_tokens",
        ):
            value: Any = usage
            for key in path.split("."):
                value = value.get(key) if isinstance(value, dict) else None
            if not _is_int(value) or value < 0:
                self.fail(f"usage.{path} must be a non-negative integer, got {value!r}")

    # -- items ----------------------------------------------------------------------------

    def on_output_item_added(self, event: dict) -> None:
        index, item = event.get("output_index"), event.get("item")
        if index != len(self.items) or not _is_int(index):
            self.fail(f"output_index {index!r} is not append-only (expected {len(self.items)})")
        if not isinstance(item, dict) or not _nonempty_str(item.get("type")):
            self.fail("item must be an object with a type")
        if not _nonempty_str(item.get("id")):
            self.fail("item needs a non-empty id")
        if item["id"] in self.ids:
            self.fail(f"duplicate item id {item['id']!r}")
        self.ids.add(item["id"])
        if item["type"] in _CALL_ID_TYPES:
            if not _nonempty_str(item.get("call_id")):
                self.fail(f"{item['type']} item needs a non-empty call_id")
            if item["call_id"] in self.call_ids:
                self.fail(f"duplicate call_id {item['call_id']!r}")
            self.call_ids.add(item["call_id"])
        self.item_status(item, "added item", ("in_progress",))
        empty = {
            "message": {"content": []},
            "reasoning": {"summary": []},
            "function_call": {"arguments": ""},
            "custom_tool_call": {"input": ""},
        }
        for key, value in empty.get(item["type"], {}).items():
            if item.get(key) != value:
                self.fail(f"added {item['type']} item must start with {key}={value!r}")
        if item["type"] == "reasoning" and item.get("content", []) != []:
            self.fail("added reasoning item must start with content=[]")
        if item["type"] in _TOOL_SEARCH_KEYS:
            self.tool_search_item(item)
        if item["type"] == "image_generation_call" and item.get("result") is not None:
            self.fail("added image_generation_call item must start with result null")
        self.items.append(_Item(item))

    def on_output_item_done(self, event: dict) -> None:
        slot = self.item_at(event)
        item = event.get("item")
        if not isinstance(item, dict):
            self.fail("output_item.done without an item object")
        added = slot.added
        for key in ("id", "type", "call_id"):
            if item.get(key) != added.get(key):
                self.fail(f"done item {key} {item.get(key)!r} != added {added.get(key)!r}")
        if item.get("status") == "in_progress":
            self.fail("done item still has status 'in_progress'")
        self.item_status(item, "done item", _DONE_STATUSES.get(slot.type, _DONE_STATUSES_OTHER))
        self.check_parts_closed(slot)
        required = _REQUIRED_ITEM_TEXT.get(slot.type)
        if required and required not in slot.streams_done:
            self.fail(f"output_item.done before {required}.done")
        for prefix, pieces in slot.streams.items():
            field = _ITEM_TEXT[prefix]
            if item.get(field) != "".join(pieces):
                self.fail(f"done item {field} differs from the streamed deltas")
        if slot.type == "message" and _parts(item.get("content")) != _parts([p.final for p in slot.parts]):
            self.fail("done message content differs from the content_part.done parts")
        if slot.type in _TOOL_SEARCH_KEYS:
            self.tool_search_item(item)
            if slot.type == "tool_search_output" and item.get("execution") == "server":
                calls = {
                    s.final.get("call_id")
                    for s in self.items
                    if s.type == "tool_search_call" and s.final is not None and s.final.get("execution") == "server"
                }
                if item.get("call_id") not in calls:
                    self.fail("tool_search_output answers no completed tool_search_call of this response")
        if slot.type == "reasoning":
            if item.get("summary") != [p.final for p in slot.summary]:
                self.fail("done reasoning summary differs from the reasoning_summary_part.done parts")
            if item.get("content", []) != [p.final for p in slot.parts]:
                self.fail("done reasoning content differs from the content_part.done parts")
        if slot.type == "image_generation_call":
            self.image_done(slot, item)
        slot.final = item

    def tool_search_item(self, item: dict) -> None:
        """A ``tool_search_call`` / ``tool_search_output`` as the SDK types define it."""
        kind = item["type"]
        extra = set(item) - _TOOL_SEARCH_KEYS[kind]
        if extra:
            self.fail(f"{kind} item has unknown fields {sorted(extra)}")
        if item.get("execution") not in ("server", "client"):
            self.fail(f"{kind} item needs execution 'server' or 'client', got {item.get('execution')!r}")
        if item.get("call_id") is not None and not _nonempty_str(item.get("call_id")):
            self.fail(f"{kind} item call_id must be a non-empty string or null")
        if kind == "tool_search_call" and not isinstance(item.get("arguments"), dict):
            self.fail("tool_search_call item needs its arguments as an object")
        if kind == "tool_search_output":
            tools = item.get("tools")
            if not isinstance(tools, list) or not all(
                isinstance(t, dict) and _nonempty_str(t.get("type")) for t in tools
            ):
                self.fail("tool_search_output item needs tools: a list of tool objects")
            for t in tools:
                if t["type"] == "namespace" and not (
                    _nonempty_str(t.get("name"))
                    and isinstance(t.get("description"), str)
                    and isinstance(t.get("tools"), list)
                ):
                    self.fail("a namespace tool needs name, description and tools")

    def item_status(self, item: dict, label: str, allowed: tuple[str, ...]) -> None:
        """``status`` must be present on the types that require it and, if present, allowed."""
        status = item.get("status")
        if status is None:
            if item.get("type") in _STATUS_REQUIRED:
                self.fail(f"{label} ({item.get('type')}) has no `status` (strict clients need it)")
            return
        if status not in allowed:
            self.fail(f"{label} has status {status!r}, expected " + " or ".join(repr(a) for a in allowed))

    def check_parts_closed(self, slot: _Item) -> None:
        for label, parts in (("content part", slot.parts), ("summary part", slot.summary)):
            for index, part in enumerate(parts):
                if part.final is None:
                    self.fail(f"output_item.done while {label} {index} is still open")

    def item_at(self, event: dict) -> _Item:
        index = event.get("output_index")
        if not _is_int(index) or not 0 <= index < len(self.items):
            self.fail(f"output_index {index!r} names no added item")
        slot = self.items[index]
        if slot.final is not None:
            self.fail(f"event for item {index} after its output_item.done")
        return slot

    def scoped(self, event: dict) -> None:
        slot = self.item_at(event)
        if self.etype in _INDEX_ONLY:
            family = _INDEX_ONLY[self.etype]
        else:
            family = _ITEM_FAMILY[self.etype]
            if event.get("item_id") != slot.added["id"]:
                self.fail(f"item_id {event.get('item_id')!r} != item id {slot.added['id']!r}")
        if family is not None and slot.type != family:
            self.fail(f"event belongs to a {family} item, item is {slot.type}")
        prefix, _, phase = self.etype.rpartition(".")
        if self.etype.startswith("response.content_part."):
            self.content_part(slot, event, phase)
        elif prefix in _PART_TEXT:
            self.part_text(slot, event, prefix, phase)
        elif self.etype == "response.output_text.annotation.added":
            self.annotation(slot, event)
        elif prefix == "response.reasoning_summary_part":
            self.summary_part(slot, event, phase)
        elif prefix == "response.reasoning_summary_text":
            self.summary_text(slot, event, phase)
        elif prefix in _ITEM_TEXT:
            self.item_text(slot, event, prefix, phase)
        elif prefix == "response.image_generation_call":
            self.image_phase(slot, event, phase)

    # -- image generation calls (openai.types.responses.response_image_gen_call_*_event) ---

    def image_phase(self, slot: _Item, event: dict, phase: str) -> None:
        """in_progress, generating, partial_image (0-based, consecutive), completed: in that order."""
        seen = slot.phases
        expected = {"in_progress": [], "generating": ["in_progress"]}
        if phase in expected and seen != expected[phase]:
            self.fail(f"image_generation_call.{phase} after {seen!r}")
        if phase in ("partial_image", "completed") and (
            seen[:2] != ["in_progress", "generating"] or "completed" in seen
        ):
            self.fail(f"image_generation_call.{phase} must follow .generating and precede .completed")
        if phase == "partial_image":
            if not _nonempty_str(event.get("partial_image_b64")):
                self.fail("partial_image needs a non-empty partial_image_b64")
            index = event.get("partial_image_index")
            if not _is_int(index) or index != seen.count("partial_image"):
                self.fail(f"partial_image_index {index!r}, expected {seen.count('partial_image')} (0-based, in order)")
        seen.append(phase)

    def image_done(self, slot: _Item, item: dict) -> None:
        completed = "completed" in slot.phases
        if item.get("status") == "completed":
            if not completed or not _nonempty_str(item.get("result")):
                self.fail("a completed image_generation_call needs its .completed event and a base64 result")
        elif completed:
            self.fail(f"image_generation_call is {item.get('status')!r} after its .completed event")

    # -- content parts ---------------------------------------------------------------------

    def indexed(self, parts: list[_Part], event: dict, key: str) -> _Part:
        index = event.get(key)
        if not _is_int(index) or not 0 <= index < len(parts):
            self.fail(f"{key} {index!r} names no added part")
        part = parts[index]
        if part.final is not None:
            self.fail(f"event for part {index} after its part was done")
        return part

    def content_part(self, slot: _Item, event: dict, phase: str) -> None:
        part = event.get("part")
        if not isinstance(part, dict) or part.get("type") not in _PART_OWNER:
            self.fail(f"part type {part.get('type') if isinstance(part, dict) else part!r} is not allowed")
        if _PART_OWNER[part["type"]] != slot.type:
            self.fail(f"a {part['type']} part cannot belong to a {slot.type} item")
        field = "refusal" if part["type"] == "refusal" else "text"
        if part["type"] == "output_text" and not isinstance(part.get("annotations"), list):
            self.fail("output_text part needs an `annotations` list")
        if phase == "added":
            if event.get("content_index") != len(slot.parts):
                self.fail(f"content_index {event.get('content_index')!r} does not append (expected {len(slot.parts)})")
            if part.get(field) != "" or part.get("annotations", []) != []:
                self.fail(f"added {part['type']} part must start empty")
            slot.parts.append(_Part(part["type"]))
            return
        tracked = self.indexed(slot.parts, event, "content_index")
        if part["type"] != tracked.type:
            self.fail(f"content_part.done type {part['type']} != added {tracked.type}")
        if not tracked.text_done:
            self.fail(f"content_part.done before the {part['type']} .done event")
        if part.get(field) != tracked.text:
            self.fail(f"content_part.done {field} differs from the streamed deltas")
        if part["type"] == "output_text" and part["annotations"] != tracked.annotations:
            self.fail("content_part.done annotations differ from annotation.added events")
        tracked.final = part

    def part_text(self, slot: _Item, event: dict, prefix: str, phase: str) -> None:
        part_type, field = _PART_TEXT[prefix]
        part = self.indexed(slot.parts, event, "content_index")
        if part.type != part_type:
            self.fail(f"needs a {part_type} part, content part is {part.type}")
        if part.text_done:
            self.fail(f"{prefix} event after its .done")
        if prefix == "response.output_text" and not isinstance(event.get("logprobs"), list):
            self.fail("output_text event needs a `logprobs` list")
        if phase == "delta":
            if not isinstance(event.get("delta"), str):
                self.fail("delta must be a string")
            part.pieces.append(event["delta"])
            return
        if event.get(field) != part.text:
            self.fail(f".done {field} differs from the concatenated deltas")
        part.text_done = True

    def annotation(self, slot: _Item, event: dict) -> None:
        part = self.indexed(slot.parts, event, "content_index")
        if part.type != "output_text":
            self.fail(f"annotation on a {part.type} part")
        if event.get("annotation_index") != len(part.annotations):
            self.fail(f"annotation_index {event.get('annotation_index')!r} does not append")
        if not isinstance(event.get("annotation"), dict):
            self.fail("annotation must be an object")
        part.annotations.append(event["annotation"])

    def summary_part(self, slot: _Item, event: dict, phase: str) -> None:
        part = event.get("part")
        if not isinstance(part, dict) or part.get("type") != "summary_text":
            self.fail("summary part must have type 'summary_text'")
        if phase == "added":
            if event.get("summary_index") != len(slot.summary):
                self.fail(
                    f"summary_index {event.get('summary_index')!r} does not append (expected {len(slot.summary)})"
                )
            if part.get("text") != "":
                self.fail("added summary part must start empty")
            slot.summary.append(_Part("summary_text"))
            return
        tracked = self.indexed(slot.summary, event, "summary_index")
        if not tracked.text_done:
            self.fail("reasoning_summary_part.done before reasoning_summary_text.done")
        if part.get("text") != tracked.text:
            self.fail("reasoning_summary_part.done text differs from the streamed deltas")
        tracked.final = part

    def summary_text(self, slot: _Item, event: dict, phase: str) -> None:
        part = self.indexed(slot.summary, event, "summary_index")
        if part.text_done:
            self.fail("reasoning_summary_text event after its .done")
        if phase == "delta":
            if not isinstance(event.get("delta"), str):
                self.fail("delta must be a string")
            part.pieces.append(event["delta"])
            return
        if event.get("text") != part.text:
            self.fail(".done text differs from the concatenated deltas")
        part.text_done = True

    def item_text(self, slot: _Item, event: dict, prefix: str, phase: str) -> None:
        if prefix in slot.streams_done:
            self.fail(f"{prefix} event after its .done")
        pieces = slot.streams.setdefault(prefix, [])
        if phase == "delta":
            if not isinstance(event.get("delta"), str):
                self.fail("delta must be a string")
            pieces.append(event["delta"])
            return
        field = _ITEM_TEXT[prefix]
        if event.get(field) != "".join(pieces):
            self.fail(f".done {field} differs from the concatenated deltas")
        slot.streams_done.add(prefix)


def validate_responses_events(
    events: list[dict], *, require_terminal: bool = True, open_responses: bool = True, dialect: str = "openai"
) -> None:
    """Check parsed Responses events against every strict-client rule; raise StreamViolation.

    With ``require_terminal=False`` a stream cut before its terminal event is accepted (every
    event present is still checked); a terminal event, if present, is checked in full.
    ``open_responses``: also validate every event and Response against the Open Responses schema
    (tests/support/open_responses.py); off only for streams crossfeed did not produce (captures).
    ``dialect``: the event names expected (the module docstring).
    """
    _ResponsesChecker(dialect).run(events, require_terminal)
    if open_responses:
        check_events(events)


_LINE_END = re.compile(rb"\r\n|\r|\n")


def sse_frames(raw: bytes, *, complete: bool = True) -> list[tuple[str | None, bytes]]:
    """Split an SSE body into ``(event name or None, data)`` frames, strictly.

    Lines end in ``\\n``, ``\\r\\n`` or ``\\r``; ``data:`` and ``event:`` lose one optional space
    after the colon; several ``data:`` lines of a frame are joined with ``\\n``; lines starting
    with ``:`` are comments; a blank line ends a frame. Anything crossfeed never sends is a
    violation: other fields (``id:``, ``retry:``, lines without a colon), a second ``event:``
    line in a frame, an ``event:`` line without data, an empty or non-UTF-8 event name, a
    leading byte-order mark. A frame (or line) left open at the end is a violation when
    ``complete``; otherwise it is dropped, as a client drops it when the connection ends.
    """
    if not isinstance(raw, (bytes, bytearray)):
        raise StreamViolation(f"SSE body must be bytes, got {type(raw).__name__}")
    raw = bytes(raw)
    if raw.startswith(b"\xef\xbb\xbf"):
        raise StreamViolation("line 1: SSE body starts with a byte-order mark")
    lines = _LINE_END.split(raw)
    tail = lines.pop()  # after the last line end: b"" when the body ends with one
    frames: list[tuple[str | None, bytes]] = []
    data: list[bytes] = []
    name: str | None = None
    named = False  # an `event:` line was seen in the open frame
    for number, line in enumerate(lines, 1):
        if not line:
            if data:
                frames.append((name, b"\n".join(data)))
            elif named:
                raise StreamViolation(f"line {number}: frame with an `event:` line but no `data:` line")
            data, name, named = [], None, False
        elif line[:1] == b":":
            continue
        elif line[:5] == b"data:":
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line[:6] == b"event:":
            if named:
                raise StreamViolation(f"line {number}: second `event:` line in one frame")
            value = line[7:] if line[6:7] == b" " else line[6:]
            try:
                name = value.decode("utf-8")
            except UnicodeDecodeError:
                raise StreamViolation(f"line {number}: event name is not UTF-8") from None
            if not name:
                raise StreamViolation(f"line {number}: empty event name")
            named = True
        else:
            field = line.partition(b":")[0][:40]
            raise StreamViolation(
                f"line {number}: unexpected SSE line (field {field!r}); "
                "only `event:`, `data:` and `:` comments are sent"
            )
    if complete:
        if tail:
            raise StreamViolation(f"line {len(lines) + 1}: stream ends in the middle of a line {tail[:40]!r}")
        if data or named:
            raise StreamViolation("stream ends inside a frame (no blank line after its last line)")
    return frames


def _parse(data: bytes, where: str) -> dict:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StreamViolation(f"{where}: data is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise StreamViolation(f"{where}: data is not a JSON object")
    return value


def validate_responses_sse(
    raw: bytes, *, require_terminal: bool = True, open_responses: bool = True, dialect: str = "openai"
) -> list[dict]:
    """Parse a Responses SSE body, check its framing and events, return the events.

    Framing (``sse_frames``): every frame has an ``event:`` line equal to its data's ``type``;
    no ``[DONE]``. A frame left open at the end is a violation, unless ``require_terminal=False``
    accepts a cut stream (then the open frame is dropped, as a client drops it).
    """
    events = []
    for pos, (name, data) in enumerate(sse_frames(raw, complete=require_terminal)):
        if data == b"[DONE]":
            raise StreamViolation(f"frame #{pos}: `data: [DONE]` is not sent on Responses streams")
        event = _parse(data, f"frame #{pos}")
        if name is None:
            raise StreamViolation(f"frame #{pos}: missing `event:` line")
        if name != event.get("type"):
            raise StreamViolation(f"frame #{pos}: event line {name!r} != data type {event.get('type')!r}")
        events.append(event)
    validate_responses_events(events, require_terminal=require_terminal, open_responses=open_responses, dialect=dialect)
    return events


# ---------------------------------------------------------------------------------------------
# Chat Completions
# ---------------------------------------------------------------------------------------------

_FINISH_REASONS = {"stop", "length", "tool_calls", "content_filter", "function_call"}
_SET_ONCE = ("id", "model", "created")


class _ChatChecker:
    def __init__(self, expect_usage: bool | None) -> None:
        self.expect_usage = expect_usage
        self.first: dict | None = None
        self.role_seen = False
        self.calls: list[str] = []
        self.numbers: set[tuple] = set()
        self.object_lists: set[str] = set()
        self.finish: str | None = None
        self.usage_seen = False
        self.error_seen = False
        self.pos = 0

    def fail(self, message: str) -> NoReturn:
        raise StreamViolation(f"chunk #{self.pos}: {message}")

    def run(self, chunks: list[dict]) -> None:
        if not chunks:
            raise StreamViolation("empty stream: no chunks at all")
        for pos, chunk in enumerate(chunks):
            self.pos = pos
            self.chunk(chunk)
        if self.error_seen:
            return
        self.pos = len(chunks) - 1
        if self.finish is None:
            self.fail("stream ended without a finish_reason (or an error frame)")
        if self.expect_usage and not self.usage_seen:
            self.fail("expected a final usage chunk")

    def chunk(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            self.fail("chunk is not a JSON object")
        if self.usage_seen:
            self.fail("chunk after the usage chunk (it must be the last)")
        if self.error_seen:
            self.fail("chunk after the error frame (it must be the last)")
        if chunk.get("error"):
            return self.error(chunk["error"])
        if chunk.get("object") != "chat.completion.chunk":
            self.fail(f"object is {chunk.get('object')!r}, expected 'chat.completion.chunk'")
        if self.first is None:
            if (
                not _nonempty_str(chunk.get("id"))
                or not _nonempty_str(chunk.get("model"))
                or not _is_int(chunk.get("created"))
            ):
                self.fail("first chunk needs a non-empty id, model and an integer created")
            self.first = chunk
        for key in _SET_ONCE:
            if chunk.get(key) != self.first[key]:
                self.fail(f"{key} changed from {self.first[key]!r} to {chunk.get(key)!r}")
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            self.fail("choices must be a list")
        if chunk.get("usage") is not None:
            return self.usage(chunk["usage"], choices)
        if not choices:
            self.fail("choices == [] is only allowed on the usage chunk")
        if len(choices) != 1:
            self.fail(f"{len(choices)} choices in one chunk (n=1 streams carry exactly one)")
        self.choice(choices[0])

    def error(self, error: Any) -> None:
        if (
            not isinstance(error, dict)
            or not _nonempty_str(error.get("message"))
            or not _nonempty_str(error.get("type"))
        ):
            self.fail("error frame needs error {message, type}")
        if self.finish is not None:
            self.fail("error frame after finish_reason")
        self.error_seen = True

    def usage(self, usage: Any, choices: list) -> None:
        if choices:
            self.fail("a chunk with usage must have choices == []")
        if self.expect_usage is False:
            self.fail("usage chunk present although usage was not requested")
        if self.finish is None:
            self.fail("usage chunk before the finish_reason chunk")
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            if not isinstance(usage, dict) or not _is_int(usage.get(key)) or usage[key] < 0:
                self.fail(f"usage.{key} must be a non-negative integer")
        self.usage_seen = True

    def choice(self, choice: Any) -> None:
        if not isinstance(choice, dict) or choice.get("index") != 0 or not _is_int(choice["index"]):
            self.fail("choice must be an object with index 0")
        if self.finish is not None:
            self.fail(f"chunk after finish_reason {self.finish!r} that is not the usage chunk")
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            self.fail("choice.delta must be an object")
        self.delta(delta)
        finish = choice.get("finish_reason")
        if finish is not None:
            if finish not in _FINISH_REASONS:
                self.fail(f"finish_reason {finish!r} is not one of {sorted(_FINISH_REASONS)}")
            if finish == "tool_calls" and not self.calls:
                self.fail("finish_reason 'tool_calls' without any tool call")
            self.finish = finish

    def delta(self, delta: dict) -> None:
        role = delta.get("role")
        if not self.role_seen:
            if role != "assistant":
                self.fail(f"first delta must carry role 'assistant', got {role!r}")
            self.role_seen = True
        elif role is not None:
            self.fail("role repeated (clients concatenate it: 'assistantassistant')")
        for key in ("content", "refusal"):
            if not isinstance(delta.get(key), (str, type(None))):
                self.fail(f"delta.{key} must be a string or null")
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                self.fail("delta.tool_calls must be a list")
            for fragment in calls:
                self.tool_call(fragment)
        for key, value in delta.items():
            if (
                key != "tool_calls"
                and isinstance(value, list)
                and value
                and all(isinstance(v, dict) and "index" not in v for v in value)
            ):
                if key in self.object_lists:
                    self.fail(f"delta.{key} (a list of objects without index) sent twice")
                self.object_lists.add(key)
        self.numbers_once(delta, ())

    def tool_call(self, fragment: Any) -> None:
        if not isinstance(fragment, dict) or not _is_int(fragment.get("index")):
            self.fail("tool-call fragment needs an integer index")
        index = fragment["index"]
        function = fragment.get("function")
        if not isinstance(function, dict):
            self.fail(f"tool call {index}: fragment needs a `function` object")
        if not isinstance(function.get("arguments", ""), str):
            self.fail(f"tool call {index}: function.arguments must be a string")
        if index > len(self.calls) or index < 0:
            self.fail(f"tool call index {index} leaves a gap (next is {len(self.calls)})")
        if index == len(self.calls):
            if (
                not _nonempty_str(fragment.get("id"))
                or fragment.get("type") != "function"
                or not _nonempty_str(function.get("name"))
            ):
                self.fail(f"tool call {index}: first fragment needs id, type 'function' and name")
            self.calls.append(fragment["id"])
            return
        for key, value in (
            ("id", fragment.get("id")),
            ("type", fragment.get("type")),
            ("function.name", function.get("name")),
        ):
            if value is not None:
                self.fail(f"tool call {index}: {key} repeated after the first fragment")

    def numbers_once(self, value: Any, path: tuple) -> None:
        """Numbers in deltas are summed by clients: each numeric field may appear only once."""
        if isinstance(value, dict):
            for key, item in value.items():
                if key not in ("index", "type"):
                    self.numbers_once(item, (*path, key))
        elif isinstance(value, list):
            for pos, item in enumerate(value):
                key = item.get("index", pos) if isinstance(item, dict) else pos
                self.numbers_once(item, (*path, key))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if path in self.numbers:
                self.fail(f"number at delta.{'.'.join(map(str, path))} repeated (clients add it up)")
            self.numbers.add(path)


def validate_chat_chunks(chunks: list[dict], *, expect_usage: bool | None = None) -> None:
    """Check parsed chat.completion.chunk objects (n=1) against strict-client rules.

    ``expect_usage``: True requires the final usage chunk (unless the stream ends in an error
    frame), False forbids it, None accepts either.
    """
    _ChatChecker(expect_usage).run(chunks)


def validate_chat_sse(raw: bytes, *, expect_usage: bool | None = None) -> list[dict]:
    """Parse a Chat SSE body, check framing and chunks, return the chunks (without [DONE]).

    Framing (``sse_frames``, complete stream): ``data:`` frames only (an ``event: error`` line
    is tolerated on an error frame), ``data: [DONE]`` exactly once and last; it may be omitted
    only after an error frame.
    """
    chunks: list[dict] = []
    frames = sse_frames(raw)
    done_at = None
    for pos, (name, data) in enumerate(frames):
        if done_at is not None:
            raise StreamViolation(f"frame #{pos}: frame after `data: [DONE]`")
        if data == b"[DONE]":
            done_at = pos
            if name is not None:
                raise StreamViolation(f"frame #{pos}: `event:` line on the [DONE] frame")
            continue
        chunk = _parse(data, f"frame #{pos}")
        if name is not None and not (name == "error" and chunk.get("error")):
            raise StreamViolation(f"frame #{pos}: unexpected `event: {name}` line on a chat stream")
        chunks.append(chunk)
    ends_in_error = bool(chunks) and bool(chunks[-1].get("error"))
    if done_at is None and not ends_in_error:
        raise StreamViolation("stream does not end with `data: [DONE]`")
    validate_chat_chunks(chunks, expect_usage=expect_usage)
    return chunks


def accumulate_chat(chunks: list[dict], *, reasoning_field: str = "reasoning_content") -> dict:
    """Fold chunks the way a client would: set-once fields kept, text fields concatenated.

    Returns ``{content, refusal, reasoning, tool_calls: [{id, name, arguments}], finish_reason,
    usage, error}``; text fields are None when no string fragment was seen.
    """
    texts: dict[str, list[str] | None] = {"content": None, "refusal": None, "reasoning": None}
    calls: dict[int, dict] = {}
    out: dict[str, Any] = {"finish_reason": None, "usage": None, "error": None}
    for chunk in chunks:
        if chunk.get("error"):
            out["error"] = chunk["error"]
        if chunk.get("usage") is not None:
            out["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            for name, key in (("content", "content"), ("refusal", "refusal"), ("reasoning", reasoning_field)):
                if isinstance(delta.get(key), str):
                    texts[name] = texts[name] or []
                    texts[name].append(delta[key])
            for fragment in delta.get("tool_calls") or []:
                call = calls.setdefault(fragment["index"], {"id": None, "name": None, "arguments": ""})
                function = fragment.get("function") or {}
                call["id"] = call["id"] or fragment.get("id")
                call["name"] = call["name"] or function.get("name")
                call["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason") is not None:
                out["finish_reason"] = choice["finish_reason"]
    for name, pieces in texts.items():
        out[name] = None if pieces is None else "".join(pieces)
    out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out
