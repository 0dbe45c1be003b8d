"""Responses stream events -> Chat Completions chunks (the reverse direction: a chat client, a
Responses backend).

``ResponsesToChatStream`` takes parsed Responses events (the driver decodes SSE, skips a
``data: [DONE]`` some backends send, and appends its own ``data: [DONE]``) and returns
``chat.completion.chunk`` dicts, or an error object ``{"error": {message, type, param, code}}`` as
the last output of a failed stream. In wire mode (``wire=True``, what the proxy uses) the chunks
of content and reasoning text without logprobs come out as their finished SSE frames (``bytes``,
from a template of the stream's fixed fields); ``translators.sse.render_chat`` passes them
through, and the tests check they equal the frames rendered from the dicts.

It never logs: ``diagnostics`` counts what it dropped
(``unknown_event:<type>``, ``hosted_event:<type>``, ``hosted_item:<type>``, ``after_terminal``,
``done_text_mismatch``, ``annotation_dropped:<type>``, ``usage_missing``, ``call_without_added``
(argument fragments of a call no item ever named, dropped), ``malformed_event`` (the event that
ended the stream)) for the driver to log once per stream. No input of any shape makes ``feed``,
``finish`` or ``fail`` raise.

Rules:
- The first lifecycle event (``created``; else ``queued``/``in_progress``/terminal; else the first
  content event) fixes ``id`` (minted ``chatcmpl-``), ``model`` (upstream's, else the ``model``
  argument) and ``created`` (``created_at``, else ``now()``). The only ``role`` goes out in a chunk
  of its own just before the first chunk of the answer, as OpenAI's chat streams have it:
  ``delta:{role:"assistant", content:""}`` when that chunk is text (or the finish chunk of an
  empty answer, or an error), ``content: null`` when it is a tool call, reasoning or a refusal (a
  client such as the AI SDK opens a text part for ``content: ""``).
- ``output_text.delta`` -> ``content`` (+ logprobs -> ``choices[0].logprobs.content``);
  ``refusal.delta`` -> ``refusal``; ``reasoning_text.delta`` (or Open Responses' name of it,
  ``reasoning.delta``) / ``reasoning_summary_text.delta`` -> ``options.reasoning_field``. A new message item's text, and each new reasoning segment (summary
  part, or reasoning item), starts with a blank line when text of that kind was sent before.
  Empty deltas send nothing.
- ``function_call`` items -> ``tool_calls`` with ``index`` 0, 1, 2... in order of appearance (never
  ``output_index``); the first fragment (at ``output_item.added``) has ``id`` (= ``call_id``),
  ``type:"function"``, ``function:{name, arguments:""}``; later ones only ``index`` + ``function.arguments``.
  Only an item opens a call (a chat call needs its name): argument/input fragments (``.delta``,
  ``.done``) that arrive before their item are held, and sent with the first fragment when the
  item comes (``output_item.added``/``.done``, or the terminal ``output``); if it never comes they
  are dropped and counted (``call_without_added``).
- ``custom_tool_call`` items -> the same function-typed call (chat chunks have no custom member;
  SDK accumulators require ``function``) whose ``arguments`` is the input as a JSON string literal:
  ``"`` first, each ``custom_tool_call_input.delta`` JSON-escaped, ``"`` at the input's ``.done``,
  the item's ``output_item.done`` or the terminal event.
- Events are matched to items by ``output_index`` (item ids rotate on some backends). ``*.done``,
  ``content_part.done``, ``reasoning_summary_part.done`` and ``output_item.done`` send only what no
  delta sent (the tail, when the final text extends what was sent; a disagreeing final text is
  counted, not sent). A stream with no item events at all replays the terminal ``output``.
- ``url_citation`` annotations (events, or the final message item) are sent once, nested
  (``{type:"url_citation", url_citation:{...}}``, offsets into the joined content), in one
  ``delta.annotations`` chunk before the finish chunk (SDK accumulators cannot merge a second
  un-indexed list). Other annotation types are dropped.
- Hosted-tool events and items (web/file search, code interpreter, image generation, MCP, shell,
  apply_patch, ...) send nothing; unknown event types are counted, never fatal.
- ``response.completed`` -> ``delta:{}`` + ``finish_reason`` ``tool_calls`` if a call was sent, else
  ``stop``; ``response.incomplete`` -> ``content_filter``, or ``length`` for any other reason. Then,
  if ``include_usage``, a ``choices: []`` chunk with the mapped usage (skipped and counted when the
  upstream sent none); earlier chunks then carry ``usage: null``.
- ``response.failed`` / ``error`` -> the error object (upstream message, code, type) and the end;
  ``finish()`` before a terminal event and ``fail(code, message)`` end the same way. Later events
  are ignored (counted). ``sequence_number`` is never read.
- Wrong types are the upstream's protocol error, never skipped: a non-object event, a ``type``
  that is not a string, or any field the machine reads with the wrong JSON type (a ``delta`` that
  is not a string, a non-integer ``output_index``/``content_index``, an ``item`` that is not an
  object, a call item without a name, malformed logprobs/usage/annotations/``output``...) ends the
  stream with ``fail("upstream_protocol_error", "malformed upstream event: <what>")``. Absent or
  ``null`` optional fields (a ``.done`` without its text, a terminal event without ``response``)
  mean "not given". The terminal Response is checked before anything of it is sent; ``usage`` is
  read (and checked) only when ``include_usage``. Unknown event types stay counted, never fatal.

The machine is built in layers, one module each: ``ChunkWriter`` (translators/reverse/chunks.py:
identity, chunks, frames, the role chunk), ``TextStream`` (text_parts.py: content, refusal,
reasoning, annotations), ``CallStream`` (tool_calls.py), and ``ResponsesToChatStream`` here: the
event loop (``feed``), items, the terminal event and the handler table. What it keeps of the
stream is in stream_state.py; ``StoppingChatStream`` (stop sequences) is in stopping.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson

from crossfeed.translators.errors import UpstreamProtocolError, json_kind
from crossfeed.translators.ids import CHAT_COMPLETION, IdFactory
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.responses.fields import bad_field, error_body, up_dict, up_items, up_list, up_str
from crossfeed.translators.reverse.body import chat_annotations, chat_usage, incomplete_finish_reason, output_tokens_of
from crossfeed.translators.reverse.delta_frames import (
    ARGS_DELTAS,
    FRAME_ERRORS,
    OTHER_DELTA_PREFIXES,
    REASONING_DELTAS,
    TEXT_DELTA_PREFIX,
    decode_text_delta,
)
from crossfeed.translators.reverse.delta_reads import DeltaReads
from crossfeed.translators.reverse.event_frames import (
    CONFIRMED,
    EVENT_PREFIXES,
    ITEM_ADDED,
    QUIET,
    QUIET_PREFIXES,
    START_PREFIXES,
    TERMINAL,
    decode_quiet,
    start_event,
)
from crossfeed.translators.reverse.stream_state import (
    CALL_TYPES,
    OUTPUT_TEXT,
    REASONING_TEXT,
    SUMMARY_TEXT,
    added_item_key,
    event_item,
    part_text,
)
from crossfeed.translators.reverse.text_runs import TextRun
from crossfeed.translators.sse import SSE_FRAMING, Framing, Out, framing_of

_dumps = orjson.dumps
WAITING, STREAMING, DONE = "waiting", "streaming", "done"  # the phases of a stream
_LIFECYCLE = frozenset(
    {"response.created", "response.queued", "response.in_progress", "response.completed", "response.incomplete"}
)
_NO_START = frozenset({"error", "response.failed", "keepalive"})
# A chunk's ``created`` is a 64-bit integer (orjson writes no other): a creation time beyond it is
# replaced by the proxy's clock.
_CREATED_MIN, _CREATED_END = -(2**63), 2**63
_PREFIX_LEN = len(TEXT_DELTA_PREFIX)
_QUIET_ITEMS = ("message", "reasoning")  # the item types whose output_item.added sends nothing
_HOSTED_PREFIXES = (
    "response.web_search_call.",
    "response.file_search_call.",
    "response.code_interpreter_call",
    "response.image_generation_call.",
    "response.mcp_",
    "response.shell_call",
    "response.local_shell_call",
    "response.apply_patch_call",
    "response.computer_call",
    "response.compaction.",
    "response.tool_search",
)
# Last-resort net: a shape no explicit check caught still ends the stream as the upstream's fault.
_MALFORMED = (AttributeError, TypeError, ValueError, KeyError, IndexError, OverflowError)


class ResponsesToChatStream(DeltaReads):
    """One Responses stream -> one chat completion stream. See the module docstring for rules."""

    # The SSE head of the most frequent frame, up to its JSON (Pump: a read of one such frame
    # goes straight to feed_frame).
    hot_head = b"event: response.output_text.delta\ndata: {"
    # ... and of the other per-token frames (Pump: a read of one of them goes there too)
    warm_heads = tuple(b"event: " + t.encode() + b"\ndata: {" for t in (*ARGS_DELTAS, *REASONING_DELTAS))

    __slots__ = ("_phase", "done", "finish_reason", "error", "usage", "_limit")

    def __init__(
        self,
        *,
        include_usage: bool,
        options: BackendProfile,
        ids: IdFactory,
        now: Callable[[], int],
        model: str | None = None,
        wire: bool | Framing = False,
        max_output_tokens: int | None = None,
    ) -> None:
        """``model``: reported only if no lifecycle event names one (default ``"unknown"``).
        ``max_output_tokens``: the limit the request set; a ``completed`` Response that spent it
        all was cut (llama-server says ``completed`` of an answer cut by the limit): ``length``.
        ``wire``: the chunks of content and reasoning text without logprobs come out as finished
        SSE frames (``bytes``, from a per-stream template) instead of dicts; all other chunks stay
        dicts. ``translators.sse.render_chat`` writes both, and the bytes are exactly what it would
        make of the dict."""
        # ChunkWriter's state (chunks.py)
        self._usage_on = include_usage
        self._rfield = options.reasoning_field
        self._ids = ids
        self._now = now
        self._fallback_model = model or "unknown"
        self._id = ""
        self._model = ""
        self._created = 0
        self.diagnostics = {}
        framing = framing_of(wire)
        self._wire = framing is not None
        self._framing = framing or SSE_FRAMING
        self._heads = {}
        self._after = b""
        self._ident = b""
        self._role = False
        # TextStream's (text_parts.py)
        self._parts = {}
        self._anns = {}
        self._last_msg = None
        self._last_seg = None
        self._content_len = 0
        self._streamed = False
        self._rrun = None
        # CallStream's (tool_calls.py)
        self._calls = {}
        self._held = {}
        # the stream's
        self._phase = WAITING
        self.done = False  # mirrors phase == done: read per upstream event by the pump
        self.finish_reason: str | None = None  # set by a successful terminal event
        self.error: dict[str, Any] | None = None  # the error object sent, on failure
        # The terminal Response's ``usage`` object as the upstream sent it (completed, incomplete
        # or failed), for the driver's accounting; unchecked unless ``include_usage``.
        self.usage: dict[str, Any] | None = None
        self._limit = max_output_tokens
        self._init_runs()  # TextRuns' (text_runs.py): the text template, feed_frame's last text part

    # -- public interface ------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """``waiting`` (nothing sent yet), ``streaming``, or ``done``."""
        return self._phase

    def feed(self, event: dict[str, Any]) -> list[Out]:
        phase = self._phase
        if phase is DONE:
            self._count("after_terminal")
            return []
        try:
            if type(event) is not dict:
                raise UpstreamProtocolError(f"the upstream sent an event that is {json_kind(event)}, not a JSON object")
            t = event.get("type")
            if type(t) is str:
                handler = _HANDLERS.get(t)
            elif t is None:
                handler = None  # no type at all: an unknown event (counted)
            else:
                raise UpstreamProtocolError(f"the upstream sent an event whose type is {json_kind(t)}")
            if phase is STREAMING:
                sent = self._other(t) if handler is None else handler(self, event)
                return self._with_role(sent) if self._role and sent else sent
        except UpstreamProtocolError as exc:
            return self._with_role(self._malformed(exc.message))
        except _MALFORMED as exc:
            return self._with_role(self._malformed(f"malformed upstream event ({type(exc).__name__})"))
        out: list[Out] = []
        try:
            self._first(event, t)
            out = self._other(t) if handler is None else handler(self, event)
            return self._with_role(out) if out else out
        except UpstreamProtocolError as exc:
            return self._with_role(out + self._malformed(exc.message))
        except _MALFORMED as exc:
            return self._with_role(out + self._malformed(f"malformed upstream event ({type(exc).__name__})"))

    def feed_frame(self, data: bytes) -> list[Out] | None:
        """``feed`` for a frame still in its JSON bytes: a text delta (delta_frames.py), a frame
        around the deltas or the first one (event_frames.py); None for any other frame, or one of
        a shape the general path should judge (the pump then parses it and calls ``feed``)."""
        if self._phase is not STREAMING:
            if self._phase is WAITING and data.startswith(START_PREFIXES):  # the Response's identity
                first = start_event(data)
                return None if first is None else self.feed(first)
            return None
        if data[:_PREFIX_LEN] != TEXT_DELTA_PREFIX:  # (a slice compares faster than startswith)
            rrun = self._rrun
            if rrun is not None and data[: rrun[6]] == rrun[5]:  # the kept reasoning part's type
                try:  # (reasoning_frame's reading, inlined: the call cost 330 instructions a delta)
                    part = rrun[0](data)
                except FRAME_ERRORS:
                    return self._other_frame(data)
                d = part.delta
                if not d:
                    return []
                if rrun[1] == part.output_index and rrun[2] == part.index:
                    rrun[3].pieces.append(d)
                    return [rrun[4] + _dumps(d) + self._after]
                return self._other_frame(data)
            if data.startswith(OTHER_DELTA_PREFIXES):  # a call's or reasoning's (delta_reads.py)
                return self._other_frame(data)
            if data.startswith(QUIET_PREFIXES):
                return self._quiet_frame(data)
            return self._event_frame(data) if data.startswith(EVENT_PREFIXES) else None
        try:
            ev = decode_text_delta(data)
        except FRAME_ERRORS:
            return None
        d = ev.delta  # a str, and the indexes ints: the decoder checked them
        if ev.logprobs:  # logprobs to map
            return None
        if not d:
            return []
        oi, ci = ev.output_index, ev.content_index
        if oi == self._last_msg:  # the text of the part the last delta continued: its frame as _content makes it
            run = self._run
            if run is None or run[0] != oi or run[1] != ci:
                run = self._new_run(oi, ci)
            if run is not None:
                if self._learning:  # (text_runs.py)
                    self._learn(data, d, oi, ci)
                run[2].pieces.append(d)
                self._content_len += len(d)
                return [run[3] + _dumps(d) + self._after]  # (two joins cost less than a format)
        self._streamed = True
        out = [self._content(oi, ci, d)]
        return self._with_role(out) if self._role else out

    def _new_run(self, oi: int, ci: int) -> TextRun | None:
        """The text part ``(oi, ci)`` and the content frame around a text, once both exist (a
        content frame went out: the role chunk too), kept for the deltas that follow (neither
        changes once made)."""
        part = self._parts.get((OUTPUT_TEXT, oi, ci))
        head = self._heads.get("content")
        if part is None or head is None:
            return None
        opened, closed = head + b'"', b'"' + self._after
        self._run = (oi, ci, part, head, opened, closed, closed + opened)
        return self._run

    def _quiet_frame(self, data: bytes) -> list[Out] | None:
        """``feed_frame`` for the frames that send nothing once the stream started."""
        try:
            ev = decode_quiet(data)
        except FRAME_ERRORS:
            return None
        t = ev.type
        if type(t) is not str:
            return None
        if t in QUIET:
            return []
        if t == ITEM_ADDED:  # a message or a reasoning item opens nothing by itself
            item = ev.item
            if item is None or type(ev.output_index) is not int or item.type not in _QUIET_ITEMS:
                return None
            self._streamed = True
            return []
        return None

    def _event_frame(self, data: bytes) -> list[Out] | None:
        """``feed_frame`` for the closing frames: made into the event their handler reads, handled
        as ``feed`` handles an event once the stream started."""
        event = self.closing_frame_event(data)
        if event is None:
            return None
        if event is CONFIRMED:
            return []
        t = event["type"]
        if t in TERMINAL and (not self._streamed or self._held):  # the Response's output is read
            return None
        try:
            sent = _HANDLERS[t](self, event)
        except UpstreamProtocolError as exc:
            return self._with_role(self._malformed(exc.message))
        except _MALFORMED as exc:
            return self._with_role(self._malformed(f"malformed upstream event ({type(exc).__name__})"))
        return self._with_role(sent) if self._role and sent else sent

    def finish(self, *, clean: bool = True) -> list[Out]:
        """The upstream ended (``clean``: with ``[DONE]``, else EOF). Without a terminal event
        either way is a failure: the error object."""
        if self._phase is DONE:
            return []
        return self.fail("upstream_protocol_error", "upstream stream ended before a terminal event")

    def fail(self, code: str, message: str) -> list[Out]:
        if self._phase is DONE:
            return []
        return self._with_role(self._error({"code": code, "message": message, "type": "server_error"}))

    # -- plumbing --------------------------------------------------------------------------

    def _malformed(self, message: str) -> list[Out]:
        """An event of the wrong shape: the stream ends as the upstream's protocol error."""
        self._count("malformed_event")
        return self.fail("upstream_protocol_error", f"malformed upstream event: {message}")

    def _first(self, event: dict[str, Any], t: Any) -> None:
        """Start the stream (its identity; the role chunk is due) on the first known event that is
        no failure."""
        if t not in _HANDLERS or t in _NO_START:
            return
        resp = (up_dict(event, "response", t) if t in _LIFECYCLE else None) or {}
        model = up_str(resp, "model", "response")
        created = resp.get("created_at")
        if created is not None and (type(created) not in (int, float) or not math.isfinite(created)):
            raise bad_field("response", "created_at", created, "a number")
        if created is not None and not _CREATED_MIN <= created < _CREATED_END:  # no chunk could carry it
            self._count("created_at_out_of_range")
            created = None
        self._phase = STREAMING
        self._id = self._ids.new(CHAT_COMPLETION)
        self._model = model or self._fallback_model
        self._created = self._now() if created is None else int(created)
        self._role = True

    def _error(self, err: Any) -> list[Out]:
        self._phase = DONE
        self.done = True
        self.error = error_body(err)
        return [self.error]

    def _other(self, t: str | None) -> list[Out]:
        if t is None:
            self._count("unknown_event:None")
        else:
            self._count(("hosted_event:" if t.startswith(_HOSTED_PREFIXES) else "unknown_event:") + t)
        return []

    # -- items -----------------------------------------------------------------------------

    def _on_item_added(self, ev: dict[str, Any]) -> list[Out]:
        item = event_item(ev)
        oi = added_item_key(ev, item)
        self._streamed = True
        kind = item["type"]
        custom = CALL_TYPES.get(kind)
        if custom is not None:
            return self._item_call(oi, item, custom, up_str(item, "input" if custom else "arguments", kind), False)
        if kind != "message" and kind != "reasoning":
            self._count(f"hosted_item:{kind}")
        return []

    def _on_item_done(self, ev: dict[str, Any]) -> list[Out]:
        item = event_item(ev)
        oi = ev.get("output_index")
        if type(oi) is not int:  # (the usual index read inline)
            oi = added_item_key(ev, item)
        self._streamed = True
        return self._item_tails(oi, item, False)

    def _item_tails(self, oi: Any, item: dict[str, Any], count_hosted: bool) -> list[Out]:
        """A final item: send whatever of its text/arguments was never streamed."""
        out: list[Out] = []
        kind = item.get("type")
        if type(kind) is not str:
            raise bad_field("item", "type", kind, "a string")
        if kind == "message":
            parts = up_items(up_list(item, "content", kind), "message.content")
            for ci, part in enumerate(parts):
                out += self._message_part(oi, ci, part)
        elif kind == "reasoning":
            for si, s in enumerate(up_items(up_list(item, "summary", kind), "reasoning.summary")):
                out += self._final_text(SUMMARY_TEXT, oi, si, up_str(s, "text", f"reasoning.summary[{si}]"))
            for ci, c in enumerate(up_items(up_list(item, "content", kind), "reasoning.content")):
                out += self._final_text(REASONING_TEXT, oi, ci, up_str(c, "text", f"reasoning.content[{ci}]"))
        elif kind in CALL_TYPES:
            custom = CALL_TYPES[kind]
            out += self._item_call(oi, item, custom, up_str(item, "input" if custom else "arguments", kind), True)
        elif count_hosted:
            self._count(f"hosted_item:{kind}")
        return out

    def _message_part(self, oi: Any, ci: int, part: dict[str, Any]) -> list[Out]:
        """A final message item's part ``ci``: its text's tail, its annotations kept."""
        found = part_text(part, "message.content", ci)
        if found is None:
            return []
        kind, text = found
        out = self._final_text(kind, oi, ci, text)
        if kind == OUTPUT_TEXT:
            anns = part.get("annotations")
            if anns is not None and type(anns) is not list:
                raise bad_field(f"message.content[{ci}]", "annotations", anns, "an array")
            if anns:
                self._anns[(OUTPUT_TEXT, oi, ci)] = dict(
                    enumerate(up_items(anns, f"message.content[{ci}].annotations"))
                )
        return out

    # -- terminal --------------------------------------------------------------------------

    def _on_terminal(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        resp = up_dict(ev, "response", t) or {}
        self._keep_usage(resp)
        # Everything read from the terminal Response is checked before anything is sent.
        if t == "response.incomplete":
            finish = incomplete_finish_reason(resp.get("incomplete_details"))
        elif self._limit is not None and output_tokens_of(resp) >= self._limit:
            finish = "length"
            self._count("limit_reached_as_completed")
        else:
            finish = None
        usage = None
        if self._usage_on:
            raw_usage = up_dict(resp, "usage", "response")
            usage = None if raw_usage is None else chat_usage(raw_usage, "response.usage")
        output = up_list(resp, "output", "response") if (not self._streamed or self._held) else []
        out: list[Out] = []
        if not self._streamed:  # done-only at the response level: replay the final output
            for i, item in enumerate(up_items(output, "response.output")):
                out += self._item_tails(i, item, True)
        for oi in list(self._held) if self._held else ():  # fragments whose item never came: the output may name it
            named = output[oi] if type(oi) is int and 0 <= oi < len(output) else None
            if type(named) is dict and named.get("type") in CALL_TYPES:
                out += self._item_tails(oi, named, False)
            else:
                self._held.pop(oi)
                self._count("call_without_added")
        if self._calls:
            out += self._close_custom_calls()
        if self._anns:
            anns = chat_annotations(
                (
                    (self._parts[k].base if k in self._parts else self._content_len, by_index)
                    for k, by_index in self._anns.items()
                ),
                self._count,
            )
            if anns:
                out.append(self._chunk({"annotations": anns}))
        if finish is None:
            finish = "tool_calls" if self._calls else "stop"
        out.append(self._fixed(b"{}", _dumps(finish)) if self._wire else self._chunk({}, finish))
        if self._usage_on:
            if usage is not None:
                out.append(self._usage_chunk(usage))
            else:
                self._count("usage_missing")
        self.finish_reason = finish
        self._phase = DONE
        self.done = True
        return out

    def _on_failed(self, ev: dict[str, Any]) -> list[Out]:
        resp = ev.get("response")
        if isinstance(resp, dict):
            self._keep_usage(resp)
        return self._error(resp.get("error") if isinstance(resp, dict) else None)

    def _keep_usage(self, resp: dict[str, Any]) -> None:
        usage = resp.get("usage")
        self.usage = usage if isinstance(usage, dict) else None

    def _on_error(self, ev: dict[str, Any]) -> list[Out]:
        nested = ev.get("error")
        return self._error(nested if isinstance(nested, dict) else ev)

    def _ignore(self, ev: dict[str, Any]) -> list[Out]:
        return []


_S = ResponsesToChatStream
_HANDLERS: dict[Any, Callable[[ResponsesToChatStream, dict[str, Any]], list[Out]]] = {
    "response.output_text.delta": _S._on_text_delta,
    "response.reasoning_summary_text.delta": _S._on_other_delta,
    "response.reasoning_text.delta": _S._on_other_delta,
    "response.reasoning.delta": _S._on_other_delta,  # Open Responses' name of reasoning_text.delta
    "response.function_call_arguments.delta": _S._on_args_delta,
    "response.custom_tool_call_input.delta": _S._on_args_delta,
    "response.refusal.delta": _S._on_other_delta,
    "response.output_text.done": _S._on_text_done,
    "response.refusal.done": _S._on_text_done,
    "response.reasoning_text.done": _S._on_text_done,
    "response.reasoning.done": _S._on_text_done,
    "response.reasoning_summary_text.done": _S._on_text_done,
    "response.reasoning_summary_part.done": _S._on_text_done,
    "response.content_part.done": _S._on_part_done,
    "response.function_call_arguments.done": _S._on_args_done,
    "response.custom_tool_call_input.done": _S._on_args_done,
    "response.output_text.annotation.added": _S._on_annotation,
    "response.output_item.added": _S._on_item_added,
    "response.output_item.done": _S._on_item_done,
    "response.completed": _S._on_terminal,
    "response.incomplete": _S._on_terminal,
    "response.failed": _S._on_failed,
    "error": _S._on_error,
    "response.created": _S._ignore,
    "response.queued": _S._ignore,
    "response.in_progress": _S._ignore,
    "response.content_part.added": _S._ignore,
    "response.reasoning_summary_part.added": _S._ignore,
    "keepalive": _S._ignore,
}
