"""The Response assembler: the base of the forward stream machine.

The forward machine (machine.py, ``ChatToResponsesStream``) is a chunk reader on top of two
layers: this one builds the Response and its output items, content_writer.py writes the deltas
into them. The assembler owns:

- numbering: ``sequence_number`` from the numbering core shared with the Responses relay and
  the normaliser (translators/responses/numbering.py: ``_seq``, ``_emit``); in wire mode
  ``_frame`` stamps a finished frame from the same counter, and the per-token text path
  (``_more_text``) takes its number inline. Output indexes and ids are allocated only when an
  item opens (``_new_item``), in order of appearance;
- the lifecycle: ``start()`` (``response.created``, ``response.in_progress``), ``end_response()``
  (the terminal event: ``response.completed``, or ``response.incomplete`` for ``length``,
  ``model_length`` (``max_output_tokens``) and ``content_filter``), ``fail()`` (open items closed
  ``incomplete``, then ``error`` and ``response.failed``);
- items: open (``_open_item``), close with their done events (``_close``: text, refusal,
  reasoning, call arguments or custom input, content part, ``output_item.done``), the items the
  exchange makes itself (``begin_item``/``finish_item``, ``emit_item``, ``item_event``);
- the usage of every leg, added up in the terminal Response.

Phases: ``IDLE -> STREAMING -> {COMPLETED, INCOMPLETE, FAILED}``. A call after a terminal phase
raises ``StreamStateError`` (our bug, never the upstream's).

Legs: one upstream call is a leg. Between the end of one (the reader's ``end_leg``) and the
terminal event the exchange may add items of its own (``emit_item``, a hosted tool's call) and
open another leg (``next_leg``): ``sequence_number`` and ``output_index`` run on across legs and
the usage of all legs adds up in the terminal Response.

Wire mode (``wire=True``, what the proxy uses): the delta events of text, reasoning text and
function-call arguments come out as finished SSE frames (``bytes``), made from a template of
the item's fixed fields (``_head``): no dict to build and serialize per token.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import orjson

from crossfeed.translators import ids as idp
from crossfeed.translators.errors import StreamStateError
from crossfeed.translators.forward.citations import citations
from crossfeed.translators.forward.tool_search import search_arguments
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.json_string_stream import JsonStringField
from crossfeed.translators.options import NO_TOOLS, OPENAI_EVENTS, EventNames, ToolContext
from crossfeed.translators.responses.numbering import Event, NumberedStream
from crossfeed.translators.responses.response_object import map_usage, new_response
from crossfeed.translators.sse import SSE_FRAMING, Framing, Out, framing_of

_dumps = orjson.dumps
SUMMARY_TEXT = "summary_text"
_SEQ_TAIL = b',"sequence_number":'
_CREATED = "response.created"
_IN_PROGRESS = "response.in_progress"
_CREATED_HEAD = b'{"type":"response.created","response":'
_IN_PROGRESS_HEAD = b'{"type":"response.in_progress","response":'


class Phase(Enum):
    IDLE = "idle"
    STREAMING = "streaming"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"


# Mistral's ``model_length``: the answer reached the model's context length, cut as ``length`` is.
INCOMPLETE_REASONS = {
    "length": "max_output_tokens",
    "model_length": "max_output_tokens",
    "content_filter": "content_filter",
}

MESSAGE, REASONING, FUNCTION_CALL, CUSTOM_CALL = "message", "reasoning", "function_call", "custom_tool_call"
HOSTED_CALL = "hosted_call"  # a call to a tool crossfeed runs: never an output item of its own
SEARCH_CALL = "tool_search_call"  # a call to the tool search the client runs (ToolContext.client_search)


class Item:
    """One output item in progress. ``parts`` holds [kind, [text pieces], annotations, logprobs]."""

    __slots__ = (
        "kind",
        "id",
        "index",
        "parts",
        "call_id",
        "name",
        "namespace",
        "args",
        "unwrap",
        "head",
        "head_ci",
        "pieces",
    )

    def __init__(self, kind: str, item_id: str, index: int) -> None:
        self.kind = kind
        self.id = item_id
        self.index = index
        self.parts: list[list[Any]] = []
        self.call_id = ""
        self.name = ""
        self.namespace: str | None = None
        self.args: list[str] = []
        self.unwrap: JsonStringField | None = None
        self.head = b""  # wire mode: the template of this item's delta event (Assembler._head)
        self.head_ci = -1  # ... for this content_index
        # ... its bytes around a JSON string's text and the number, and between two (run_frames)
        self.pieces = (b"", b"", b"", b"")


CALL_TYPES = frozenset({FUNCTION_CALL, CUSTOM_CALL, SEARCH_CALL})


class LegEnd:
    """What one upstream call ended with: its finish reason, its usage, the calls it made for the
    client (output items) and those to tools crossfeed runs (``hosted``: call_id, name, arguments)."""

    __slots__ = ("finish_reason", "usage", "calls", "hosted")

    def __init__(
        self,
        finish_reason: str | None,
        usage: dict[str, Any] | None,
        calls: list[dict[str, Any]],
        hosted: list[dict[str, str]] | None = None,
    ) -> None:
        self.finish_reason = finish_reason
        self.usage = usage
        self.calls = calls
        self.hosted = hosted or []


def _summed(usages: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Chat usage objects of several legs added up (the counts map_usage reads)."""
    total: dict[str, Any] = {}
    for u in usages:
        for key, value in (u or {}).items():
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            elif isinstance(value, dict):
                inner = total.setdefault(key, {})
                for k, v in value.items():
                    if isinstance(v, int) and not isinstance(v, bool):
                        inner[k] = inner.get(k, 0) + v
    return total


class ResponseAssembler(NumberedStream):
    """The Response and its items (see the module docstring); the chunk reader extends it."""

    # The client's event names (options.py ``EventNames``): a slot, as the numbering core's
    # attributes are, so the instance dict keeps its 29 (read once per item, never per token);
    # every other attribute is in the dict.
    __slots__ = ("_events", "__dict__")

    def __init__(
        self,
        request: dict[str, Any],
        *,
        ids: IdFactory,
        now: Callable[[], int],
        tools: ToolContext = NO_TOOLS,
        seal_reasoning: Callable[[str, list[dict[str, Any]] | None], str] | None = None,
        wire: bool | Framing = False,
        events: EventNames = OPENAI_EVENTS,
    ) -> None:
        """Args: as ``ChatToResponsesStream``'s (machine.py), but the backend's profile.

        The machine's instance keeps at most 29 attributes in its dict (the numbering core's are
        slots): CPython 3.11 reads and writes every attribute of an instance with a 30th on a
        slower path, the per-token ones too (tests/translators/forward/test_machine_layers.py)."""
        super().__init__()
        self._ids = ids
        self._now = now
        framing = framing_of(wire)
        self._wire = framing is not None
        self._framing = framing or SSE_FRAMING
        self._end = b"}" + self._framing.end
        self._tools = tools
        self._seal = seal_reasoning
        self._events = events
        self._resp = new_response(
            request, response_id=ids.new(idp.RESPONSE), created_at=now(), model=str(request.get("model") or "")
        )
        self.phase = Phase.IDLE
        # Plain bools mirror the phase for the per-chunk checks (an enum member lookup costs
        # several times a bool): `done` = the phase is terminal, `_live` = feed() is allowed.
        self.done = False
        self._live = False
        self._output: list[dict[str, Any]] = []  # done items, in output_index order
        self._next_index = 0
        self._open: Item | None = None
        self._calls: dict[Any, Item] = {}  # upstream tool index -> open call
        self._open_calls: list[Item] = []
        self._held_space = ""  # whitespace between calls, held until text follows (dropped on a close)
        # reasoning.summary asked ("auto", "concise", "detailed"): reasoning streams as a summary
        # part, as OpenAI's own models send it; otherwise as reasoning_text content.
        wanted = request.get("reasoning")
        self._summaries = bool(wanted.get("summary")) if isinstance(wanted, dict) else False
        self._call_ids: set[str] = set()
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._spent: list[dict[str, Any] | None] = []  # the usage of legs before this one
        self._leg_start = 0  # where this leg's items begin in _output
        self.leg: LegEnd | None = None  # what the last ended leg asked for
        self._hosted: list[dict[str, str]] = []  # this leg's calls to hosted tools, closed
        self._citable: list[tuple[str, str]] = []  # (url, title) a message may cite (cite())
        # With sealing: the backend's reasoning_details entries not yet sealed into a reasoning item.
        self._details: list[dict[str, Any]] = []

    # -- public interface -------------------------------------------------------------------

    @property
    def response_id(self) -> str:
        return str(self._resp["id"])

    @property
    def final_response(self) -> dict[str, Any] | None:
        """The Response carried by the terminal event, once there is one."""
        return self._resp if self.done else None

    def start(self) -> list[Out]:
        """``response.created`` and ``response.in_progress``: sent as soon as the upstream answers."""
        if self.phase is not Phase.IDLE:
            raise StreamStateError("start() called twice")
        self.phase = Phase.STREAMING
        self._live = True
        out = self._out = []
        if self._wire:  # rendered now, once: both frames are made from the same bytes
            body = _dumps(self._resp)
            seq = self._seq
            self._seq = seq + 2
            framing = self._framing
            out.append(b"%s%s%s%s%d%s" % (framing.named(_CREATED), _CREATED_HEAD, body, _SEQ_TAIL, seq, self._end))
            out.append(
                b"%s%s%s%s%d%s" % (framing.named(_IN_PROGRESS), _IN_PROGRESS_HEAD, body, _SEQ_TAIL, seq + 1, self._end)
            )
            return out
        snapshot = self._snapshot()  # the same state in both events: one copy will do
        self._emit({"type": _CREATED, "response": snapshot})
        self._emit({"type": _IN_PROGRESS, "response": snapshot})
        return out

    def emit_item(self, item: dict[str, Any]) -> list[Out]:
        """An output item the exchange made itself between legs (a hosted tool's call), added
        and done at once at the next output index."""
        if self.phase is not Phase.STREAMING or self._live:
            raise StreamStateError("emit_item() between legs only")
        added, index = self.begin_item({**item, "status": "in_progress"})
        return added + self.finish_item(index, item)

    def begin_item(self, item: dict[str, Any], *, then: str | None = None) -> tuple[list[Out], int]:
        """Open an item the exchange builds over time (a compaction, while its summary is
        written): ``output_item.added`` at the next output index, then the event ``then`` names
        (``response.compaction.compacting``) about it. Returns the events and the index for
        ``finish_item``; until then no upstream item may open."""
        if self.phase is not Phase.STREAMING or self._open is not None or self._open_calls:
            raise StreamStateError("begin_item() needs a streaming response with no open item")
        out = self._out = []
        index = self._next_index
        self._next_index += 1
        self._emit({"type": "response.output_item.added", "output_index": index, "item": dict(item)})
        if then:
            self._emit({"type": then, "item_id": item["id"], "output_index": index})
        return out, index

    def finish_item(self, index: int, item: dict[str, Any]) -> list[Out]:
        """``output_item.done`` of an item ``begin_item`` opened; it joins the output."""
        if self.phase is not Phase.STREAMING:
            raise StreamStateError(f"finish_item() in phase {self.phase.value}")
        out = self._out = []
        self._output.append(item)
        self._emit({"type": "response.output_item.done", "output_index": index, "item": item})
        return out

    def item_event(self, event_type: str, index: int, item_id: str, **fields: Any) -> list[Out]:
        """An item-scoped event of an item the exchange runs (``response.web_search_call.searching``,
        ``response.mcp_call_arguments.delta`` with its ``delta``)."""
        out = self._out = []
        self._emit({"type": event_type, "item_id": item_id, "output_index": index, **fields})
        return out

    def cite(self, sources: list[tuple[str, str]]) -> None:
        """The URLs (with titles) messages from now on may cite, ``[n]`` the n-th: each citing
        span of their text gets a ``url_citation`` annotation (translators/forward/citations.py)."""
        self._citable = list(sources)

    def output_since(self, start: int) -> list[dict[str, Any]]:
        """The done output items from ``start`` on (what a leg produced)."""
        return self._output[start:]

    @property
    def output_count(self) -> int:
        return len(self._output)

    def spend(self, usage: dict[str, Any] | None) -> None:
        """A chat usage of a call the machine did not read itself (it adds up in the Response)."""
        if usage:
            self._spent.append(usage)

    def end_response(self, *, incomplete: str | None = None) -> list[Out]:
        """The terminal event, built from the accumulated state: ``response.completed``, or
        ``response.incomplete`` when the last leg was cut by a length or content filter, or when
        the exchange says why (``incomplete``: a bound of its own fired)."""
        if self.phase is not Phase.STREAMING or self._live:
            raise StreamStateError("end_response() needs a leg that has ended")
        out = self._out = []
        incomplete = incomplete or INCOMPLETE_REASONS.get(self._finish_reason or "")
        resp = self._resp
        resp["output"] = self._output
        resp["usage"] = map_usage(self._usage_so_far())
        self.done = True
        if incomplete:
            self.phase = Phase.INCOMPLETE
            resp["status"] = "incomplete"
            resp["incomplete_details"] = {"reason": incomplete}
            self._emit({"type": "response.incomplete", "response": resp})
        else:
            self.phase = Phase.COMPLETED
            resp["status"] = "completed"
            resp["completed_at"] = self._now()
            self._emit({"type": "response.completed", "response": resp})
        return out

    def fail(self, code: str, message: str) -> list[Out]:
        """End the stream as failed: close open items, then ``error`` and ``response.failed``."""
        if self.done:
            raise StreamStateError(f"fail() in phase {self.phase.value}")
        out = self._out = []
        if self.phase is Phase.IDLE:
            self.start()
            out = self._out
        self._flush()
        self._close_all("incomplete")
        self.phase = Phase.FAILED
        self.done, self._live = True, False
        resp = self._resp
        resp["status"] = "failed"
        resp["output"] = self._output
        usage = self._usage_so_far()
        resp["usage"] = map_usage(usage) if usage else None
        resp["error"] = {"code": code, "message": message}
        self._emit_error(code, message)
        self._emit({"type": "response.failed", "response": resp})
        return out

    def _flush(self) -> None:
        """What the reader still holds back, written out before ``fail`` closes the items (the
        machine's think-tag splitter); nothing here."""

    # -- opening and closing -----------------------------------------------------------------

    def _new_item(self, kind: str, prefix: str) -> Item:
        item = Item(kind, self._ids.new(prefix), self._next_index)
        self._next_index += 1
        return item

    def _open_item(self, kind: str, prefix: str, body: dict[str, Any]) -> Item:
        item = self._new_item(kind, prefix)
        self._open = item
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": item.index,
                "item": {"id": item.id, "type": kind, **body},
            }
        )
        return item

    def _close_all(self, status: str) -> None:
        if self._held_space:
            self._held_space = ""
            self._note("whitespace_between_calls_dropped")
        if self._open is not None:
            self._close(self._open, status)
        if self._open_calls:
            calls, self._open_calls = self._open_calls, []
            self._calls.clear()
            for call in calls:
                self._close(call, status)

    def _close(self, item: Item, status: str) -> None:
        if item.kind is HOSTED_CALL:
            self._hosted.append({"call_id": item.call_id, "name": item.name, "arguments": "".join(item.args)})
            return
        if item is self._open:
            self._open = None
        base = {"item_id": item.id, "output_index": item.index}
        if item.kind == MESSAGE:
            done = self._close_message(item, base, status)
        elif item.kind == REASONING:
            done = self._close_reasoning(item, base, status)
        elif item.kind == FUNCTION_CALL:
            args = "".join(item.args)
            self._emit({"type": "response.function_call_arguments.done", **base, "name": item.name, "arguments": args})
            done = self._call_body(item, status, args)
        elif item.kind == SEARCH_CALL:
            done = self._call_body(item, status, "".join(item.args))
        else:
            done = self._call_body(item, status, self._close_custom(item, base))
        self._output.append(done)
        self._emit({"type": "response.output_item.done", "output_index": item.index, "item": done})

    def _close_message(self, item: Item, base: dict[str, Any], status: str) -> dict[str, Any]:
        content = []
        for ci, (kind, pieces, anns, lps) in enumerate(item.parts):
            text = "".join(pieces)
            if kind == "output_text":
                if self._citable:
                    for ann in citations(text, self._citable):
                        anns.append(ann)
                        self._emit(
                            {
                                "type": "response.output_text.annotation.added",
                                **base,
                                "content_index": ci,
                                "annotation_index": len(anns) - 1,
                                "annotation": ann,
                            }
                        )
                self._emit(
                    {"type": "response.output_text.done", **base, "content_index": ci, "text": text, "logprobs": []}
                )
                part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": anns, "logprobs": lps}
            else:
                self._emit({"type": "response.refusal.done", **base, "content_index": ci, "refusal": text})
                part = {"type": "refusal", "refusal": text}
            self._emit(self._part_event("response.content_part.done", item, ci, part))
            content.append(part)
        return {"id": item.id, "type": MESSAGE, "status": status, "role": "assistant", "content": content}

    def _close_reasoning(self, item: Item, base: dict[str, Any], status: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        summary: list[dict[str, Any]] = []
        text = ""
        if item.parts and item.parts[0][0] == SUMMARY_TEXT:
            text = "".join(item.parts[0][1])
            self._emit({"type": "response.reasoning_summary_text.done", **base, "summary_index": 0, "text": text})
            part = {"type": SUMMARY_TEXT, "text": text}
            self._emit({"type": "response.reasoning_summary_part.done", **base, "summary_index": 0, "part": part})
            summary.append(part)
        elif item.parts:  # (an item opened for the backend's reasoning_details alone has none)
            text = "".join(item.parts[0][1])
            self._emit({"type": self._events.reasoning_done, **base, "content_index": 0, "text": text})
            part = {"type": "reasoning_text", "text": text}
            self._emit(self._part_event("response.content_part.done", item, 0, part))
            content.append(part)
        done: dict[str, Any] = {
            "id": item.id,
            "type": REASONING,
            "status": status,
            "summary": summary,
            "content": content,
        }
        if self._seal is not None:
            done["encrypted_content"] = self._seal(text, self._details or None)
            self._details = []
        return done

    def _seal_details_left(self) -> None:
        """Details that came while no reasoning item could open (after text, between calls) get
        a reasoning item of their own at the end of the output, so the client sends them back."""
        if self._details:
            self._close(
                self._open_item(REASONING, idp.REASONING, {"status": "in_progress", "summary": [], "content": []}),
                "completed",
            )

    def _close_custom(self, item: Item, base: dict[str, Any]) -> str:
        unwrap = item.unwrap
        assert unwrap is not None
        streamed = "".join(unwrap.emitted)
        final = unwrap.final("".join(item.args), self._tools.custom_arg)
        if final != streamed:
            if final.startswith(streamed):
                rest = final[len(streamed) :]
                self._emit({"type": "response.custom_tool_call_input.delta", **base, "delta": rest})
            else:
                self._note("custom_input_mismatch")
                final = streamed
        self._emit({"type": "response.custom_tool_call_input.done", **base, "input": final})
        return final

    def _call_body(self, item: Item, status: str, payload: str = "") -> dict[str, Any]:
        body: dict[str, Any] = {"id": item.id, "type": item.kind, "status": status}
        if item.kind == SEARCH_CALL:  # no delta events: its arguments are an object, whole at the end
            return {**body, "call_id": item.call_id, "execution": "client", "arguments": search_arguments(payload)}
        if item.kind == CUSTOM_CALL:
            body["call_id"] = item.call_id
            body["name"] = item.name
            body["input"] = payload
        else:
            body["arguments"] = payload
            body["call_id"] = item.call_id
            body["name"] = item.name
        if item.namespace is not None:
            body["namespace"] = item.namespace
        return body

    # -- helpers -----------------------------------------------------------------------------

    def _part_event(self, kind: str, item: Item, ci: int, part: dict[str, Any]) -> Event:
        return {"type": kind, "item_id": item.id, "output_index": item.index, "content_index": ci, "part": part}

    def _usage_so_far(self) -> dict[str, Any] | None:
        """The chat usage of every leg so far: the current one's, added to the earlier ones'."""
        return _summed([*self._spent, self._usage]) if self._spent else self._usage

    def _snapshot(self) -> dict[str, Any]:
        return dict(self._resp)

    def _head(
        self, item: Item, event_type: str, ci: int | None, index_key: bytes = b"content_index", tail: bytes = _SEQ_TAIL
    ) -> bytes:
        """The wire-mode template of ``item``'s delta event: its whole frame, in the key order of
        the dict the event would be (orjson keeps insertion order), with two holes: ``%s`` for the
        delta's JSON and ``%d`` for its sequence number. ``tail``: what comes between them."""
        head = b'%s{"type":"%s","item_id":%s,"output_index":%d' % (
            self._framing.named(event_type),
            event_type.encode(),
            _dumps(item.id),
            item.index,
        )
        if ci is not None:
            head += b',"%s":%d' % (index_key, ci)
        lead = head + b',"delta":"'
        item.pieces = (lead, b'"' + tail, self._end, self._end + lead)
        item.head = head = b"%s%%s%s%%d%s" % (
            (head + b',"delta":').replace(b"%", b"%%"),
            tail,
            self._end.replace(b"%", b"%%"),
        )
        item.head_ci = ci if ci is not None else 0
        return head

    def _frame(self, head: bytes, delta: str) -> None:
        """Wire mode: a delta event without logprobs as its finished frame (``head``: ``_head``'s
        template); one sequence number."""
        seq = self._seq
        self._seq = seq + 1
        self._out.append(head % (_dumps(delta), seq))
