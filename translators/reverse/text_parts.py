"""The text of a reverse stream: content, refusal and reasoning deltas, the tails of final texts,
url_citation annotations (collected here, sent by the terminal event).

``TextStream`` is the second layer of ``ResponsesToChatStream`` (translators/reverse/machine.py),
whose ``__init__`` sets the state below; its ``_on_*`` methods are handlers of the machine's table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from crossfeed.translators.responses.fields import bad_field, up_dict, up_str
from crossfeed.translators.reverse.body import SEPARATOR, chat_logprobs
from crossfeed.translators.reverse.chunks import ChunkWriter
from crossfeed.translators.reverse.stream_state import (
    DELTA_KINDS,
    DONE_FIELDS,
    OUTPUT_TEXT,
    REFUSAL,
    SUMMARY_TEXT,
    Call,
    Part,
    PartKey,
    PartKind,
    delta_text,
    item_key,
    part_index,
    part_text,
)
from crossfeed.translators.sse import Out

if TYPE_CHECKING:
    from crossfeed.translators.reverse.delta_frames import PartDelta

_dumps = orjson.dumps


class TextStream(ChunkWriter):
    __slots__ = ("_parts", "_anns", "_last_msg", "_last_seg", "_content_len", "_streamed", "_rrun")

    _parts: dict[PartKey, Part]  # every text part sent, in order of appearance
    _anns: dict[PartKey, dict[int, Any]]  # output_text part -> annotation_index -> raw annotation
    _last_msg: Any  # the item key of the message item that sent content last
    _last_seg: Any  # the reasoning segment that sent reasoning last
    _content_len: int  # characters of content sent (annotation offsets)
    _streamed: bool  # any item-scoped event seen
    # The reasoning part the last reasoning delta continued, as the typed path keeps it
    # (delta_reads.py): (the decoder of its kind's deltas, output_index, the part's index
    # (content_index or summary_index), the part, the reasoning frame's head, the JSON's type
    # prefix and its length); None once another reasoning text was sent (_reasoning).
    _rrun: tuple[Callable[[bytes], PartDelta], int, int, Part, bytes, bytes, int] | None

    def _content(self, oi: Any, ci: Any, text: str, lps: Any = None) -> Out:
        key: PartKey = (OUTPUT_TEXT, oi, ci)
        part = self._parts.get(key)
        raw = text
        if oi != self._last_msg:
            if self._last_msg is not None:
                text = SEPARATOR + text
            self._last_msg = oi
        if part is None:
            part = self._parts[key] = Part(self._content_len + len(text) - len(raw))
        part.pieces.append(raw)
        self._content_len += len(text)
        if lps:
            return self._chunk({"content": text}, None, {"content": lps, "refusal": None})
        if self._wire:
            head = self._heads.get("content")
            if head is None:  # the stream's first content frame: _frame makes the template
                return self._frame("content", text)
            return b"%s%s%s" % (head, _dumps(text), self._after)  # _frame's, without a call a delta
        return self._chunk({"content": text})

    def _refusal(self, oi: Any, ci: Any, text: str) -> dict[str, Any]:
        key: PartKey = (REFUSAL, oi, ci)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = Part(0)
        part.pieces.append(text)
        return self._chunk({"refusal": text})

    def _reasoning(self, key: PartKey, text: str) -> Out:
        """Reasoning text for part ``key``: a summary part is its own segment, the reasoning_text
        parts of one item form one segment."""
        self._rrun = None  # (the segment may change here: the typed path's part is then unsure)
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = Part(0)
        part.pieces.append(text)
        kind, item, _ = key
        segment = key if kind == SUMMARY_TEXT else item
        if segment != self._last_seg:
            if self._last_seg is not None:
                text = SEPARATOR + text
            self._last_seg = segment
        if self._wire:
            head = self._heads.get(self._rfield)
            if head is None:
                return self._frame(self._rfield, text)
            return head + _dumps(text) + self._after
        return self._chunk({self._rfield: text})

    def _tail(self, holder: Part | Call | None, final: str | None) -> str:
        """The part of ``final`` not yet sent by ``holder`` ("" when nothing is missing)."""
        if not final:
            return ""
        if holder is None:
            return final
        pieces = holder.pieces
        seen = pieces[0] if len(pieces) == 1 else "".join(pieces)
        holder.pieces = [seen]
        if final == seen:  # the usual case: everything was streamed
            return ""
        if final.startswith(seen):
            return final[len(seen) :]
        self._count("done_text_mismatch")
        return ""

    def _final_text(self, kind: PartKind, oi: Any, idx: int, final: str | None) -> list[Out]:
        """A part's final text: send the tail never seen as deltas."""
        key: PartKey = (kind, oi, idx)
        tail = self._tail(self._parts.get(key), final)
        if not tail:
            return []
        if kind == OUTPUT_TEXT:
            return [self._content(oi, idx, tail)]
        if kind == REFUSAL:
            return [self._refusal(oi, idx, tail)]
        return [self._reasoning(key, tail)]

    def _on_text_delta(self, ev: dict[str, Any]) -> list[Out]:
        d = ev.get("delta")
        if type(d) is not str:
            raise bad_field(ev["type"], "delta", d, "a string")
        oi = ev.get("output_index")
        if type(oi) is not int:
            oi = item_key(ev)
        ci = ev.get("content_index")
        if type(ci) is not int:
            ci = part_index(ev, "content_index")
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
        d = delta_text(ev)
        kind = DELTA_KINDS[ev["type"]]
        oi = item_key(ev)
        idx = part_index(ev, "summary_index" if kind == SUMMARY_TEXT else "content_index")
        if not d:
            return []
        self._streamed = True
        if kind == REFUSAL:
            return [self._refusal(oi, idx, d)]
        return [self._reasoning((kind, oi, idx), d)]

    def _on_text_done(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        oi = ev.get("output_index")
        if type(oi) is not int:  # (the usual index read inline)
            oi = item_key(ev)
        kind: PartKind
        if t == "response.reasoning_summary_part.done":  # the final text is in part.text
            part = up_dict(ev, "part", t)
            final = up_str(part, "text", f"{t}: part") if part is not None else None
            idx = part_index(ev, "summary_index")
            kind = SUMMARY_TEXT
        else:
            done = DONE_FIELDS[t]
            kind = done.kind
            final = up_str(ev, done.field, t)
            given = ev.get(done.index_key)
            idx = given if type(given) is int else part_index(ev, done.index_key)
        self._streamed = True
        return self._final_text(kind, oi, idx, final)

    def _on_part_done(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        oi = ev.get("output_index")
        if type(oi) is not int:  # (the usual indexes read inline)
            oi = item_key(ev)
        given = ev.get("content_index")
        idx = given if type(given) is int else part_index(ev, "content_index")
        self._streamed = True
        part = up_dict(ev, "part", t)
        if part is None:
            return []
        found = part_text(part, t + ": part")
        return [] if found is None else self._final_text(found[0], oi, idx, found[1])

    def _on_annotation(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        key: PartKey = (OUTPUT_TEXT, item_key(ev), part_index(ev, "content_index"))
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
