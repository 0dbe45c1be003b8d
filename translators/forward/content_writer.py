"""The contents of the forward machine's items, delta by delta: the middle layer of the machine.

``ContentWriter`` extends the Response assembler (assembler.py) with what a chunk's delta turns
into: reasoning text (``_reasoning``), message text and refusals (``_more_text``, ``_text``),
annotations (``_annotation``), tool calls and their arguments (``_open_call``, ``_append_args``).
The chunk reader (machine.py, ``ChatToResponsesStream``) extends it in turn and calls these for
what it read; it has no state of its own. ``_more_text`` is the per-token path: more text for
the open text part, handled in full there (in wire mode: one frame from the item's template).

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
in order of appearance, never taken from the upstream's tool index.
"""

from __future__ import annotations

from typing import Any

import orjson

from crossfeed.translators import ids as idp
from crossfeed.translators.forward.assembler import (
    CUSTOM_CALL,
    FUNCTION_CALL,
    HOSTED_CALL,
    MESSAGE,
    REASONING,
    SEARCH_CALL,
    SUMMARY_TEXT,
    Item,
    ResponseAssembler,
)
from crossfeed.translators.forward.chat_fields import delta_logprobs, flat_annotation
from crossfeed.translators.json_string_stream import JsonStringField
from crossfeed.translators.run_frames import frames, numbers

_dumps = orjson.dumps
_TEXT_DELTA = "response.output_text.delta"
_SUMMARY_DELTA = "response.reasoning_summary_text.delta"
_ARGS_DELTA = "response.function_call_arguments.delta"
_TEXT_TAIL = b',"logprobs":[],"sequence_number":'
_QUOTED_TEXT_TAIL = b'"' + _TEXT_TAIL  # (Item.pieces of a text part's template)


class ContentWriter(ResponseAssembler):
    """Deltas into items (see the module docstring): methods only, the state is the assembler's."""

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
                    else self._head(item, self._events.reasoning_delta, 0)
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
                "type": self._events.reasoning_delta,
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
                    head = item.head if item.head_ci == ci else self._head(item, _TEXT_DELTA, ci, tail=_TEXT_TAIL)
                    self._out.append(head % (_dumps(text), seq))
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

    def _more_texts(self, raws: list[bytes], texts: list[str]) -> None:
        """``_more_text`` for several texts in a row, each plain (``raws``: their UTF-8, which is
        their JSON string without the quotes). In wire mode, once the first has opened what it
        must, the others are frames of the part's template, the quotes written into it."""
        self._more_text(texts[0], None)
        if len(texts) == 1:
            return
        item = self._open
        if self._wire and item is not None and item.kind is MESSAGE:
            parts = item.parts
            part = parts[-1]
            if part[0] == "output_text" and item.head_ci == len(parts) - 1:
                seq = self._seq
                n = len(texts) - 1
                self._seq = seq + n
                part[1] += texts[1:]
                lead, mid, close, glue = item.pieces
                if self._framing.sse and mid == _QUOTED_TEXT_TAIL:
                    # SSE frames follow one another: the run's are one output (``packed``
                    # counts the others), joined with their numbers (run_frames.py).
                    self._out.append(frames(lead, raws[1:], mid, numbers(seq, n), close, glue))
                    self.packed += n - 1
                    return
                quoted = item.head.replace(b',"delta":%s', b',"delta":"%s"')
                self._out += map(quoted.__mod__, zip(raws[1:], range(seq, self._seq), strict=True))
                return
        for text in texts[1:]:
            self._more_text(text, None)

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

    def _open_part(self, item: Item, kind: str) -> None:
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

    def _open_call(self, key: Any, call_id: str | None, name: str) -> Item:
        if self._open is not None:
            self._close(self._open, "completed")
        if name in self._tools.hosted:  # crossfeed runs it: nothing goes out, no output index
            item = Item(HOSTED_CALL, "", -1)
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
        if name == self._tools.client_search:  # the client's tool search: a tool_search_call
            item = self._new_item(SEARCH_CALL, idp.TOOL_SEARCH_CALL)
        elif custom:
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

    def _append_args(self, call: Item, args: str) -> None:
        call.args.append(args)
        if call.kind is HOSTED_CALL or call.kind is SEARCH_CALL:
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
