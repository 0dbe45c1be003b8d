"""Responses events -> Responses events: a sloppy upstream's stream made strict.

Native ``/v1/responses`` streams of some servers are rejected by the OpenAI SDK stream helpers:
llama.cpp's ``llama-server`` sends no ``sequence_number``, ``output_index`` or ``content_index``,
no ``content_part.added`` for reasoning, no ``reasoning_text.done`` or ``function_call_arguments.done``,
and every ``output_item.done`` (without ``output_index``) only at the end. ``NormalizeResponses``
re-emits such a stream so that it passes ``tests.support.validators``; a strict stream comes out
with the same events. Repaired:

- ``sequence_number`` stamped from 0, one apart, on every event (upstream numbers ignored; a
  stream not numbered so is counted once, ``stream_renumbered``).
- ``response.created`` + ``response.in_progress`` first, from the first upstream event's Response
  (else ``ids``/``now``/``model``); later lifecycle events (llama's prompt-progress ``in_progress``,
  ``queued``) dropped; every Response keeps the first id.
- Ids: ``output_index`` is the machine's own, append-only. An event belongs to the item its
  upstream ``output_index`` names, else its ``item_id``, else the open item of its type, and gets
  ``item_id``/``output_index``/``content_index``/``summary_index`` from it; an event whose item or
  part was never added opens one. Added items start empty, ``in_progress``, with an id and
  ``call_id`` (fresh when missing or repeated); ``output_text`` gets ``annotations``/``logprobs``.
- Skipped done events: one item and one part stream at a time; the next one, or the end, closes
  the open one with what the producer skipped (the rest of the text as a delta when the final text
  extends the streamed one, else the streamed text wins; the text's ``*.done``, ``content_part.done``,
  ``function_call_arguments.done``, ``output_item.done``). Later events for it are dropped.
- One terminal event, ``output`` the items as done, ``usage`` complete; nothing after it. Without
  any item event the terminal ``output`` is replayed as items.
- Failures end as in the forward machine's: open items ``incomplete``, ``error``, ``response.failed``.
  An upstream ``error`` keeps its code, message and type, a ``response.failed`` its ``error``; an end
  without terminal is ``upstream_truncated``, an event of the wrong shape ``upstream_protocol_error``.
- Unknown event types pass through renumbered, their ids filled when they name an item.

Max-tokens heuristic (``max_output_tokens``, the request's): llama-server says ``completed`` even
when the budget cut the answer. With ``usage.output_tokens >= max_output_tokens`` the stream ends
``response.incomplete`` (``max_output_tokens``) unless the output ended naturally: its last item is
a function call whose arguments parse as JSON, a hosted-tool item, or a message whose text ends in
closing punctuation (``. ! ? ) ] } " ' ` *``...). A cut right after a full stop stays completed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from crossfeed.translators import ids as idp
from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.responses.fields import error_body
from crossfeed.translators.responses.numbering import TERMINAL, Event, NumberedStream
from crossfeed.translators.responses.response_object import fill_usage, new_response

_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_REASONS = frozenset({"max_output_tokens", "content_filter", "max_messages", "steered"})
# Part type -> (text event prefix, text field, part event prefix, index key, owning item type).
_PARTS = {
    "output_text": ("response.output_text", "text", "response.content_part", "content_index", "message"),
    "refusal": ("response.refusal", "refusal", "response.content_part", "content_index", "message"),
    "reasoning_text": ("response.reasoning_text", "text", "response.content_part", "content_index", "reasoning"),
    "summary_text": (
        "response.reasoning_summary_text",
        "text",
        "response.reasoning_summary_part",
        "summary_index",
        "reasoning",
    ),
}
# Text streamed into the item itself: event prefix -> (item type, field).
_ITEM_TEXT = {
    "response.function_call_arguments": ("function_call", "arguments"),
    "response.custom_tool_call_input": ("custom_tool_call", "input"),
    "response.code_interpreter_call_code": ("code_interpreter_call", "code"),
    "response.mcp_call_arguments": ("mcp_call", "arguments"),
}
# Text event prefix -> (part type, None for the item's own text; field; index key; item type).
_STREAMS = {
    **{s[0]: (t, s[1], s[3], s[4]) for t, s in _PARTS.items()},
    **{p: (None, field, None, kind) for p, (kind, field) in _ITEM_TEXT.items()},
}
_CALLS = frozenset({"function_call", "custom_tool_call"})  # their text's *.done must precede the item's
_STATUS_REQUIRED = frozenset({"message", "web_search_call", *_CALLS})
_CALL_ID_TYPES = frozenset({"shell_call", "shell_call_output", *_CALLS})
_PREFIXES = {
    "message": idp.MESSAGE,
    "reasoning": idp.REASONING,
    "function_call": idp.FUNCTION_CALL,
    "custom_tool_call": idp.CUSTOM_TOOL_CALL,
}
_HOSTED = frozenset(
    f"response.{kind}.{phase}"
    for kind in (  # events of hosted-tool items
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
    )
    for phase in ("in_progress", "searching", "interpreting", "generating", "completed", "failed", "partial_image")
)
# Sentence endings, CJK and typographic ones too (the look-alikes are meant: noqa RUF001).
_ENDINGS = frozenset(".!?;:)]}>\"'`*…。！？」』”’")  # noqa: RUF001
_SHAPE_ERRORS = (UpstreamProtocolError, TypeError, AttributeError, KeyError, ValueError)


def _blank(kind: str) -> dict[str, Any]:
    """The fields an added item of ``kind`` must start with (fresh lists: items are sent as they are)."""
    blanks: dict[str, dict[str, Any]] = {
        "message": {"content": []},
        "reasoning": {"summary": []},
        "function_call": {"arguments": ""},
        "custom_tool_call": {"input": ""},
    }
    return blanks.get(kind, {})


class _Part:
    """A text stream: a content or summary part, or an item's own text (arguments, input...)."""

    __slots__ = ("type", "index", "pieces", "text_done", "final", "anns")

    def __init__(self, part_type: str, index: int) -> None:
        self.type, self.index, self.text_done = part_type, index, False
        self.pieces: list[str] = []
        self.anns: list[Any] = []  # annotations (output_text)
        self.final: dict[str, Any] | None = None  # the part content_part.done carried

    def text(self) -> str:
        if len(self.pieces) > 1:
            self.pieces = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""


class _Item:
    __slots__ = ("id", "type", "index", "orig", "added", "parts", "summary", "texts", "final")

    def __init__(self, kind: str, index: int, orig: dict[str, Any], added: dict[str, Any]) -> None:
        self.id, self.type, self.index = added["id"], kind, index
        self.orig, self.added = orig, added  # as the upstream added it / as output_item.added carried it
        self.parts: list[_Part] = []
        self.summary: list[_Part] = []
        self.texts: dict[str, _Part] = {}  # event prefix -> the item's own text
        self.final: dict[str, Any] | None = None


class NormalizeResponses(NumberedStream):
    """One upstream Responses stream -> one strict Responses stream (see the module docstring)."""

    def __init__(
        self,
        *,
        ids: IdFactory,
        now: Callable[[], int] | None = None,
        model: str | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        """``now``, ``model``: for a Response the upstream never described (``created_at`` 0 without
        a clock). ``max_output_tokens``: the request's budget, for the max-tokens heuristic."""
        super().__init__()  # diagnostics: what was repaired or dropped, for the driver's log
        self.done = False
        self.final_response: dict[str, Any] | None = None
        self._ids, self._now, self._model, self._max = ids, now, model or "", max_output_tokens
        self._resp: dict[str, Any] | None = None
        self._items: list[_Item] = []
        self._output: list[dict[str, Any]] = []  # the done items
        self._open: _Item | None = None
        self._by_index: dict[Any, _Item] = {}  # upstream output_index -> item
        self._by_id: dict[Any, _Item] = {}  # upstream item id -> item
        self._used: set[str] = set()  # item ids and call ids sent
        self._upstream_seq: int | None = 0  # the upstream's next sequence_number; None once it skipped one

    def feed(self, event: dict[str, Any]) -> list[Event]:
        if self.done:
            self._note("after_terminal")
            return []
        out = self._out = []
        expected = self._upstream_seq
        if expected is not None:  # its numbering: counted once when it is not 0, 1, 2... (llama-server: none)
            if event.get("sequence_number") == expected:
                self._upstream_seq = expected + 1
            else:
                self._upstream_seq = None
                self._note("stream_renumbered")
        try:
            kind = event.get("type")
            if kind is None and "error" in event:
                kind = "error"  # llama-server: `data: {"error": {...}}`
            if kind.__class__ is not str:
                raise UpstreamProtocolError("an event without a type")
            if kind == "error":
                nested = event.get("error")
                err = error_body(
                    nested if isinstance(nested, dict) else event,
                    code="upstream_error",
                    message="the upstream reported an error",
                )["error"]
                self._failed(err["code"], err["message"], error_type=err["type"])
                return out
            self._start(event.get("response"))
            if kind in TERMINAL:
                self._terminal(kind, event.get("response"))
            elif kind == "response.output_item.added" or kind == "response.output_item.done":
                self._on_item(event, kind[-4:] == "done")
            elif kind not in _OPENING:
                self._scoped(kind, event)
        except _SHAPE_ERRORS as exc:
            what = exc.message if isinstance(exc, UpstreamProtocolError) else "an event of an unexpected shape"
            self._failed("upstream_protocol_error", f"the upstream sent {what}")
        return out

    def finish(self, *, clean: bool = True) -> list[Event]:
        """The upstream ended (``clean``: ``[DONE]`` seen); before a terminal event it is a cut."""
        return self.fail("upstream_truncated", "the upstream closed the stream before it finished")

    def fail(self, code: str, message: str) -> list[Event]:
        if self.done:
            return []
        self._out = []
        self._failed(code, message)
        return self._out

    # -- lifecycle -------------------------------------------------------------------------

    def _start(self, resp: Any) -> None:
        if self._resp is not None:
            return
        up = resp if isinstance(resp, dict) else {}
        rid, created, model = up.get("id"), up.get("created_at"), up.get("model")
        base = self._resp = {**new_response({}, response_id="", created_at=0, model=""), **up}
        reasoning = base.get("reasoning")
        if isinstance(reasoning, dict):  # the Open Responses schema wants both keys
            base["reasoning"] = {"effort": reasoning.get("effort"), "summary": reasoning.get("summary"), **reasoning}
        base.update(
            id=rid if rid.__class__ is str and rid else self._ids.new(idp.RESPONSE),
            object="response",
            created_at=created if created.__class__ in (int, float) else self._now() if self._now else 0,
            model=model if model.__class__ is str and model else self._model,
            status="in_progress",
            output=[],
            error=None,
            incomplete_details=None,
            usage=None,
        )
        self._emit({"type": "response.created", "response": base})
        self._emit({"type": "response.in_progress", "response": base})

    def _terminal(self, kind: str, resp: Any) -> None:
        up = resp if isinstance(resp, dict) else {}
        if not self._items and isinstance(up.get("output"), list):  # done-only upstream: replay
            for body in up["output"]:
                if isinstance(body, dict):
                    self._close(self._open_item(body, None), body, "completed")
        if kind == "response.failed":
            err = error_body(up.get("error"), code="upstream_error", message="the upstream response failed")
            return self._failed(err["error"]["code"], err["error"]["message"], up, event=False)
        usage = fill_usage(up.get("usage"))
        reason = None
        if kind == "response.incomplete":
            details = up.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            reason = reason if reason in _REASONS else "max_output_tokens"
        self._close_open("incomplete" if reason else "completed")
        if not reason and self._max is not None and usage["output_tokens"] >= self._max and not self._ended_naturally():
            reason = "max_output_tokens"
            self._note("max_output_tokens_inferred")
        final = self._final(up, "incomplete" if reason else "completed")
        final.update(usage=usage, error=None, incomplete_details={"reason": reason} if reason else None)
        self._end("response.incomplete" if reason else "response.completed", final)

    def _failed(
        self,
        code: str,
        message: str,
        up: dict[str, Any] | None = None,
        *,
        event: bool = True,
        error_type: str = "server_error",
    ) -> None:
        self._start(None)
        self._close_open("incomplete")
        up = up or {}
        final = self._final(up, "failed")
        final.update(
            usage=fill_usage(up["usage"]) if isinstance(up.get("usage"), dict) else None,
            error={"code": code, "message": message},
            incomplete_details=None,
        )
        if event:
            self._emit_error(code, message, error_type)
        self._end("response.failed", final)

    def _final(self, up: dict[str, Any], status: str) -> dict[str, Any]:
        base = self._resp
        assert base is not None
        model = up.get("model")
        final = {
            **base,
            **up,
            "id": base["id"],
            "object": "response",
            "created_at": base["created_at"],
            "status": status,
            "output": self._output,
            "model": model if model.__class__ is str and model else base["model"],
            "reasoning": base.get("reasoning"),
        }
        if status == "completed" and final.get("completed_at") is None:
            final["completed_at"] = self._now() if self._now else final["created_at"]
        elif status != "completed":
            final.setdefault("completed_at", None)
        return final

    def _end(self, kind: str, final: dict[str, Any]) -> None:
        self.done = True
        self.final_response = final
        self._emit({"type": kind, "response": final})

    def _ended_naturally(self) -> bool:
        """The max-tokens heuristic's "natural end" (module docstring), read from the done items."""
        last: dict[str, Any] = self._output[-1] if self._output else {"type": "reasoning"}
        if last["type"] == "function_call":
            try:
                orjson.loads(last["arguments"] or "!")
                return True
            except orjson.JSONDecodeError:
                return False
        if last["type"] != "message":
            return last["type"] != "reasoning"  # a hosted tool's item: not the model's text to judge
        texts = [p.get("text") for p in last["content"] if p.get("type") == "output_text"]
        text = texts[-1].rstrip() if texts and isinstance(texts[-1], str) else "."  # no text: a refusal
        return bool(text) and text[-1] in _ENDINGS

    # -- items -----------------------------------------------------------------------------

    def _on_item(self, event: Event, done: bool) -> None:
        body = event.get("item")
        if not isinstance(body, dict):
            raise UpstreamProtocolError("an output item that is not an object")
        if not done:
            if self._open is not None and self._by_id.get(body.get("id")) is self._open:
                return self._note("duplicate_added")
            self._open_item(body, event.get("output_index"))
            return
        item = self._lookup(event, body.get("type"), body.get("id")) or self._open_item(body, event.get("output_index"))
        if item.final is not None:  # llama-server: the done of an item closed when the next opened
            return self._note("late_event")
        self._close(item, body, "completed")

    def _open_item(self, orig: dict[str, Any], upstream_index: Any, upstream_id: Any = None) -> _Item:
        kind = orig.get("type")
        if not (kind.__class__ is str and kind):
            raise UpstreamProtocolError("an output item without a type")
        self._close_open("completed")
        added = {**orig, **_blank(kind), "id": self._fresh(orig.get("id"), _PREFIXES.get(kind, "item_"))}
        if kind in _CALL_ID_TYPES:
            added["call_id"] = self._fresh(orig.get("call_id"), idp.CALL)
        if kind in _STATUS_REQUIRED or "status" in added:
            added["status"] = "in_progress"
        if kind == "message":
            added.setdefault("role", "assistant")
        elif kind in _CALLS:
            added.setdefault("name", "")
        elif kind == "reasoning" and "content" in added:
            added["content"] = []
        item = self._open = _Item(kind, len(self._items), orig, added)
        self._items.append(item)
        for key, index in ((orig.get("id"), self._by_id), (upstream_id, self._by_id), (upstream_index, self._by_index)):
            if key is not None:
                index[key] = item
        self._emit({"type": "response.output_item.added", "output_index": item.index, "item": added})
        return item

    def _fresh(self, value: Any, prefix: str) -> str:
        if not (value.__class__ is str and value) or value in self._used:
            value = self._ids.new(prefix)
        self._used.add(value)
        return value

    def _close_open(self, status: str) -> None:
        if self._open is not None:
            self._close(self._open, None, status)

    def _close(self, item: _Item, done: dict[str, Any] | None, status: str) -> None:
        """Close ``item`` with the upstream's done item (None: it sent none), emitting what it skipped."""
        self._open = None
        src = item.orig if done is None else done
        final = {**src, "id": item.id, "type": item.type}
        if "call_id" in item.added:
            final["call_id"] = item.added["call_id"]
        if item.type == "message" or item.parts or (item.type == "reasoning" and isinstance(src.get("content"), list)):
            final["content"] = self._close_parts(item, item.parts, src.get("content"), False)
        if item.type == "reasoning":
            final["summary"] = self._close_parts(item, item.summary, src.get("summary"), True)
        for prefix, (kind, field) in _ITEM_TEXT.items():
            if kind == item.type and (kind in _CALLS or prefix in item.texts or isinstance(src.get(field), str)):
                stream = item.texts.setdefault(prefix, _Part(prefix, 0))
                if not stream.text_done:
                    self._text_done(item, stream, prefix, src.get(field))
                final[field] = stream.text()
        if "status" in final or "status" in item.added:
            given = final.get("status")
            final["status"] = (
                given
                if given in ("completed", "incomplete") or (given == "failed" and item.type not in _PREFIXES)
                else status
            )
        item.final = final
        self._output.append(final)
        self._emit({"type": "response.output_item.done", "output_index": item.index, "item": final})

    def _close_parts(self, item: _Item, parts: list[_Part], want: Any, summary: bool) -> list[Any]:
        want = [w if isinstance(w, dict) else {} for w in want] if isinstance(want, list) else []
        for w in want[len(parts) :]:  # parts only the done item has: streamed now
            ptype = w.get("type")
            if ptype in _PARTS and _PARTS[ptype][4] == item.type and (ptype == "summary_text") == summary:
                self._open_part(item, ptype)
        finals = []
        for part in parts:
            w = want[part.index] if part.index < len(want) else {}
            if part.final is None:
                self._part_done(item, part, w)
            final: dict[str, Any] = part.final or {}
            lps = w.get("logprobs") if w.get("type") == part.type else None
            if lps.__class__ is list and lps != final.get("logprobs"):  # the done item's logprobs win
                final = {**final, "logprobs": lps}
            finals.append(final)
        return finals

    def _lookup(self, event: Event, family: Any, upstream_id: Any = None) -> _Item | None:
        """The item an event names: by upstream output_index, else item id, else the open one."""
        for item in (
            self._by_index.get(event.get("output_index")),
            self._by_id.get(upstream_id if upstream_id is not None else event.get("item_id")),
            self._open,
        ):
            if item is not None and (family is None or item.type == family):
                return item
        return None

    def _item_for(self, event: Event, family: str, fresh: bool) -> _Item | None:
        """The open item an event is for; None when it is closed. With no item named, a done event
        (not ``fresh``) without ids is for the last item of its type; else an item is opened."""
        item = self._lookup(event, family)
        if item is None and not fresh and event.get("item_id") is None and event.get("output_index") is None:
            item = next((i for i in reversed(self._items) if i.type == family), None)
        if item is None:
            self._note("item_without_added")
            return self._open_item({"type": family}, event.get("output_index"), event.get("item_id"))
        return item if item.final is None else None

    # -- parts and text --------------------------------------------------------------------

    def _scoped(self, kind: str, event: Event) -> None:
        prefix, _, phase = kind.rpartition(".")
        spec = _STREAMS.get(prefix) if phase == "delta" or phase == "done" else None
        part_event = prefix == "response.content_part" or prefix == "response.reasoning_summary_part"
        if spec is not None:
            ptype, field, key, family = spec
            item = self._item_for(event, family, phase == "delta")
            stream = (
                None
                if item is None
                else self._part_for(item, event, ptype, phase == "delta")
                if ptype is not None
                else item.texts.setdefault(prefix, _Part(prefix, 0))
            )
            if item is None or stream is None or stream.text_done:
                return self._note("late_event")
            if phase == "done":
                return self._text_done(item, stream, prefix, event.get(field), event)
            delta = event.get("delta")
            if delta.__class__ is not str:
                raise UpstreamProtocolError("a delta that is not text")
            stream.pieces.append(delta)
            event["item_id"], event["output_index"] = item.id, item.index
            if key is not None:
                event[key] = stream.index
                if ptype == "output_text" and event.get("logprobs").__class__ is not list:
                    event["logprobs"] = []
            return self._emit(event)
        if part_event or kind == "response.output_text.annotation.added":
            body = event.get("part")
            if not part_event:
                ptype = "output_text"
            elif prefix == "response.reasoning_summary_part":
                ptype = "summary_text"
            else:
                ptype = body.get("type") if isinstance(body, dict) else None
            if ptype in _PARTS and (phase == "added" or phase == "done"):
                return self._part_event(event, ptype, phase, part_event)
        if "item_id" in event or "output_index" in event:  # hosted-tool and unknown item events
            item = self._lookup(event, None)
            if item is not None:
                if item.final is not None and kind in _HOSTED and kind.split(".")[1] == item.type:
                    return self._note("late_event")  # a known event for a closed item (unknown ones pass)
                event["output_index"] = item.index
                if "item_id" in event:
                    event["item_id"] = item.id
        self._emit(event)

    def _part_event(self, event: Event, ptype: str, phase: str, part_event: bool) -> None:
        """``content_part``/``reasoning_summary_part`` added or done, or an annotation (not ``part_event``)."""
        item = self._item_for(event, _PARTS[ptype][4], phase == "added")
        if item is not None and part_event and phase == "added":
            index = event.get(_PARTS[ptype][3])
            if index.__class__ is int and 0 <= index < len(item.summary if ptype == "summary_text" else item.parts):
                return self._note("duplicate_added")
            self._open_part(item, ptype)
            return
        part = None if item is None else self._part_for(item, event, ptype)
        if item is None or part is None:
            return self._note("late_event")
        if part_event:
            return self._part_done(item, part, event.get("part"), event)
        self._annotate(item, part, event.get("annotation"), event)

    def _part_for(self, item: _Item, event: Event, ptype: str, fresh: bool = False) -> _Part | None:
        """The part an event names (its index, else the open part of its type); a part never added
        is opened. None: it names a part already done (without an index: unless ``fresh``, a delta)."""
        parts = item.summary if ptype == "summary_text" else item.parts
        index = event.get(_PARTS[ptype][3])
        if index.__class__ is int and 0 <= index < len(parts):
            if parts[index].type == ptype:
                return parts[index] if parts[index].final is None else None
        elif index is None and parts and parts[-1].type == ptype and (parts[-1].final is None or not fresh):
            return parts[-1] if parts[-1].final is None else None
        return self._open_part(item, ptype)

    def _open_part(self, item: _Item, ptype: str) -> _Part:
        _, field, pprefix, key, _ = _PARTS[ptype]
        parts = item.summary if ptype == "summary_text" else item.parts
        if parts and parts[-1].final is None:  # parts stream one after the other
            self._part_done(item, parts[-1], None)
        part = _Part(ptype, len(parts))
        parts.append(part)
        body = {"type": ptype, field: "", **({"annotations": [], "logprobs": []} if ptype == "output_text" else {})}
        self._emit(
            {"type": pprefix + ".added", "item_id": item.id, "output_index": item.index, key: part.index, "part": body}
        )
        return part

    def _part_done(self, item: _Item, part: _Part, want: Any, event: Event | None = None) -> None:
        prefix, field, pprefix, key, _ = _PARTS[part.type]
        want = want if isinstance(want, dict) and want.get("type") == part.type else {}
        if not part.text_done:
            self._text_done(item, part, prefix, want.get(field))
        body = {**want, "type": part.type, field: part.text()}
        if part.type == "output_text":
            anns, have = want.get("annotations"), len(part.anns)
            if isinstance(anns, list) and len(anns) > have and anns[:have] == part.anns:
                for ann in anns[have:]:  # annotations only the done part has
                    self._annotate(item, part, ann)
            body["annotations"] = part.anns
            if body.get("logprobs").__class__ is not list:
                body["logprobs"] = []
        part.final = body
        event = event if event is not None else {"type": pprefix + ".done"}
        event.update({"item_id": item.id, "output_index": item.index, key: part.index, "part": body})
        self._emit(event)

    def _text_done(self, item: _Item, stream: _Part, prefix: str, want: Any, event: Event | None = None) -> None:
        """The ``*.done`` of a text, after a delta with the rest when ``want`` extends the streamed text."""
        _, field, key, _ = _STREAMS[prefix]
        have = stream.text()
        ids = {"item_id": item.id, "output_index": item.index, **({key: stream.index} if key else {})}
        lps: dict[str, Any] = {"logprobs": []} if prefix == "response.output_text" else {}
        if want.__class__ is str and want != have:
            if want.startswith(have):
                stream.pieces.append(want[len(have) :])
                self._emit({"type": prefix + ".delta", **ids, "delta": want[len(have) :], **lps})
            else:
                self._note("done_text_mismatch")
        event = event if event is not None else {"type": prefix + ".done"}
        event.update(ids)
        event[field] = stream.text()
        if lps and event.get("logprobs").__class__ is not list:
            event.update(lps)
        stream.text_done = True
        self._emit(event)

    def _annotate(self, item: _Item, part: _Part, ann: Any, event: Event | None = None) -> None:
        if not isinstance(ann, dict):
            raise UpstreamProtocolError("an annotation that is not an object")
        part.anns.append(ann)
        event = event if event is not None else {"type": "response.output_text.annotation.added"}
        event.update(
            item_id=item.id,
            output_index=item.index,
            content_index=part.index,
            annotation_index=len(part.anns) - 1,
            annotation=ann,
        )
        self._emit(event)
