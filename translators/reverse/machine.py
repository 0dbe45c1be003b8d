"""Responses stream events -> Chat Completions chunks (reverse direction, issue 4).

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
  ``refusal.delta`` -> ``refusal``; ``reasoning_text.delta`` / ``reasoning_summary_text.delta`` ->
  ``options.reasoning_field``. A new message item's text, and each new reasoning segment (summary
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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson

from crossfeed.translators.errors import UpstreamProtocolError, json_kind
from crossfeed.translators.ids import CALL, CHAT_COMPLETION, IdFactory
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.responses.fields import bad_field, error_body, up_dict, up_items, up_list, up_str
from crossfeed.translators.reverse.body import (
    SEPARATOR,
    chat_annotations,
    chat_logprobs,
    chat_usage,
    incomplete_finish_reason,
    output_tokens_of,
)
from crossfeed.translators.reverse.stop_sequences import StopMatcher
from crossfeed.translators.sse import SSE_FRAMING, Framing, Out, framing_of

_dumps = orjson.dumps
_WAITING, _STREAMING, _DONE = "waiting", "streaming", "done"
_LIFECYCLE = frozenset(
    {"response.created", "response.queued", "response.in_progress", "response.completed", "response.incomplete"}
)
_NO_START = frozenset({"error", "response.failed", "keepalive"})
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
_CALL_TYPES = {"function_call": False, "custom_tool_call": True}  # item type -> is custom
# Final-text part types -> (part kind, field): t = output_text, r = refusal, x = reasoning_text.
_DELTA_KINDS = {
    "response.refusal.delta": "r",
    "response.reasoning_summary_text.delta": "s",
    "response.reasoning_text.delta": "x",
}
_PART_KINDS: dict[str | None, tuple[str, str]] = {
    "output_text": ("t", "text"),
    "refusal": ("r", "refusal"),
    "reasoning_text": ("x", "text"),
}
_DONE_FIELDS = {
    "response.output_text.done": ("t", "content_index", "text"),
    "response.refusal.done": ("r", "content_index", "refusal"),
    "response.reasoning_text.done": ("x", "content_index", "text"),
    "response.reasoning_summary_text.done": ("s", "summary_index", "text"),
}


def _escape(text: str) -> str:
    """JSON-escape a piece of a string literal (escaping is per character, so pieces concatenate)."""
    return orjson.dumps(text)[1:-1].decode()


def _oi(ev: dict[str, Any]) -> Any:
    """The item an event belongs to: ``output_index`` (an integer), else ``item_id`` (a string)."""
    oi = ev.get("output_index")
    if type(oi) is int:
        return oi
    if oi is not None:
        raise bad_field(ev["type"], "output_index", oi, "an integer")
    item_id = ev.get("item_id")
    if item_id is None or type(item_id) is str:
        return item_id
    raise bad_field(ev["type"], "item_id", item_id, "a string")


def _item_oi(ev: dict[str, Any], item: dict[str, Any]) -> Any:
    """``_oi`` of an item event; with neither index nor ``item_id`` (llama-server), the item's own
    id, which its deltas name as ``item_id``."""
    oi = _oi(ev)
    if oi is None and type(item.get("id")) is str:
        return item["id"]
    return oi


def _index(ev: dict[str, Any], key: str) -> int:
    """``content_index`` / ``summary_index`` / ``annotation_index``: 0 when absent."""
    value = ev.get(key)
    if type(value) is int:
        return value
    if value is None:
        return 0
    raise bad_field(ev["type"], key, value, "an integer")


def _delta(ev: dict[str, Any]) -> str:
    d = ev.get("delta")
    if type(d) is str:
        return d
    raise bad_field(ev["type"], "delta", d, "a string")


class _Part:
    __slots__ = ("pieces", "base")

    def __init__(self, base: int) -> None:
        self.pieces: list[str] = []  # upstream text sent so far (separators excluded)
        self.base = base  # offset of this part in the joined content (annotations)


class _Call:
    __slots__ = ("index", "custom", "pieces", "closed")

    def __init__(self, index: int, custom: bool) -> None:
        self.index = index
        self.custom = custom
        self.pieces: list[str] = []  # raw arguments / input sent so far
        self.closed = False  # custom: closing quote sent


class _Held:
    """Argument fragments of a call whose ``output_item.added`` (with its name) has not come yet."""

    __slots__ = ("pieces", "final")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.final: str | None = None  # from function_call_arguments.done / custom_tool_call_input.done


class ResponsesToChatStream:
    """One Responses stream -> one chat completion stream. See the module docstring for rules."""

    __slots__ = (
        "_usage_on",
        "_rfield",
        "_ids",
        "_now",
        "_fallback_model",
        "_phase",
        "_id",
        "_model",
        "_created",
        "_parts",
        "_calls",
        "_held",
        "_anns",
        "_last_msg",
        "_last_seg",
        "_content_len",
        "_streamed",
        "done",
        "finish_reason",
        "error",
        "diagnostics",
        "_wire",
        "_framing",
        "_heads",
        "_after",
        "usage",
        "_limit",
        "_role",
    )

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
        self._usage_on = include_usage
        self._rfield = options.reasoning_field
        self._ids = ids
        self._now = now
        self._fallback_model = model or "unknown"
        self._phase = _WAITING
        self.done = False  # mirrors phase == done: read per upstream event by the pump
        self._id = ""
        self._model = ""
        self._created = 0
        self._parts: dict[tuple[Any, ...], _Part] = {}  # (kind, output index, part index)
        self._calls: dict[Any, _Call] = {}  # output index -> call, in order of appearance
        self._held: dict[Any, _Held] = {}  # output index -> fragments waiting for their item
        self._anns: dict[tuple[Any, ...], dict[int, Any]] = {}  # text part -> annotation_index -> raw
        self._last_msg: Any = None  # output index of the message item that sent content last
        self._last_seg: Any = None  # reasoning segment that sent reasoning last
        self._content_len = 0
        self._streamed = False  # any item-scoped event seen
        self.finish_reason: str | None = None  # set by a successful terminal event
        self.error: dict[str, Any] | None = None  # the error object sent, on failure
        self.diagnostics: dict[str, int] = {}
        # The terminal Response's ``usage`` object as the upstream sent it (completed, incomplete
        # or failed), for the driver's accounting; unchecked unless ``include_usage``.
        self.usage: dict[str, Any] | None = None
        framing = framing_of(wire)
        self._wire = framing is not None
        self._framing = framing or SSE_FRAMING
        self._heads: dict[str, bytes] = {}  # wire mode: delta key -> the frame up to the text
        self._after = b""  # wire mode: the frame after the text
        self._limit = max_output_tokens
        self._role = False  # the role chunk is due (before the first chunk of the answer)

    # -- public interface ------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """``waiting`` (nothing sent yet), ``streaming``, or ``done``."""
        return self._phase

    def feed(self, event: dict[str, Any]) -> list[Out]:
        phase = self._phase
        if phase is _DONE:
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
            if phase is _STREAMING:
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

    def finish(self, *, clean: bool = True) -> list[Out]:
        """The upstream ended (``clean``: with ``[DONE]``, else EOF). Without a terminal event
        either way is a failure: the error object."""
        if self._phase is _DONE:
            return []
        return self.fail("upstream_protocol_error", "upstream stream ended before a terminal event")

    def fail(self, code: str, message: str) -> list[Out]:
        if self._phase is _DONE:
            return []
        return self._with_role(self._error({"code": code, "message": message, "type": "server_error"}))

    # -- plumbing --------------------------------------------------------------------------

    def _count(self, key: str) -> None:
        self.diagnostics[key] = self.diagnostics.get(key, 0) + 1

    def _malformed(self, message: str) -> list[Out]:
        """An event of the wrong shape: the stream ends as the upstream's protocol error."""
        self._count("malformed_event")
        return self.fail("upstream_protocol_error", f"malformed upstream event: {message}")

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        if self._usage_on:
            chunk["usage"] = None
        return chunk

    def _frame(self, key: str, text: str) -> bytes:
        """Wire mode: ``_chunk({key: text})`` as its finished frame. The identity is fixed by
        then (``_first``), so the template is made once per key and stream."""
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = (
                b'%s{"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,'
                b'"choices":[{"index":0,"delta":{%s:'
                % (self._framing.data, _dumps(self._id), self._created, _dumps(self._model), _dumps(key))
            )
            self._after = b'},"logprobs":null,"finish_reason":null}]%s}%s' % (
                b',"usage":null' if self._usage_on else b"",
                self._framing.end,
            )
        return b"%s%s%s" % (head, _dumps(text), self._after)

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
        self._phase = _STREAMING
        self._id = self._ids.new(CHAT_COMPLETION)
        self._model = model or self._fallback_model
        self._created = self._now() if created is None else int(created)
        self._role = True

    def _with_role(self, out: list[Out]) -> list[Out]:
        """``out`` with the role chunk in front when it is due: ``content: ""`` before text (or
        an empty answer's finish chunk, or an error), ``null`` before a call, reasoning or a
        refusal, as OpenAI's chat streams start (the AI SDK opens a text part for ``""``)."""
        if not self._role or not out:
            return out
        self._role = False
        first = out[0]
        if type(first) is bytes:  # wire mode: a content or a reasoning frame
            head = self._heads.get(self._rfield)
            text = head is None or not first.startswith(head)
        else:
            choices = cast(dict[str, Any], first).get("choices")
            delta = choices[0]["delta"] if choices else {}
            text = "tool_calls" not in delta and "refusal" not in delta and self._rfield not in delta
        return [self._chunk({"role": "assistant", "content": "" if text else None}), *out]

    def _error(self, err: Any) -> list[Out]:
        self._phase = _DONE
        self.done = True
        self.error = error_body(err)
        return [self.error]

    def _other(self, t: str | None) -> list[Out]:
        if t is None:
            self._count("unknown_event:None")
        else:
            self._count(("hosted_event:" if t.startswith(_HOSTED_PREFIXES) else "unknown_event:") + t)
        return []

    # -- text ------------------------------------------------------------------------------

    def _content(self, oi: Any, ci: Any, text: str, lps: Any = None) -> Out:
        key = ("t", oi, ci)
        part = self._parts.get(key)
        raw = text
        if oi != self._last_msg:
            if self._last_msg is not None:
                text = SEPARATOR + text
            self._last_msg = oi
        if part is None:
            part = self._parts[key] = _Part(self._content_len + len(text) - len(raw))
        part.pieces.append(raw)
        self._content_len += len(text)
        if lps:
            return self._chunk({"content": text}, None, {"content": lps, "refusal": None})
        if self._wire:
            return self._frame("content", text)
        return self._chunk({"content": text})

    def _refusal(self, oi: Any, ci: Any, text: str) -> dict[str, Any]:
        key = ("r", oi, ci)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Part(0)
        part.pieces.append(text)
        return self._chunk({"refusal": text})

    def _reasoning(self, key: tuple[Any, ...], text: str) -> Out:
        """Reasoning text for part ``key``: a summary part is its own segment, the reasoning_text
        parts of one item form one segment."""
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Part(0)
        part.pieces.append(text)
        segment = key if key[0] == "s" else key[1]
        if segment != self._last_seg:
            if self._last_seg is not None:
                text = SEPARATOR + text
            self._last_seg = segment
        if self._wire:
            return self._frame(self._rfield, text)
        return self._chunk({self._rfield: text})

    def _tail(self, holder: _Part | _Call | None, final: str | None) -> str:
        """The part of ``final`` not yet sent by ``holder`` ("" when nothing is missing)."""
        if not final:
            return ""
        if holder is None:
            return final
        pieces = holder.pieces
        seen = pieces[0] if len(pieces) == 1 else "".join(pieces)
        holder.pieces = [seen]
        if final.startswith(seen):
            return final[len(seen) :]
        self._count("done_text_mismatch")
        return ""

    def _final_text(self, kind: str, oi: Any, idx: int, final: str | None) -> list[Out]:
        """A part's final text (t/r/s/x): send the tail never seen as deltas."""
        key = (kind, oi, idx)
        tail = self._tail(self._parts.get(key), final)
        if not tail:
            return []
        if kind == "t":
            return [self._content(oi, idx, tail)]
        if kind == "r":
            return [self._refusal(oi, idx, tail)]
        return [self._reasoning(key, tail)]

    def _on_text_delta(self, ev: dict[str, Any]) -> list[Out]:
        d = ev.get("delta")
        if type(d) is not str:
            raise bad_field(ev["type"], "delta", d, "a string")
        oi = ev.get("output_index")
        if type(oi) is not int:
            oi = _oi(ev)
        ci = ev.get("content_index")
        if type(ci) is not int:
            ci = _index(ev, "content_index")
        lps = ev.get("logprobs")
        if lps or (lps is not None and type(lps) is not list):  # usually [] or absent
            if type(lps) is not list:
                raise bad_field(ev["type"], "logprobs", lps, "an array")
            lps = chat_logprobs(lps, f"{ev['type']}: logprobs")
        if not d:
            return []
        self._streamed = True
        return [self._content(oi, ci, d, lps)]

    def _on_other_delta(self, ev: dict[str, Any]) -> list[Out]:
        """refusal / reasoning_text / reasoning_summary_text deltas."""
        d = _delta(ev)
        kind = _DELTA_KINDS[ev["type"]]
        oi = _oi(ev)
        idx = _index(ev, "summary_index" if kind == "s" else "content_index")
        if not d:
            return []
        self._streamed = True
        if kind == "r":
            return [self._refusal(oi, idx, d)]
        return [self._reasoning((kind, oi, idx), d)]

    def _on_text_done(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        oi = _oi(ev)
        if t == "response.reasoning_summary_part.done":  # the final text is in part.text
            part = up_dict(ev, "part", t)
            final = up_str(part, "text", f"{t}: part") if part is not None else None
            idx = _index(ev, "summary_index")
            kind = "s"
        else:
            kind, index_key, field = _DONE_FIELDS[t]
            final = up_str(ev, field, t)
            idx = _index(ev, index_key)
        self._streamed = True
        return self._final_text(kind, oi, idx, final)

    def _on_part_done(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        oi = _oi(ev)
        idx = _index(ev, "content_index")
        self._streamed = True
        part = up_dict(ev, "part", t)
        if part is None:
            return []
        kind = _PART_KINDS.get(up_str(part, "type", f"{t}: part"))
        if kind is None:
            return []
        return self._final_text(kind[0], oi, idx, up_str(part, kind[1], f"{t}: part"))

    def _on_annotation(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        key = ("t", _oi(ev), _index(ev, "content_index"))
        ann = ev.get("annotation")
        if type(ann) is not dict:
            raise bad_field(t, "annotation", ann, "an object")
        idx = ev.get("annotation_index")
        if idx is not None and type(idx) is not int:
            raise bad_field(t, "annotation_index", idx, "an integer")
        self._streamed = True
        anns = self._anns.setdefault(key, {})
        anns[len(anns) if idx is None else idx] = ann
        return []

    # -- tool calls ------------------------------------------------------------------------

    def _open_call(self, oi: Any, item: dict[str, Any], custom: bool, initial: str) -> dict[str, Any]:
        """The first fragment of a call: index, id, type and name. Only an item can open a call:
        a chat tool call without a name is unusable, so there is none."""
        kind: str = item["type"]  # a call type: every caller checked it
        name = up_str(item, "name", kind)
        if not name:
            raise UpstreamProtocolError(f"{kind} item without a name")
        call_id = up_str(item, "call_id", kind) or self._ids.new(CALL)
        call = self._calls[oi] = _Call(len(self._calls), custom)
        call.pieces.append(initial)
        fragment = {
            "index": call.index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": '"' + _escape(initial) if custom else initial},
        }
        return self._chunk({"tool_calls": [fragment]})

    def _args(self, call: _Call, text: str, close: bool = False) -> dict[str, Any]:
        call.pieces.append(text)
        if call.custom:
            text = _escape(text)
            if close:
                text += '"'
                call.closed = True
        return self._chunk({"tool_calls": [{"index": call.index, "function": {"arguments": text}}]})

    def _on_args_delta(self, ev: dict[str, Any]) -> list[Out]:
        d = _delta(ev)
        oi = _oi(ev)
        if not d:
            return []
        self._streamed = True
        call = self._calls.get(oi)
        if call is None:  # before its output_item.added: held until the item names the call
            held = self._held.get(oi)
            if held is None:
                held = self._held[oi] = _Held()
            held.pieces.append(d)
            return []
        return [self._args(call, d)]

    def _on_args_done(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        final = up_str(ev, "input" if t == "response.custom_tool_call_input.done" else "arguments", t)
        oi = _oi(ev)
        self._streamed = True
        call = self._calls.get(oi)
        if call is None:
            held = self._held.get(oi)
            if held is None:
                held = self._held[oi] = _Held()
            if final is not None:
                held.final = final
            return []
        return self._finish_call(oi, call, final)

    def _item_call(self, oi: Any, item: dict[str, Any], custom: bool, final: str | None, done: bool) -> list[Out]:
        """A call item (``output_item.added``, or ``.done`` / the terminal output when ``done``):
        open the call if needed (with the fragments held for it), then send what is missing."""
        call = self._calls.get(oi)
        if call is not None:
            return self._finish_call(oi, call, final) if done else []
        held = self._held.pop(oi, None)
        if held is not None:
            streamed = "".join(held.pieces)
            # With done and a final text, it includes what was held.
            initial = final if done and final else (final or "") + streamed
            final = held.final if held.final is not None else (final if done else None)
        else:
            initial = final or ""
            final = final if done else None
        out: list[Out] = [self._open_call(oi, item, custom, initial)]
        if final is not None or done:
            out += self._finish_call(oi, self._calls[oi], final)
        return out

    def _finish_call(self, oi: Any, call: _Call, final: str | None) -> list[Out]:
        """A call's final arguments/input: send the unseen tail, close a custom call's string."""
        out: list[Out] = []
        tail = self._tail(call, final)
        if call.custom:
            if not call.closed:
                out.append(self._args(call, tail, close=True))
            elif tail:
                self._count("done_text_mismatch")
        elif tail:
            out.append(self._args(call, tail))
        return out

    # -- items -----------------------------------------------------------------------------

    def _item(self, ev: dict[str, Any]) -> dict[str, Any]:
        item = ev.get("item")
        if type(item) is not dict:
            raise bad_field(ev["type"], "item", item, "an object")
        kind = item.get("type")
        if type(kind) is not str:
            raise bad_field(ev["type"], "item.type", kind, "a string")
        return item

    def _on_item_added(self, ev: dict[str, Any]) -> list[Out]:
        item = self._item(ev)
        oi = _item_oi(ev, item)
        self._streamed = True
        kind = item["type"]
        custom = _CALL_TYPES.get(kind)
        if custom is not None:
            return self._item_call(oi, item, custom, up_str(item, "input" if custom else "arguments", kind), False)
        if kind != "message" and kind != "reasoning":
            self._count(f"hosted_item:{kind}")
        return []

    def _on_item_done(self, ev: dict[str, Any]) -> list[Out]:
        item = self._item(ev)
        oi = _item_oi(ev, item)
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
                where = f"message.content[{ci}]"
                pk = _PART_KINDS.get(up_str(part, "type", where))
                if pk is not None:
                    out += self._final_text(pk[0], oi, ci, up_str(part, pk[1], where))
                    if pk[0] == "t":
                        anns = up_items(up_list(part, "annotations", where), f"{where}.annotations")
                        if anns:
                            self._anns[("t", oi, ci)] = dict(enumerate(anns))
        elif kind == "reasoning":
            for si, s in enumerate(up_items(up_list(item, "summary", kind), "reasoning.summary")):
                out += self._final_text("s", oi, si, up_str(s, "text", f"reasoning.summary[{si}]"))
            for ci, c in enumerate(up_items(up_list(item, "content", kind), "reasoning.content")):
                out += self._final_text("x", oi, ci, up_str(c, "text", f"reasoning.content[{ci}]"))
        elif kind in _CALL_TYPES:
            custom = _CALL_TYPES[kind]
            out += self._item_call(oi, item, custom, up_str(item, "input" if custom else "arguments", kind), True)
        elif count_hosted:
            self._count(f"hosted_item:{kind}")
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
        for oi in list(self._held):  # fragments whose item never came: the final output may name it
            named = output[oi] if type(oi) is int and 0 <= oi < len(output) else None
            if type(named) is dict and named.get("type") in _CALL_TYPES:
                out += self._item_tails(oi, named, False)
            else:
                self._held.pop(oi)
                self._count("call_without_added")
        for call in self._calls.values():
            if call.custom and not call.closed:
                out.append(self._args(call, "", close=True))
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
        out.append(self._chunk({}, finish))
        if self._usage_on:
            if usage is not None:
                out.append(
                    {
                        "id": self._id,
                        "object": "chat.completion.chunk",
                        "created": self._created,
                        "model": self._model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            else:
                self._count("usage_missing")
        self.finish_reason = finish
        self._phase = _DONE
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
    "response.function_call_arguments.delta": _S._on_args_delta,
    "response.custom_tool_call_input.delta": _S._on_args_delta,
    "response.refusal.delta": _S._on_other_delta,
    "response.output_text.done": _S._on_text_done,
    "response.refusal.done": _S._on_text_done,
    "response.reasoning_text.done": _S._on_text_done,
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


class StoppingChatStream(ResponsesToChatStream):
    """``ResponsesToChatStream`` for a chat request with ``stop``, which the Responses API lacks:
    crossfeed cuts the content at the first stop sequence itself (translators/reverse/stop_sequences.py).
    A plain ``ResponsesToChatStream`` serves every request without ``stop``: this class costs
    those nothing.

    Rules (on top of the stream's):
    - Only ``delta.content`` is matched: reasoning, refusals and tool-call arguments are never cut.
      Content that may be the start of a stop sequence is held back, and sent as soon as the
      next text shows it is not one (or before the annotations / finish chunk, or an error).
    - At the cut: the content up to the stop sequence (the sequence itself is not sent), an open
      custom call's closing quote, the finish chunk with ``finish_reason: "stop"``, then with
      ``include_usage`` the usage chunk; then ``done``: the driver stops reading and closes the
      upstream request, so the backend stops generating. The upstream has reported no usage by
      then, so the usage is estimated as crossfeed estimates tokens elsewhere (4 bytes a token):
      ``prompt_tokens`` is the caller's ``prompt_tokens``, ``completion_tokens`` counts the
      content, reasoning, refusal and arguments sent (``reasoning_tokens`` the reasoning); the
      diagnostics count ``stop_sequence`` and ``usage_estimated``. ``usage`` (the driver's
      accounting) is that estimate as ``{input_tokens, output_tokens}``.
    - Logprob entries go out with the text their token starts in; those of text past the cut
      are dropped with it.
    - Chunks are dicts (no wire mode): content must be matched before it is rendered.
    """

    __slots__ = ("_matcher", "_fed", "_sent", "_sent_bytes", "_lps", "_prompt_tokens")

    def __init__(
        self,
        *,
        stop: Sequence[str],
        prompt_tokens: int = 0,
        include_usage: bool,
        options: BackendProfile,
        ids: IdFactory,
        now: Callable[[], int],
        model: str | None = None,
        wire: bool | Framing = False,
        max_output_tokens: int | None = None,
    ) -> None:
        super().__init__(
            include_usage=include_usage,
            options=options,
            ids=ids,
            now=now,
            model=model,
            wire=False,
            max_output_tokens=max_output_tokens,
        )
        self._matcher = StopMatcher(stop)
        self._fed = 0  # characters of content given to the matcher
        self._sent = 0  # characters of content sent
        self._sent_bytes = 0
        self._lps: list[tuple[int, dict[str, Any]]] = []  # (token start, entry), not sent yet
        self._prompt_tokens = prompt_tokens

    def feed(self, event: dict[str, Any]) -> list[Out]:
        return self._stopping(super().feed(event))

    def finish(self, *, clean: bool = True) -> list[Out]:
        return self._stopping(super().finish(clean=clean))

    def fail(self, code: str, message: str) -> list[Out]:
        return self._stopping(super().fail(code, message))

    def _stopping(self, outputs: list[Out]) -> list[Out]:
        if not outputs:
            return outputs
        # The stream below runs without wire mode (``wire=False`` above): every output is a dict.
        outs = cast(list[dict[str, Any]], outputs)
        res: list[Out] = []
        matcher = self._matcher
        for out in outs:
            choices = out.get("choices")
            if choices:
                choice = choices[0]
                delta = choice["delta"]
                text = delta.get("content")
                if text and "role" not in delta:
                    lps = choice["logprobs"]
                    if lps is not None:  # the tokens end with the text (a separator may lead it)
                        entries = lps["content"]
                        start = self._fed + max(0, len(text) - sum(len(e["token"] or "") for e in entries))
                        for entry in entries:
                            self._lps.append((start, entry))
                            start += len(entry["token"] or "")
                    self._fed += len(text)
                    released = matcher.feed(text)
                    if released:
                        res.append(self._released(out, released))
                    if matcher.stopped:
                        res += self._stop_here()
                        return res
                    continue
                if choice["finish_reason"] is not None or "annotations" in delta:
                    res += self._flush()
            elif "error" in out:
                res += self._flush()
            res.append(out)
        return res

    def _released(self, chunk: dict[str, Any], text: str, *, last: bool = False) -> dict[str, Any]:
        """``chunk`` carrying ``text``, the content released, with the logprobs of its tokens."""
        choice = chunk["choices"][0]
        choice["delta"]["content"] = text
        self._sent += len(text)
        self._sent_bytes += len(text.encode())
        lps = self._lps
        if lps:
            upto = len(lps) if last else next((i for i, (start, _) in enumerate(lps) if start >= self._sent), len(lps))
            choice["logprobs"] = {"content": [entry for _, entry in lps[:upto]], "refusal": None} if upto else None
            del lps[:upto]
        else:
            choice["logprobs"] = None
        return chunk

    def _flush(self) -> list[Out]:
        """The end of the content (annotations, finish chunk, an error): release what is held."""
        tail = self._matcher.finish()
        if not tail:
            self._lps.clear()
            return []
        return [self._released(self._chunk({"content": tail}), tail, last=True)]

    def _stop_here(self) -> list[Out]:
        self._lps.clear()
        out: list[Out] = [
            self._args(call, "", close=True) for call in self._calls.values() if call.custom and not call.closed
        ]
        out.append(self._chunk({}, "stop"))
        self._count("stop_sequence")
        if self.usage is None:  # cut before the terminal event: nothing reported, estimated
            self.usage = self._estimate()
            usage = None
            if self._usage_on:
                self._count("usage_estimated")
                usage = self._estimated_chat_usage()
        else:  # the terminal event's output was being replayed: its usage is the upstream's
            usage = chat_usage(self.usage, "response.usage") if self._usage_on else None
        if usage is not None:
            out.append(
                {
                    "id": self._id,
                    "object": "chat.completion.chunk",
                    "created": self._created,
                    "model": self._model,
                    "choices": [],
                    "usage": usage,
                }
            )
        self.finish_reason = "stop"
        self._phase = _DONE
        self.done = True
        return out

    def _estimate(self) -> dict[str, int]:
        other = sum(len("".join(p.pieces).encode()) for key, p in self._parts.items() if key[0] != "t")
        args = sum(len("".join(c.pieces).encode()) for c in self._calls.values())
        return {"input_tokens": self._prompt_tokens, "output_tokens": math.ceil((self._sent_bytes + other + args) / 4)}

    def _estimated_chat_usage(self) -> dict[str, Any]:
        reasoning = sum(len("".join(p.pieces).encode()) for key, p in self._parts.items() if key[0] in ("s", "x"))
        assert self.usage is not None
        prompt, completion = self.usage["input_tokens"], self.usage["output_tokens"]
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": math.ceil(reasoning / 4)},
        }
