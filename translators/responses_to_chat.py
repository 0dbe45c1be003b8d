"""Responses stream events -> Chat Completions chunks (reverse direction, issue 4).

``ResponsesToChatStream`` takes parsed Responses events (the driver decodes SSE, skips a
``data: [DONE]`` some backends send, and appends its own ``data: [DONE]``) and returns
``chat.completion.chunk`` dicts, or an error object ``{"error": {message, type, param, code}}`` as
the last output of a failed stream. It never logs: ``diagnostics`` counts what it dropped
(``unknown_event:<type>``, ``hosted_event:<type>``, ``hosted_item:<type>``, ``after_terminal``,
``done_text_mismatch``, ``annotation_dropped:<type>``, ``usage_missing``, ``call_without_added``,
``malformed_event``) for the driver to log once per stream.

Rules:
- The first lifecycle event (``created``; else ``queued``/``in_progress``/terminal; else the first
  content event) fixes ``id`` (minted ``chatcmpl-``), ``model`` (upstream's, else the ``model``
  argument) and ``created`` (``created_at``, else ``now()``), and sends the only ``role``:
  ``delta:{role:"assistant", content:""}``.
- ``output_text.delta`` -> ``content`` (+ logprobs -> ``choices[0].logprobs.content``);
  ``refusal.delta`` -> ``refusal``; ``reasoning_text.delta`` / ``reasoning_summary_text.delta`` ->
  ``options.reasoning_field``. A new message item's text, and each new reasoning segment (summary
  part, or reasoning item), starts with a blank line when text of that kind was sent before.
  Empty deltas send nothing.
- ``function_call`` items -> ``tool_calls`` with ``index`` 0, 1, 2... in order of appearance (never
  ``output_index``); the first fragment (at ``output_item.added``) has ``id`` (= ``call_id``),
  ``type:"function"``, ``function:{name, arguments:""}``; later ones only ``index`` + ``function.arguments``.
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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .chat_bodies import SEPARATOR, chat_annotations, chat_logprobs, chat_usage, error_body, incomplete_finish_reason
from .ids import CALL, CHAT_COMPLETION, IdFactory
from .options import MappingOptions

_WAITING, _STREAMING, _DONE = "waiting", "streaming", "done"
_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress",
                        "response.completed", "response.incomplete"})
_NO_START = frozenset({"error", "response.failed", "keepalive"})
_HOSTED_PREFIXES = (
    "response.web_search_call.", "response.file_search_call.", "response.code_interpreter_call",
    "response.image_generation_call.", "response.mcp_", "response.shell_call", "response.local_shell_call",
    "response.apply_patch_call", "response.computer_call", "response.compaction.", "response.tool_search",
)
_MALFORMED = (AttributeError, TypeError, ValueError, KeyError)
_CALL_TYPES = {"function_call": False, "custom_tool_call": True}  # item type -> is custom
# Final-text part types -> (part kind, field): t = output_text, r = refusal, x = reasoning_text.
_DELTA_KINDS = {"response.refusal.delta": "r", "response.reasoning_summary_text.delta": "s",
                "response.reasoning_text.delta": "x"}
_PART_KINDS = {"output_text": ("t", "text"), "refusal": ("r", "refusal"), "reasoning_text": ("x", "text")}


def _escape(text: str) -> str:
    """JSON-escape a piece of a string literal (escaping is per character, so pieces concatenate)."""
    return orjson.dumps(text)[1:-1].decode()


def _oi(ev: dict[str, Any]) -> Any:
    oi = ev.get("output_index")
    return ev.get("item_id") if oi is None else oi


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


class ResponsesToChatStream:
    """One Responses stream -> one chat completion stream. See the module docstring for rules."""

    __slots__ = ("_usage_on", "_rfield", "_ids", "_now", "_fallback_model", "_phase", "_id", "_model",
                 "_created", "_parts", "_calls", "_anns", "_last_msg", "_last_seg", "_content_len",
                 "_streamed", "finish_reason", "error", "diagnostics")

    def __init__(self, *, include_usage: bool, options: MappingOptions, ids: IdFactory,
                 now: Callable[[], int], model: str | None = None) -> None:
        """``model``: reported only if no lifecycle event names one (default ``"unknown"``)."""
        self._usage_on = include_usage
        self._rfield = options.reasoning_field
        self._ids = ids
        self._now = now
        self._fallback_model = model or "unknown"
        self._phase = _WAITING
        self._id = ""
        self._model = ""
        self._created = 0
        self._parts: dict[tuple[Any, ...], _Part] = {}  # (kind, output index, part index)
        self._calls: dict[Any, _Call] = {}  # output index -> call, in order of appearance
        self._anns: dict[tuple[Any, ...], dict[int, Any]] = {}  # text part -> annotation_index -> raw
        self._last_msg: Any = None  # output index of the message item that sent content last
        self._last_seg: Any = None  # reasoning segment that sent reasoning last
        self._content_len = 0
        self._streamed = False  # any item-scoped event seen
        self.finish_reason: str | None = None  # set by a successful terminal event
        self.error: dict[str, Any] | None = None  # the error object sent, on failure
        self.diagnostics: dict[str, int] = {}

    # -- public interface ------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """``waiting`` (nothing sent yet), ``streaming``, or ``done``."""
        return self._phase

    @property
    def done(self) -> bool:
        return self._phase is _DONE

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self._phase is _DONE:
            self._count("after_terminal")
            return []
        # A malformed event (not an object, wrong types anywhere) is dropped and counted, never raised.
        try:
            handler = _HANDLERS.get(event.get("type"))
            if self._phase is _STREAMING:
                return self._other(event) if handler is None else handler(self, event)
        except _MALFORMED:
            self._count("malformed_event")
            return []
        out = self._first(event)
        try:
            out.extend(self._other(event) if handler is None else handler(self, event))
        except _MALFORMED:
            self._count("malformed_event")
        return out

    def finish(self, *, clean: bool = True) -> list[dict[str, Any]]:
        """The upstream ended (``clean``: with ``[DONE]``, else EOF). Without a terminal event
        either way is a failure: the error object."""
        if self._phase is _DONE:
            return []
        return self.fail("upstream_protocol_error", "upstream stream ended before a terminal event")

    def fail(self, code: str, message: str) -> list[dict[str, Any]]:
        if self._phase is _DONE:
            return []
        return self._error({"code": code, "message": message, "type": "server_error"})

    # -- plumbing --------------------------------------------------------------------------

    def _count(self, key: str) -> None:
        self.diagnostics[key] = self.diagnostics.get(key, 0) + 1

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

    def _first(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """Start the stream (identity + role chunk) on the first known event that is no failure."""
        t = event.get("type")
        if t not in _HANDLERS or t in _NO_START:
            return []
        resp = event.get("response") if t in _LIFECYCLE else None
        resp = resp if isinstance(resp, dict) else {}
        self._phase = _STREAMING
        self._id = self._ids.new(CHAT_COMPLETION)
        model = resp.get("model")
        self._model = model if isinstance(model, str) and model else self._fallback_model
        created = resp.get("created_at")
        self._created = int(created) if isinstance(created, (int, float)) else self._now()
        return [self._chunk({"role": "assistant", "content": ""})]

    def _error(self, err: Any) -> list[dict[str, Any]]:
        self._phase = _DONE
        self.error = error_body(err)
        return [self.error]

    def _other(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        t = event.get("type")
        t = t if isinstance(t, str) else repr(t)
        self._count(("hosted_event:" if t.startswith(_HOSTED_PREFIXES) else "unknown_event:") + t)
        return []

    # -- text ------------------------------------------------------------------------------

    def _content(self, oi: Any, ci: Any, text: str, lps: Any = None) -> dict[str, Any]:
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
        return self._chunk({"content": text}, None, {"content": chat_logprobs(lps), "refusal": None} if lps else None)

    def _refusal(self, oi: Any, ci: Any, text: str) -> dict[str, Any]:
        key = ("r", oi, ci)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Part(0)
        part.pieces.append(text)
        return self._chunk({"refusal": text})

    def _reasoning(self, key: tuple[Any, ...], text: str) -> dict[str, Any]:
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
        return self._chunk({self._rfield: text})

    def _tail(self, holder: _Part | _Call | None, final: Any) -> str:
        """The part of ``final`` not yet sent by ``holder`` ("" when nothing is missing)."""
        if not isinstance(final, str) or not final:
            return ""
        if holder is None:
            return final
        pieces = holder.pieces
        seen = pieces[0] if len(pieces) == 1 else "".join(pieces)
        holder.pieces = [seen]
        if final.startswith(seen):
            return final[len(seen):]
        self._count("done_text_mismatch")
        return ""

    def _final_text(self, kind: str, oi: Any, idx: Any, final: Any) -> list[dict[str, Any]]:
        """A part's final text (t/r/s/x): send the tail never seen as deltas."""
        key = (kind, oi, idx or 0)
        tail = self._tail(self._parts.get(key), final)
        if not tail:
            return []
        if kind == "t":
            return [self._content(oi, key[2], tail)]
        if kind == "r":
            return [self._refusal(oi, key[2], tail)]
        return [self._reasoning(key, tail)]

    def _on_text_delta(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        d = ev.get("delta")
        if not d or type(d) is not str:
            return []
        self._streamed = True
        return [self._content(_oi(ev), ev.get("content_index") or 0, d, ev.get("logprobs"))]

    def _on_other_delta(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        """refusal / reasoning_text / reasoning_summary_text deltas."""
        d = ev.get("delta")
        if not d or type(d) is not str:
            return []
        self._streamed = True
        kind = _DELTA_KINDS[ev["type"]]
        if kind == "r":
            return [self._refusal(_oi(ev), ev.get("content_index") or 0, d)]
        idx = ev.get("summary_index" if kind == "s" else "content_index") or 0
        return [self._reasoning((kind, _oi(ev), idx), d)]

    def _on_text_done(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        self._streamed = True
        t = ev.get("type")
        if t == "response.output_text.done":
            return self._final_text("t", _oi(ev), ev.get("content_index"), ev.get("text"))
        if t == "response.refusal.done":
            return self._final_text("r", _oi(ev), ev.get("content_index"), ev.get("refusal"))
        if t == "response.reasoning_text.done":
            return self._final_text("x", _oi(ev), ev.get("content_index"), ev.get("text"))
        part = ev.get("part")  # reasoning_summary_text.done has text, *_part.done has part.text
        final = ev.get("text") if "text" in ev else (part.get("text") if isinstance(part, dict) else None)
        return self._final_text("s", _oi(ev), ev.get("summary_index"), final)

    def _on_part_done(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        self._streamed = True
        part = ev.get("part")
        kind = _PART_KINDS.get(part.get("type")) if isinstance(part, dict) else None
        if kind is None:
            return []
        return self._final_text(kind[0], _oi(ev), ev.get("content_index"), part.get(kind[1]))

    def _on_annotation(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        self._streamed = True
        anns = self._anns.setdefault(("t", _oi(ev), ev.get("content_index") or 0), {})
        idx = ev.get("annotation_index")
        anns[idx if isinstance(idx, int) else len(anns)] = ev.get("annotation")
        return []

    # -- tool calls ------------------------------------------------------------------------

    def _open_call(self, oi: Any, item: dict[str, Any], custom: bool, initial: str) -> dict[str, Any]:
        call = self._calls[oi] = _Call(len(self._calls), custom)
        call.pieces.append(initial)
        name = item.get("name")
        fragment = {"index": call.index, "id": item.get("call_id") or self._ids.new(CALL), "type": "function",
                    "function": {"name": name if isinstance(name, str) else "",
                                 "arguments": '"' + _escape(initial) if custom else initial}}
        return self._chunk({"tool_calls": [fragment]})

    def _args(self, call: _Call, text: str, close: bool = False) -> dict[str, Any]:
        call.pieces.append(text)
        if call.custom:
            text = _escape(text)
            if close:
                text += '"'
                call.closed = True
        return self._chunk({"tool_calls": [{"index": call.index, "function": {"arguments": text}}]})

    def _on_args_delta(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        d = ev.get("delta")
        if not d or type(d) is not str:
            return []
        self._streamed = True
        oi = _oi(ev)
        call = self._calls.get(oi)
        if call is None:
            self._count("call_without_added")
            return [self._open_call(oi, {}, ev.get("type") == "response.custom_tool_call_input.delta", d)]
        return [self._args(call, d)]

    def _on_args_done(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        self._streamed = True
        custom = ev.get("type") == "response.custom_tool_call_input.done"
        oi = _oi(ev)
        if oi not in self._calls:
            self._count("call_without_added")
        return self._finish_call(oi, {}, custom, ev.get("input") if custom else ev.get("arguments"))

    def _finish_call(self, oi: Any, item: dict[str, Any], custom: bool, final: Any) -> list[dict[str, Any]]:
        """A call's final arguments/input: send the unseen tail, close a custom call's string."""
        call = self._calls.get(oi)
        if call is None:
            out = [self._open_call(oi, item, custom, final if isinstance(final, str) else "")]
            call = self._calls[oi]
            tail = ""
        else:
            out = []
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

    def _on_item_added(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        self._streamed = True
        item = ev.get("item")
        if not isinstance(item, dict):
            return []
        kind = item.get("type")
        custom = _CALL_TYPES.get(kind)
        if custom is not None:
            oi = _oi(ev)
            if oi in self._calls:
                return []
            initial = item.get("input" if custom else "arguments")
            return [self._open_call(oi, item, custom, initial if isinstance(initial, str) else "")]
        if kind != "message" and kind != "reasoning":
            self._count(f"hosted_item:{kind}")
        return []

    def _on_item_done(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        self._streamed = True
        item = ev.get("item")
        return self._item_tails(_oi(ev), item, False) if isinstance(item, dict) else []

    def _item_tails(self, oi: Any, item: dict[str, Any], count_hosted: bool) -> list[dict[str, Any]]:
        """A final item: send whatever of its text/arguments was never streamed."""
        out: list[dict[str, Any]] = []
        kind = item.get("type")
        if kind == "message":
            for ci, part in enumerate(item.get("content") or ()):
                pk = _PART_KINDS.get(part.get("type")) if isinstance(part, dict) else None
                if pk is not None:
                    out += self._final_text(pk[0], oi, ci, part.get(pk[1]))
                    if pk[0] == "t" and part.get("annotations"):
                        self._anns[("t", oi, ci)] = dict(enumerate(part["annotations"]))
        elif kind == "reasoning":
            for si, s in enumerate(item.get("summary") or ()):
                out += self._final_text("s", oi, si, s.get("text") if isinstance(s, dict) else None)
            for ci, c in enumerate(item.get("content") or ()):
                out += self._final_text("x", oi, ci, c.get("text") if isinstance(c, dict) else None)
        elif kind in _CALL_TYPES:
            custom = _CALL_TYPES[kind]
            out += self._finish_call(oi, item, custom, item.get("input" if custom else "arguments"))
        elif count_hosted:
            self._count(f"hosted_item:{kind}")
        return out

    # -- terminal --------------------------------------------------------------------------

    def _on_terminal(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        resp = ev.get("response")
        resp = resp if isinstance(resp, dict) else {}
        out: list[dict[str, Any]] = []
        if not self._streamed:  # done-only at the response level: replay the final output
            for i, item in enumerate(resp.get("output") or ()):
                if isinstance(item, dict):
                    out += self._item_tails(i, item, True)
        for call in self._calls.values():
            if call.custom and not call.closed:
                out.append(self._args(call, "", close=True))
        if self._anns:
            anns = chat_annotations(((self._parts[k].base if k in self._parts else self._content_len, by_index)
                                     for k, by_index in self._anns.items()), self._count)
            if anns:
                out.append(self._chunk({"annotations": anns}))
        if ev.get("type") == "response.incomplete":
            finish = incomplete_finish_reason(resp.get("incomplete_details"))
        else:
            finish = "tool_calls" if self._calls else "stop"
        out.append(self._chunk({}, finish))
        self.finish_reason = finish
        if self._usage_on:
            usage = resp.get("usage")
            if isinstance(usage, dict):
                out.append({"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                            "model": self._model, "choices": [], "usage": chat_usage(usage)})
            else:
                self._count("usage_missing")
        self._phase = _DONE
        return out

    def _on_failed(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        resp = ev.get("response")
        return self._error(resp.get("error") if isinstance(resp, dict) else None)

    def _on_error(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        nested = ev.get("error")
        return self._error(nested if isinstance(nested, dict) else ev)

    def _ignore(self, ev: dict[str, Any]) -> list[dict[str, Any]]:
        return []


_S = ResponsesToChatStream
_HANDLERS: dict[Any, Callable[[ResponsesToChatStream, dict[str, Any]], list[dict[str, Any]]]] = {
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
