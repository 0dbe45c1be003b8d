"""Chat Completions chunks -> Responses API events: the forward stream machine.

Theory of operation
-------------------
The relay calls ``start()`` once the upstream has answered 200, then ``feed(chunk)`` for every
parsed ``chat.completion.chunk`` (a dict), then exactly one of ``finish()`` (the upstream sent
``[DONE]``), ``finish(clean=False)`` (the upstream closed without ``[DONE]``) or
``fail(code, message)`` (transport or protocol failure). Each call returns the Responses events it
produced, in order, as dicts. Nothing is buffered: every delta becomes an event at once.
In wire mode (``wire=True``, what the proxy uses) the delta events of text, reasoning text and
function-call arguments, the events of nearly every chunk, come out instead as their finished
SSE frames (``bytes``), made from a template of the item's fixed fields: no dict to build and
serialize per token. ``translators.sse.render_responses`` passes them through; the golden and
unit tests check that the bytes equal the frames rendered from the dicts.
``feed_frame(data)`` is ``feed`` for a chunk still in its JSON bytes, decoded into typed structs
(chunk_frames.py); the pump uses it for every frame, and it gives the same events as ``feed``.

Phases: ``IDLE -> STREAMING -> {COMPLETED, INCOMPLETE, FAILED}``. A call after a terminal phase
raises ``StreamStateError`` (our bug, never the upstream's).

Legs: one upstream call is a leg. ``finish()`` is ``end_leg()`` (close the leg's items; ``leg``
says what the model asked for: finish reason, usage, calls) then ``end_response()`` (the
terminal event). Between the two the exchange may add items of its own (``emit_item``, a hosted
tool's call) and open another leg (``next_leg``): ``sequence_number`` and ``output_index`` run on
across legs and the usage of all legs adds up in the terminal Response.

Each chunk's delta is read in one place (``_delta``) in this order: reasoning, content (string or
Mistral's part array), refusal, annotations, tool calls. Reasoning comes from the first present of
``reasoning_content``, ``reasoning`` (string) and ``reasoning_details`` (OpenRouter), so backends that
send the same text in two spellings are not doubled.

Items and transitions (``open`` is the message or reasoning item in progress; ``calls`` are the
function/custom call items in progress):

    incoming \\ open  | none / calls             | reasoning          | message
    ------------------+-------------------------+--------------------+------------------------
    reasoning text    | close calls; open rs    | append             | close msg; open rs
    text / refusal    | close calls; open msg   | close rs; open msg | append (new part when
                      |                         |                    | text <-> refusal)
    tool call, new    | open call (others stay  | close rs; open call| close msg; open call
                      | open: fragments may     |                    |
                      | interleave by index)    |                    |
    tool call, known  | append to that call     | (cannot happen: opening a call closed it)

Calls stay open until other content arrives or the stream ends, so argument fragments that
interleave across tool indexes are never lost. ``output_index`` is allocated when an item opens,
in order of appearance, never taken from the upstream's tool index. A fragment with the index of
an open call but a different non-empty ``id`` starts a new call (Ollama numbers each chunk's calls
from 0); ``id`` and ``name`` repeated on later fragments are ignored (set once).

``finish_reason`` is recorded, not acted on: the usage chunk usually follows it. ``finish()``
closes everything and emits one terminal event: ``stop``/``tool_calls``/none -> completed;
``length`` and ``model_length`` -> incomplete (``max_output_tokens``); ``content_filter`` ->
incomplete (``content_filter``); ``insufficient_system_resource``, ``error`` and ``abort`` ->
failed; any other reason -> completed, counted in ``diagnostics``. ``fail()`` closes open items as
``incomplete`` and emits ``error`` then ``response.failed``. ``_emit`` is the only place that
stamps ``sequence_number``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Any

import orjson

from crossfeed.translators import ids as idp
from crossfeed.translators.errors import StreamStateError, UpstreamProtocolError
from crossfeed.translators.forward.chat_fields import delta_logprobs, details_text, flat_annotation, mistral_parts
from crossfeed.translators.forward.chunk_frames import FRAME_ERRORS, as_dict, decode_chunk
from crossfeed.translators.forward.citations import citations
from crossfeed.translators.forward.content_split import ContentSplitter, Split, function_schemas
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.json_string_stream import JsonStringField
from crossfeed.translators.options import DEFAULT_PROFILE, NO_TOOLS, BackendProfile, ToolContext
from crossfeed.translators.responses.response_object import map_usage, new_response
from crossfeed.translators.sse import SSE_FRAMING, Framing, Out, framing_of

Event = dict[str, Any]

_dumps = orjson.dumps
_TEXT_DELTA = "response.output_text.delta"
_REASONING_DELTA = "response.reasoning_text.delta"
_SUMMARY_DELTA = "response.reasoning_summary_text.delta"
SUMMARY_TEXT = "summary_text"
_ARGS_DELTA = "response.function_call_arguments.delta"
_TEXT_TAIL = b',"logprobs":[],"sequence_number":'
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
_INCOMPLETE_REASONS = {
    "length": "max_output_tokens",
    "model_length": "max_output_tokens",
    "content_filter": "content_filter",
}
# Reasons that say the generation failed: finish_reason -> (error code, message).
_FAILED_REASONS = {
    "insufficient_system_resource": (
        "insufficient_system_resource",
        "the upstream stopped generating for lack of resources",
    ),  # DeepSeek
    "error": ("upstream_error", "the upstream stopped generating because of an error"),  # Mistral, OpenRouter
    "abort": ("upstream_aborted", "the upstream aborted the generation"),  # vLLM, SGLang
}
_KNOWN_FINISH = {"stop", "tool_calls", "function_call", *_INCOMPLETE_REASONS, *_FAILED_REASONS}

# What a chunk of valid JSON but of the wrong shape raises inside the machine.
_SHAPE_ERRORS = (UpstreamProtocolError, TypeError, AttributeError, KeyError, ValueError)
_NOT_TEXT_REASON = "a finish_reason that is not text"

MESSAGE, REASONING, FUNCTION_CALL, CUSTOM_CALL = "message", "reasoning", "function_call", "custom_tool_call"
HOSTED_CALL = "hosted_call"  # a call to a tool crossfeed runs: never an output item of its own


class _Item:
    """One output item in progress. ``parts`` holds [kind, [text pieces], annotations, logprobs]."""

    __slots__ = ("kind", "id", "index", "parts", "call_id", "name", "namespace", "args", "unwrap", "head", "head_ci")

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
        self.head = b""  # wire mode: the frame of this item's delta event up to the delta text
        self.head_ci = -1  # ... for this content_index


_CALL_TYPES = frozenset({FUNCTION_CALL, CUSTOM_CALL})


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


class ChatToResponsesStream:
    def __init__(
        self,
        request: dict[str, Any],
        *,
        ids: IdFactory,
        now: Callable[[], int],
        tools: ToolContext = NO_TOOLS,
        seal_reasoning: Callable[[str, list[dict[str, Any]] | None], str] | None = None,
        profile: BackendProfile = DEFAULT_PROFILE,
        wire: bool | Framing = False,
    ) -> None:
        """Args:
        request: the client's Responses request (echoed on the Response object).
        ids, now: injected id factory and clock.
        tools: custom-tool and namespace names from the request mapping.
        seal_reasoning: when the client asked for ``reasoning.encrypted_content``, turns the
            reasoning text and the backend's ``reasoning_details`` (Gemini's thought signatures,
            Claude's signed thinking, encrypted reasoning: what the backend wants back on the
            next turn) into the opaque ``encrypted_content`` put on reasoning items.
        profile: the backend's dialect; the machine reads what hides in its content from it:
            inline ``<think>`` reasoning and tool-call markup (content_split.py).
        wire: the delta events of text, reasoning text and call arguments come out as finished
            SSE frames (``bytes``, rendered from a per-item template) instead of dicts; every
            other event stays a dict. ``translators.sse.render_responses`` writes both kinds,
            and the bytes are exactly what it would make of the dict. True frames them for SSE;
            a ``Framing`` (``JSON_FRAMING``: WebSocket text frames) is the sink's own choice.
        """
        self._ids = ids
        self._now = now
        framing = framing_of(wire)
        self._wire = framing is not None
        self._framing = framing or SSE_FRAMING
        self._end = b"}" + self._framing.end
        self._tools = tools
        self._seal = seal_reasoning
        self._resp = new_response(
            request, response_id=ids.new(idp.RESPONSE), created_at=now(), model=str(request.get("model") or "")
        )
        self.phase = Phase.IDLE
        # Plain bools mirror the phase for the per-chunk checks (an enum member lookup costs
        # several times a bool): `done` = the phase is terminal, `_live` = feed() is allowed.
        self.done = False
        self._live = False
        self._seq = 0
        self._out: list[Out] = []  # dicts, and in wire mode bytes (finished frames)
        self._output: list[dict[str, Any]] = []  # done items, in output_index order
        self._next_index = 0
        self._open: _Item | None = None
        self._calls: dict[Any, _Item] = {}  # upstream tool index -> open call
        self._open_calls: list[_Item] = []
        self._held_space = ""
        self._think = (
            ContentSplitter(
                think_tags=profile.think_tags, tool_markup=profile.tool_markup, schemas=function_schemas(request)
            )
            if profile.think_tags or profile.tool_markup
            else None
        )
        self._markup_calls = 0
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
        self.diagnostics: dict[str, int] = {}

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

    def feed(self, chunk: dict[str, Any]) -> list[Out]:
        if not self._live:
            raise StreamStateError(f"feed() in phase {self.phase.value}")
        out = self._out = []
        try:
            usage = chunk.get("usage")
            if usage:
                if usage.__class__ is not dict:
                    raise UpstreamProtocolError("a usage that is not an object")
                self._usage = usage
            error = chunk.get("error")
            if error:  # after the usage: a failing chunk may still say what was spent (OpenRouter)
                return self._fail_upstream(error)
            choices = chunk.get("choices")
            if choices:
                if choices.__class__ is not list:
                    raise UpstreamProtocolError("choices that are not a list")
                for choice in choices:
                    if choice.__class__ is not dict:
                        raise UpstreamProtocolError("a choice that is not an object")
                    if choice.get("index", 0):
                        self._note("extra_choice_ignored")
                        continue
                    delta = choice.get("delta")
                    if delta:
                        if delta.__class__ is not dict:
                            raise UpstreamProtocolError("a delta that is not an object")
                        text = delta.get("content") if len(delta) == 1 else None
                        if text.__class__ is str and self._think is None:  # the hot case: text alone
                            if text:
                                self._more_text(text, choice.get("logprobs"))
                        else:
                            self._delta(delta, choice)
                    reason = choice.get("finish_reason")
                    if reason:
                        if reason.__class__ is not str:
                            raise UpstreamProtocolError(_NOT_TEXT_REASON)
                        self._finish_reason = reason
            if usage is None and "x_groq" in chunk:  # Groq reports usage only here
                x_groq = chunk["x_groq"]
                if isinstance(x_groq, dict) and x_groq.get("usage"):
                    self._usage = x_groq["usage"]
            return out
        except _SHAPE_ERRORS as exc:
            return out + self._bad_shape(exc)

    def feed_frame(self, data: bytes) -> list[Out] | None:
        """``feed`` for a chunk still in its JSON bytes: what the pump calls for every frame.

        The frame is decoded into typed structs holding only the fields ``feed`` reads
        (chunk_frames.py), and the shapes nearly every frame of a stream has (one choice whose
        delta is text, reasoning text or tool-call fragments alone, or empty, with or without a
        finish_reason; no usage, no error) go straight to the helpers ``feed`` calls for them.
        Any other chunk goes to ``feed`` itself, as dicts. Returns None when the bytes do not
        decode into that shape (not JSON, not an object, a container of the wrong type): the
        caller then parses them as plain JSON for ``feed``, which reports the problem as it
        always has. tests/unit/test_chunk_frames.py checks both paths give the same events.
        """
        try:
            chunk = decode_chunk(data)
        except FRAME_ERRORS:
            return None
        choices = chunk.choices
        if (
            chunk.usage is not None
            or chunk.error is not None
            or chunk.x_groq is not None
            or choices is None
            or len(choices) != 1
            or choices[0].index
            or self._think is not None
            or not self._live
        ):
            return self.feed(as_dict(chunk))
        choice = choices[0]
        delta = choice.delta
        if delta is not None and (delta.reasoning_details or delta.refusal or delta.annotations or delta.function_call):
            return self.feed(as_dict(chunk))
        out = self._out = []
        try:
            if delta is not None:
                text = delta.content
                reasoning = delta.reasoning_content or delta.reasoning
                tool_calls = delta.tool_calls
                if text.__class__ is str and not reasoning and not tool_calls:
                    if text:
                        self._more_text(text, choice.logprobs)
                elif not text and not tool_calls and reasoning.__class__ is str:
                    self._reasoning(reasoning)
                elif not text and not reasoning and tool_calls.__class__ is list:
                    for tc in tool_calls:
                        self._tool_fragment(tc)
                elif text or reasoning or tool_calls:
                    return self.feed(as_dict(chunk))
            reason = choice.finish_reason
            if reason:
                if reason.__class__ is not str:
                    raise UpstreamProtocolError(_NOT_TEXT_REASON)
                self._finish_reason = reason
        except _SHAPE_ERRORS as exc:
            return out + self._bad_shape(exc)
        return out

    def _bad_shape(self, exc: Exception) -> list[Out]:
        """Valid JSON of the wrong shape. Values are checked before they are stored, so the
        state is consistent: the caller keeps what the chunk already produced, then this fails."""
        what = exc.message if isinstance(exc, UpstreamProtocolError) else "a chunk of an unexpected shape"
        return self.fail("upstream_protocol_error", f"the upstream sent {what}")

    def finish(self, *, clean: bool = True) -> list[Out]:
        """The upstream ended. ``clean``: it sent ``[DONE]``; without it, no finish_reason = cut.
        The end of the leg, then (unless the leg failed) the end of the response."""
        out = self.end_leg(clean=clean)
        if not self.done:
            out += self.end_response()
        return out

    def end_leg(self, *, clean: bool = True) -> list[Out]:
        """End of one upstream call: close its items and record what the model asked for
        (``leg``: finish reason, usage, the calls it made). The Response stays open, so the
        exchange may run a hosted tool and feed another leg (``next_leg``) or end it
        (``end_response``). A leg that failed (cut, or a failing finish_reason) ends the
        response with ``fail`` here."""
        if self.phase is not Phase.STREAMING:
            raise StreamStateError(f"end_leg() in phase {self.phase.value}")
        reason = self._finish_reason
        if not clean and reason is None:
            return self.fail("upstream_truncated", "the upstream closed the stream before it finished")
        failed = _FAILED_REASONS.get(reason or "")
        if failed is not None:
            return self.fail(*failed)
        if reason is None and self._open is None and not self._open_calls and len(self._output) == self._leg_start:
            # [DONE] with nothing before it, not even a finish_reason: a request the server cut
            # short (llama-cpp-python interrupts one for the next), never a successful empty answer.
            return self.fail("upstream_truncated", "the upstream ended the stream without an answer")
        if reason is not None and reason not in _KNOWN_FINISH:
            self._note("unknown_finish_reason")
        out = self._out = []
        if self._usage is None:  # e.g. llama-cpp-python ignores include_usage: usage counts 0
            self._note("usage_not_reported")
        self._flush_think()
        first = self._leg_start
        self._close_all("incomplete" if _INCOMPLETE_REASONS.get(reason or "") else "completed")
        self._seal_details_left()
        self._live = False
        self.leg = LegEnd(
            reason,
            self._usage,
            [item for item in self._output[first:] if item.get("type") in _CALL_TYPES],
            self._hosted,
        )
        self._hosted = []
        return out

    def next_leg(self) -> None:
        """Open the response to another upstream call (after ``end_leg``): numbering goes on,
        the new leg's finish reason and usage are its own (usage adds up at the end)."""
        if self.phase is not Phase.STREAMING or self._live:
            raise StreamStateError("next_leg() needs a leg that has ended")
        if self._usage:
            self._spent.append(self._usage)
        self._usage = None
        self._finish_reason = None
        self._leg_start = len(self._output)
        self._live = True
        self.leg = None

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
        incomplete = incomplete or _INCOMPLETE_REASONS.get(self._finish_reason or "")
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
        self._flush_think()
        self._close_all("incomplete")
        self.phase = Phase.FAILED
        self.done, self._live = True, False
        resp = self._resp
        resp["status"] = "failed"
        resp["output"] = self._output
        usage = self._usage_so_far()
        resp["usage"] = map_usage(usage) if usage else None
        resp["error"] = {"code": code, "message": message}
        self._emit(
            {
                "type": "error",
                "code": code,
                "message": message,
                "param": None,
                "error": {"type": "server_error", "code": code, "message": message, "param": None},
            }
        )
        self._emit({"type": "response.failed", "response": resp})
        return out

    # -- delta classification ---------------------------------------------------------------

    def _delta(self, delta: dict[str, Any], choice: dict[str, Any]) -> None:
        details = delta.get("reasoning_details")
        if details and self._seal is not None:
            self._keep_details(details)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            if isinstance(reasoning, str):
                self._reasoning(reasoning)
        elif details:
            text = details_text(details)
            if text:
                self._reasoning(text)
            elif self._details and self._open is None and not self._open_calls:
                self._open_item(
                    REASONING, idp.REASONING, {"status": "in_progress", "summary": [], "content": []}
                )  # details alone
        content = delta.get("content")
        if content:
            if isinstance(content, str) and self._think is not None:
                self._split_think(self._think.feed(content))
            elif isinstance(content, str):
                self._text("output_text", content, _logprobs(choice))
            elif isinstance(content, list):
                self._content_parts(content)
            else:
                raise UpstreamProtocolError("content that is neither text nor a list of parts")
        refusal = delta.get("refusal")
        if refusal:
            if not isinstance(refusal, str):
                raise UpstreamProtocolError("a refusal that is not text")
            self._text("refusal", refusal, None)
        annotations = delta.get("annotations")
        if annotations and isinstance(annotations, list):
            for ann in annotations:
                self._annotation(ann)
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            if not isinstance(tool_calls, list):
                raise UpstreamProtocolError("tool_calls that are not a list")
            for tc in tool_calls:
                self._tool_fragment(tc)
        function_call = delta.get("function_call")
        if function_call:
            # Legacy single-function streaming. A server that sends it beside ``tool_calls`` in the
            # same delta (llama-cpp-python) repeats the same fragment there: one call, not two.
            if tool_calls:
                self._note("legacy_function_call_dropped")
            else:
                self._tool_fragment({"index": "legacy", "id": None, "function": function_call})

    def _split_think(self, pieces: list[Split]) -> None:
        for piece in pieces:
            if piece[0] == "reasoning":
                item = self._open
                if item is None or item.kind != REASONING:  # a <think> block opens: counted once
                    self._note("think_tags_split")
                self._reasoning(piece[1])
            elif piece[0] == "text":
                self._text("output_text", piece[1], None)
            elif len(piece) == 3:  # a call the backend wrote as markup in its content: a call like any other
                self._note("tool_markup_parsed")
                self._markup_calls += 1
                self._tool_fragment(
                    {
                        "index": f"markup-{self._markup_calls}",
                        "id": None,
                        "function": {"name": piece[1], "arguments": piece[2]},
                    }
                )

    def _flush_think(self) -> None:
        if self._think is not None:
            self._split_think(self._think.finish())

    def _content_parts(self, parts: list[Any]) -> None:
        for kind, text in mistral_parts(parts):
            if kind == "reasoning":
                self._reasoning(text)
            elif kind == "text":
                self._text("output_text", text, None)
            else:
                self._note("unknown_content_part")

    # -- reasoning ---------------------------------------------------------------------------

    def _reasoning(self, text: str) -> None:
        item = self._open
        if item is None or item.kind != REASONING or not item.parts:
            if item is None or item.kind != REASONING:
                self._close_all("completed")
                item = self._open_item(
                    REASONING, idp.REASONING, {"status": "in_progress", "summary": [], "content": []}
                )
            if self._summaries:  # the client asked for reasoning.summary: the reasoning is one
                item.parts.append([SUMMARY_TEXT, []])
                self._emit(
                    {
                        "type": "response.reasoning_summary_part.added",
                        "item_id": item.id,
                        "output_index": item.index,
                        "summary_index": 0,
                        "part": {"type": SUMMARY_TEXT, "text": ""},
                    }
                )
            else:
                part = {"type": "reasoning_text", "text": ""}
                item.parts.append(["reasoning_text", []])
                self._emit(self._part_event("response.content_part.added", item, 0, part))
        item.parts[0][1].append(text)
        if self._wire:
            self._frame(
                item.head
                or (
                    self._head(item, _SUMMARY_DELTA, 0, b"summary_index")
                    if self._summaries
                    else self._head(item, _REASONING_DELTA, 0)
                ),
                text,
            )
            return
        if self._summaries:
            self._emit(
                {
                    "type": _SUMMARY_DELTA,
                    "item_id": item.id,
                    "output_index": item.index,
                    "summary_index": 0,
                    "delta": text,
                }
            )
            return
        self._emit(
            {
                "type": "response.reasoning_text.delta",
                "item_id": item.id,
                "output_index": item.index,
                "content_index": 0,
                "delta": text,
            }
        )

    # -- message text and refusal ------------------------------------------------------------

    def _more_text(self, text: str, lp: Any) -> None:
        """A delta of text alone, most often more text for the open text part: that case is
        handled here in full (the per-chunk path), every other one by ``_text``."""
        item = self._open
        if item is not None and item.kind is MESSAGE and not (lp.__class__ is dict and lp):
            part = item.parts[-1]
            if part[0] == "output_text":
                part[1].append(text)
                seq = self._seq
                self._seq = seq + 1
                ci = len(item.parts) - 1
                if self._wire:
                    head = item.head if item.head_ci == ci else self._head(item, _TEXT_DELTA, ci)
                    self._out.append(b"%s%s%s%d%s" % (head, _dumps(text), _TEXT_TAIL, seq, self._end))
                    return
                self._out.append(
                    {
                        "type": "response.output_text.delta",
                        "item_id": item.id,
                        "output_index": item.index,
                        "content_index": ci,
                        "delta": text,
                        "logprobs": [],
                        "sequence_number": seq,
                    }
                )
                return
        self._text("output_text", text, lp if lp.__class__ is dict else None)

    def _text(self, kind: str, text: str, logprobs: dict[str, Any] | None) -> None:
        item = self._open
        if item is not None and item.kind is MESSAGE and kind == "output_text" and not logprobs:
            part = item.parts[-1]
            if part[0] == "output_text":  # the hot case: more text for the open text part
                self._more_text(text, None)
                return
        if self._open_calls and self._open is None:
            # Whitespace between parallel calls (kimi-k2 on Avian) would split the calls with an
            # empty-looking message: hold it until real text follows; drop it otherwise.
            if not text.strip():
                self._held_space += text
                return
            if self._held_space:
                text, self._held_space = self._held_space + text, ""
        item = self._open
        if item is None or item.kind != MESSAGE:
            self._close_all("completed")
            item = self._open_item(MESSAGE, idp.MESSAGE, {"status": "in_progress", "role": "assistant", "content": []})
        parts = item.parts
        if not parts or parts[-1][0] != kind:
            self._open_part(item, kind)
        part = parts[-1]
        lp = delta_logprobs(logprobs, part) if logprobs else []  # may raise: before any state change
        part[1].append(text)
        ci = len(parts) - 1
        if kind == "output_text":
            self._emit(
                {
                    "type": "response.output_text.delta",
                    "item_id": item.id,
                    "output_index": item.index,
                    "content_index": ci,
                    "delta": text,
                    "logprobs": lp,
                }
            )
        else:
            self._emit(
                {
                    "type": "response.refusal.delta",
                    "item_id": item.id,
                    "output_index": item.index,
                    "content_index": ci,
                    "delta": text,
                }
            )

    def _open_part(self, item: _Item, kind: str) -> None:
        # part record: [kind, pieces, annotations, part logprobs]
        item.parts.append([kind, [], [], []])
        if kind == "output_text":
            part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            part = {"type": "refusal", "refusal": ""}
        self._emit(self._part_event("response.content_part.added", item, len(item.parts) - 1, part))

    def _annotation(self, ann: dict[str, Any]) -> None:
        flat = flat_annotation(ann)
        if flat is None:
            self._note("unknown_annotation")
            return
        item = self._open
        if item is None or item.kind != MESSAGE:
            self._close_all("completed")
            item = self._open_item(MESSAGE, idp.MESSAGE, {"status": "in_progress", "role": "assistant", "content": []})
        if not item.parts or item.parts[-1][0] != "output_text":
            self._open_part(item, "output_text")
        anns = item.parts[-1][2]
        anns.append(flat)
        self._emit(
            {
                "type": "response.output_text.annotation.added",
                "item_id": item.id,
                "output_index": item.index,
                "content_index": len(item.parts) - 1,
                "annotation_index": len(anns) - 1,
                "annotation": flat,
            }
        )

    # -- tool calls --------------------------------------------------------------------------

    def _tool_fragment(self, tc: dict[str, Any]) -> None:
        if not isinstance(tc, dict):
            raise UpstreamProtocolError("a tool call that is not an object")
        key = tc.get("index")
        fn = tc.get("function") or {}
        call_id = tc.get("id")
        name = fn.get("name") if isinstance(fn, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(name, (str, type(None)))
            or not isinstance(call_id, (str, type(None)))
            or not isinstance(key, (int, str, type(None)))
        ):
            raise UpstreamProtocolError("a tool call of an unexpected shape")
        if key is None:  # Mistral omits the index: a fragment with a new id is a new call
            key = self._calls_key_for_id(call_id)
        call = self._calls.get(key)
        if call is not None and call_id and call_id != call.call_id and call.args:
            call = None  # the index was reused for a different call
        if call is None:
            call = self._open_call(key, call_id, name or "")
        if args:
            if not isinstance(args, str):  # a few servers send the arguments as an object
                args = json.dumps(args, ensure_ascii=False)
            self._append_args(call, args)

    def _calls_key_for_id(self, call_id: str | None) -> Any:
        for key, call in self._calls.items():
            if call_id is None or call.call_id == call_id:
                return key
        return ("noindex", len(self._open_calls), call_id)

    def _open_call(self, key: Any, call_id: str | None, name: str) -> _Item:
        if self._open is not None:
            self._close(self._open, "completed")
        if name in self._tools.hosted:  # crossfeed runs it: nothing goes out, no output index
            item = _Item(HOSTED_CALL, "", -1)
            item.call_id = call_id or self._ids.new(idp.CALL)
            item.name = name
            self._calls[key] = item
            self._open_calls.append(item)
            return item
        custom = name in self._tools.custom_tools
        namespace = self._tools.namespaced.get(name)
        if not call_id or call_id in self._call_ids:
            if call_id:
                self._note("duplicate_call_id_replaced")  # clients reject two items with one call_id
            call_id = self._ids.new(idp.CALL)
        self._call_ids.add(call_id)
        if custom:
            item = self._new_item(CUSTOM_CALL, idp.CUSTOM_TOOL_CALL)
            item.unwrap = JsonStringField(self._tools.custom_arg)
        else:
            item = self._new_item(FUNCTION_CALL, idp.FUNCTION_CALL)
        item.call_id = call_id
        item.name = name
        if namespace is not None:
            item.namespace, item.name = namespace
        self._emit(
            {
                "type": "response.output_item.added",
                "output_index": item.index,
                "item": self._call_body(item, "in_progress"),
            }
        )
        self._calls[key] = item
        self._open_calls.append(item)
        return item

    def _append_args(self, call: _Item, args: str) -> None:
        call.args.append(args)
        if call.kind is HOSTED_CALL:
            return
        if call.unwrap is None:
            if self._wire:
                self._frame(call.head or self._head(call, _ARGS_DELTA, None), args)
                return
            self._emit(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": call.id,
                    "output_index": call.index,
                    "delta": args,
                }
            )
            return
        text = call.unwrap.feed(args)
        if text:
            self._emit(
                {
                    "type": "response.custom_tool_call_input.delta",
                    "item_id": call.id,
                    "output_index": call.index,
                    "delta": text,
                }
            )

    def _call_body(self, item: _Item, status: str, payload: str = "") -> dict[str, Any]:
        body: dict[str, Any] = {"id": item.id, "type": item.kind, "status": status}
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

    # -- opening and closing -----------------------------------------------------------------

    def _new_item(self, kind: str, prefix: str) -> _Item:
        item = _Item(kind, self._ids.new(prefix), self._next_index)
        self._next_index += 1
        return item

    def _open_item(self, kind: str, prefix: str, body: dict[str, Any]) -> _Item:
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

    def _close(self, item: _Item, status: str) -> None:
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
        else:
            done = self._call_body(item, status, self._close_custom(item, base))
        self._output.append(done)
        self._emit({"type": "response.output_item.done", "output_index": item.index, "item": done})

    def _close_message(self, item: _Item, base: dict[str, Any], status: str) -> dict[str, Any]:
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

    def _close_reasoning(self, item: _Item, base: dict[str, Any], status: str) -> dict[str, Any]:
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
            self._emit({"type": "response.reasoning_text.done", **base, "content_index": 0, "text": text})
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

    def _keep_details(self, details: Any) -> None:
        """Keep the backend's ``reasoning_details`` entries for sealing, streamed fragments merged:
        an entry of the same ``index`` and ``type`` as the last one continues it (its ``text`` and
        ``summary`` appended, other fields set when not empty, as a signature arrives last)."""
        if not isinstance(details, list):
            return
        kept = self._details
        for entry in details:
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                continue
            last = kept[-1] if kept else None
            if last is None or last.get("index") != entry.get("index") or last["type"] != entry["type"]:
                kept.append(dict(entry))
                continue
            for key, value in entry.items():
                if key in ("text", "summary") and isinstance(value, str) and isinstance(last.get(key), str):
                    last[key] += value
                elif value is not None and value != "":
                    last[key] = value

    def _seal_details_left(self) -> None:
        """Details that came while no reasoning item could open (after text, between calls) get
        a reasoning item of their own at the end of the output, so the client sends them back."""
        if self._details:
            self._close(
                self._open_item(REASONING, idp.REASONING, {"status": "in_progress", "summary": [], "content": []}),
                "completed",
            )

    def _close_custom(self, item: _Item, base: dict[str, Any]) -> str:
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

    # -- helpers -----------------------------------------------------------------------------

    def _part_event(self, kind: str, item: _Item, ci: int, part: dict[str, Any]) -> Event:
        return {"type": kind, "item_id": item.id, "output_index": item.index, "content_index": ci, "part": part}

    def _fail_upstream(self, error: Any) -> list[Out]:
        if isinstance(error, dict):
            message = str(error.get("message") or "upstream error")
            code = error.get("code")
            code = code if isinstance(code, str) and code else "upstream_error"
        else:
            message, code = str(error), "upstream_error"
        return self.fail(code, message)

    def _usage_so_far(self) -> dict[str, Any] | None:
        """The chat usage of every leg so far: the current one's, added to the earlier ones'."""
        return _summed([*self._spent, self._usage]) if self._spent else self._usage

    def _snapshot(self) -> dict[str, Any]:
        return dict(self._resp)

    def _head(self, item: _Item, event_type: str, ci: int | None, index_key: bytes = b"content_index") -> bytes:
        """The wire-mode template of ``item``'s delta event: its frame up to the delta text, in
        the key order of the dict the event would be (orjson keeps insertion order)."""
        head = b'%s{"type":"%s","item_id":%s,"output_index":%d' % (
            self._framing.named(event_type),
            event_type.encode(),
            _dumps(item.id),
            item.index,
        )
        if ci is not None:
            head += b',"%s":%d' % (index_key, ci)
        item.head = head = head + b',"delta":'
        item.head_ci = ci if ci is not None else 0
        return head

    def _frame(self, head: bytes, delta: str) -> None:
        """Wire mode: a delta event without logprobs as its finished frame; one sequence number."""
        seq = self._seq
        self._seq = seq + 1
        self._out.append(b"%s%s%s%d%s" % (head, _dumps(delta), _SEQ_TAIL, seq, self._end))

    def _emit(self, event: Event) -> None:
        event["sequence_number"] = self._seq
        self._seq += 1
        self._out.append(event)

    def _note(self, kind: str) -> None:
        self.diagnostics[kind] = self.diagnostics.get(kind, 0) + 1


def _logprobs(choice: dict[str, Any]) -> dict[str, Any] | None:
    lp = choice.get("logprobs")
    return lp if lp.__class__ is dict else None


class LegDriver:
    """Base of the machines that drive a leg of a ``ChatToResponsesStream`` their own way (a
    compaction's summary, a searching leg): the Response, its end and its diagnostics are the
    machine's."""

    def __init__(self, main: ChatToResponsesStream) -> None:
        self.main = main
        self.diagnostics = main.diagnostics

    @property
    def done(self) -> bool:
        return self.main.done

    @property
    def final_response(self) -> dict[str, Any] | None:
        return self.main.final_response
