"""Responses results -> Chat Completions results (the reverse direction: a chat client, a Responses
backend), non-streaming.

Also home of the small mappings the reverse stream machine shares with the non-streaming path
(usage, logprobs, url citations, finish reason), so both answer the same way.

Failure contract (what the proxy does with a failed Response): ``response_to_chat_completion``
raises ``ResponseFailed``, a ``TranslationError`` whose ``http_status`` comes from the upstream
error code (429 for rate limits and quota, 400 for ``invalid_*``/``image_*`` codes, 502 for
everything else, including a Response left ``queued``/``in_progress``/``cancelled``) and whose
``body`` is the OpenAI error envelope ``{"error": {message, type, param, code}}`` to send as is.
A Response of the wrong shape (a field the mapping reads that has the wrong JSON type) raises
``UpstreamProtocolError`` (502) naming the field, never ``TypeError``/``KeyError``.

The upstream field readers (``up_str``, ``up_list``...) and the failure envelope (``ResponseFailed``,
``error_status``, ``error_body``) are translators/responses/fields.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from crossfeed.translators.errors import UpstreamProtocolError, json_kind
from crossfeed.translators.ids import CHAT_COMPLETION, IdFactory
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.responses.fields import (
    ResponseFailed,
    bad_field,
    error_body,
    error_status,
    up_dict,
    up_int,
    up_items,
    up_list,
    up_number,
    up_str,
)
from crossfeed.translators.reverse.stop_sequences import find_stop, normalize

SEPARATOR = "\n\n"  # between message items' text, and between reasoning segments


def chat_usage(usage: dict[str, Any], where: str = "usage") -> dict[str, Any]:
    """Responses ``usage`` -> Chat ``usage``.

    Rules:
    - ``input_tokens`` -> ``prompt_tokens``, ``output_tokens`` -> ``completion_tokens``,
      ``total_tokens`` kept (sum when missing);
    - ``input_tokens_details.cached_tokens`` -> ``prompt_tokens_details.cached_tokens`` (0 default),
      ``cache_write_tokens`` copied only when the upstream reported it;
    - ``output_tokens_details.reasoning_tokens`` -> ``completion_tokens_details.reasoning_tokens``
      (0 default). Provider extras (xAI ``num_sources_used``...) are dropped;
    - a count that is not a non-negative integer, or details that are not objects ->
      ``UpstreamProtocolError`` (clients add these numbers up).
    """
    get = usage.get
    prompt, completion, total = get("input_tokens"), get("output_tokens"), get("total_tokens")
    idet, odet = get("input_tokens_details"), get("output_tokens_details")
    if idet.__class__ is dict and odet.__class__ is dict:  # every count there, as OpenAI sends it: no call
        cached, reasoning = idet.get("cached_tokens"), odet.get("reasoning_tokens")
        write = idet.get("cache_write_tokens")
        if (
            prompt.__class__ is int
            and prompt >= 0
            and completion.__class__ is int
            and completion >= 0
            and total.__class__ is int
            and total > 0
            and cached.__class__ is int
            and cached >= 0
            and reasoning.__class__ is int
            and reasoning >= 0
            and (write is None or (write.__class__ is int and write >= 0))
        ):
            return {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": total,
                "prompt_tokens_details": {"cached_tokens": cached}
                if write is None
                else {"cached_tokens": cached, "cache_write_tokens": write},
                "completion_tokens_details": {"reasoning_tokens": reasoning},
            }
    prompt = up_int(usage, "input_tokens", where) or 0
    completion = up_int(usage, "output_tokens", where) or 0
    idet = up_dict(usage, "input_tokens_details", where) or {}
    odet = up_dict(usage, "output_tokens_details", where) or {}
    pdet: dict[str, Any] = {"cached_tokens": _detail(idet, "cached_tokens", where, "input_tokens_details") or 0}
    write = _detail(idet, "cache_write_tokens", where, "input_tokens_details")
    if write is not None:
        pdet["cache_write_tokens"] = write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": up_int(usage, "total_tokens", where) or (prompt + completion),
        "prompt_tokens_details": pdet,
        "completion_tokens_details": {
            "reasoning_tokens": _detail(odet, "reasoning_tokens", where, "output_tokens_details") or 0
        },
    }


def _detail(details: dict[str, Any], key: str, where: str, name: str) -> int | None:
    """``up_int`` of a usage details object, its place (``<where>.<name>``) named only in an error."""
    value = details.get(key)
    if value is None or (type(value) is int and value >= 0):
        return value
    raise bad_field(f"{where}.{name}", key, value, "a non-negative integer")


def _logprob(lp: Any, where: str) -> dict[str, Any]:
    if type(lp) is not dict:
        raise UpstreamProtocolError(f"{where} is {json_kind(lp)}, expected an object")
    raw = lp.get("bytes")
    if raw is not None and (type(raw) is not list or not all(type(b) is int for b in raw)):
        raise bad_field(where, "bytes", raw, "an array of integers")
    return {"token": up_str(lp, "token", where), "logprob": up_number(lp, "logprob", where), "bytes": raw}


def chat_logprobs(lps: list[Any], where: str = "logprobs") -> list[dict[str, Any]]:
    """Responses logprob entries -> Chat ``logprobs.content`` entries.

    Rules: ``token`` and ``logprob`` copied; ``bytes`` copied when present, else ``null`` (delta
    events may omit it); ``top_logprobs`` mapped the same way (``[]`` when absent). An entry of
    the wrong shape -> ``UpstreamProtocolError``.
    """
    out = []
    for i, lp in enumerate(lps):
        entry = _logprob(lp, f"{where}[{i}]")
        entry["top_logprobs"] = [
            _logprob(t, f"{where}[{i}].top_logprobs[{j}]")
            for j, t in enumerate(up_list(lp, "top_logprobs", f"{where}[{i}]"))
        ]
        out.append(entry)
    return out


def chat_annotation(ann: Any, base: int) -> dict[str, Any] | None:
    """A Responses annotation (flat) -> a Chat annotation (nested), or None when Chat has no place.

    Rules:
    - only ``url_citation`` maps: ``{type:"url_citation", url_citation:{start_index, end_index,
      title, url}}``; file/container citations and file paths are dropped (caller counts them);
    - indexes are shifted by ``base``, the offset of the annotated part in the joined
      ``content``; fields the upstream omitted (xAI sends only ``url``) become 0 (+ base) / "";
    - a url_citation field of the wrong type -> ``UpstreamProtocolError`` (callers check that
      each annotation is an object; anything else maps to None).
    """
    where = "annotation"
    if not isinstance(ann, dict) or ann.get("type") != "url_citation":
        return None
    return {
        "type": "url_citation",
        "url_citation": {
            "start_index": base + (up_int(ann, "start_index", where) or 0),
            "end_index": base + (up_int(ann, "end_index", where) or 0),
            "title": up_str(ann, "title", where) or "",
            "url": up_str(ann, "url", where) or "",
        },
    }


def chat_annotations(parts: Iterable[tuple[int, dict[int, Any]]], count: Callable[[str], None]) -> list[dict[str, Any]]:
    """Annotations of several text parts, each ``(base offset, {annotation_index: raw})``, mapped
    by ``chat_annotation`` in part then index order; ``count`` hears of each dropped type."""
    out = []
    for base, by_index in parts:
        for _, raw in sorted(by_index.items()):
            mapped = chat_annotation(raw, base)
            if mapped is None:
                count(f"annotation_dropped:{raw.get('type') if isinstance(raw, dict) else type(raw).__name__}")
            else:
                out.append(mapped)
    return out


def incomplete_finish_reason(details: Any) -> str:
    """``response.incomplete`` -> chat ``finish_reason``.

    Rules: ``content_filter`` -> ``content_filter``; ``max_output_tokens`` and every other or
    missing reason (``max_messages``, ``steered``...) -> ``length`` (the answer was cut short).
    ``details`` that is not an object (or null), or a reason that is not a string ->
    ``UpstreamProtocolError``.
    """
    if details is None:
        return "length"
    if type(details) is not dict:
        raise bad_field("response", "incomplete_details", details, "an object")
    reason = up_str(details, "reason", "response.incomplete_details")
    return "content_filter" if reason == "content_filter" else "length"


def output_tokens_of(resp: dict[str, Any]) -> int:
    """The Response's ``usage.output_tokens``; -1 when it reports none."""
    usage = resp.get("usage")
    tokens = usage.get("output_tokens") if type(usage) is dict else None
    return tokens if type(tokens) is int else -1


def _token_starts(entries: list[dict[str, Any]], pos: int, into: list[int]) -> None:
    """The offset in the content of each logprob entry's token, from ``pos`` (the part's start)."""
    for entry in entries:
        into.append(pos)
        pos += len(entry["token"] or "")


def _join_parts(texts: list[str], into: list[str]) -> None:
    text = "".join(texts)
    if text:
        into.append(text)


def response_to_chat_completion(
    resp: dict[str, Any],
    *,
    options: BackendProfile,
    ids: IdFactory,
    now: Callable[[], int] | None = None,
    max_output_tokens: int | None = None,
    stop: Sequence[str] = (),
) -> dict[str, Any]:
    """A final Response object -> a ``chat.completion``.

    Rules:
    - ``status`` ``failed`` (or any status other than ``completed``/``incomplete``) -> raise
      ``ResponseFailed`` (see module docstring); ``id`` is minted ``chatcmpl-...``; ``created`` =
      ``created_at`` (``now()`` when absent); ``model`` copied;
    - ``message`` items: ``output_text`` parts joined into ``content`` (parts of one item joined
      with "", separate message items with a blank line), ``refusal`` parts into ``refusal``,
      ``url_citation`` annotations -> ``annotations`` (nested, offsets into the joined content);
    - ``reasoning`` items: summary parts and ``reasoning_text`` content -> ``options.reasoning_field``
      (segments separated by a blank line); encrypted content is dropped;
    - ``function_call`` -> ``{id: call_id, type:"function", function:{name, arguments}}``;
      ``custom_tool_call`` -> ``{id: call_id, type:"custom", custom:{name, input}}`` (the official
      non-streaming shape; streams use a function-typed call instead: translators/reverse/machine.py);
    - hosted-tool items (web search...) are dropped;
    - ``finish_reason``: completed -> ``tool_calls`` when a call was made else ``stop``;
      incomplete -> ``length`` / ``content_filter``; completed having spent ``max_output_tokens``
      (the request's limit; llama-server reports a cut answer as completed) -> ``length``;
    - ``output_text`` part logprobs -> ``choices[0].logprobs.content`` (``null`` when none);
    - ``stop`` (the chat request's stop sequences, applied by crossfeed: the Responses API has
      none): the content ends before the first one (translators/reverse/stop_sequences.py, the same cut
      as the stream's), ``finish_reason`` is ``stop``, and what came after it goes too: the
      annotations and logprobs past the cut, and every later output item (calls, reasoning);
      ``usage`` stays the upstream's (what it generated);
    - ``usage`` mapped by ``chat_usage`` when the upstream reported it;
    - a field read above with the wrong JSON type (``output`` not an array, an item or part not an
      object, a text that is not a string, a call without a name...) -> ``UpstreamProtocolError``.
    """
    if type(resp) is not dict:
        raise UpstreamProtocolError(f"the upstream Response is {json_kind(resp)}, expected an object")
    status = resp.get("status")
    if status not in ("completed", "incomplete"):
        raise _failure(resp, status)
    answer = _Answer(normalize(stop) if stop else ())
    for i, item in enumerate(up_items(up_list(resp, "output", "response"), "response.output")):
        where = f"response.output[{i}]"
        kind = up_str(item, "type", where)
        if kind == "message":
            answer.message(item, where)
            if answer.stopped:  # the answer ends here: nothing after the stop sequence
                break
        elif kind == "reasoning":
            answer.reasoning_item(item, where)
        elif kind == "function_call" or kind == "custom_tool_call":
            answer.call(item, where, kind)
    message = answer.chat_message(options.reasoning_field)
    finish = _finish_reason(resp, status, answer, max_output_tokens)
    created = up_number(resp, "created_at", "response")
    logprobs = answer.logprobs
    result: dict[str, Any] = {
        "id": ids.new(CHAT_COMPLETION),
        "object": "chat.completion",
        "created": int(created) if created is not None else (now() if now else 0),
        "model": up_str(resp, "model", "response") or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": {"content": logprobs, "refusal": None} if logprobs else None,
                "finish_reason": finish,
            }
        ],
    }
    usage = up_dict(resp, "usage", "response")
    if usage is not None:
        result["usage"] = chat_usage(usage, "response.usage")
    return result


def _failure(resp: dict[str, Any], status: Any) -> ResponseFailed:
    """A Response ended ``failed``, or in any status but ``completed``/``incomplete``."""
    if status == "failed":
        body = error_body(resp.get("error"))
    else:
        body = error_body(None, message=f"upstream response ended with status {status!r}")
    return ResponseFailed(body, error_status(body["error"]["code"]))


def _finish_reason(resp: dict[str, Any], status: str, answer: _Answer, max_output_tokens: int | None) -> str:
    if answer.stopped:
        return "stop"
    if status == "incomplete":
        return incomplete_finish_reason(resp.get("incomplete_details"))
    if max_output_tokens is not None and output_tokens_of(resp) >= max_output_tokens:
        return "length"
    return "tool_calls" if answer.tool_calls else "stop"


class _Answer:
    """What the output items of a Response add up to, read in order (``response_to_chat_completion``)."""

    __slots__ = (
        "content",
        "refusal",
        "reasoning",
        "annotations",
        "tool_calls",
        "logprobs",
        "offset",
        "stops",
        "token_starts",
        "stopped",
    )

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.content: list[str] = []  # each message item's text
        self.refusal: list[str] = []
        self.reasoning: list[str] = []  # the segments
        self.annotations: list[dict[str, Any]] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.logprobs: list[dict[str, Any]] = []
        self.offset = 0  # the length of the joined content so far
        self.stops = stops
        self.token_starts: list[int] = []  # with stops: where each logprob's token starts in the content
        self.stopped = False  # the content was cut at a stop sequence

    def message(self, item: dict[str, Any], where: str) -> None:
        parts = up_items(up_list(item, "content", where), f"{where}.content")
        texts = [
            (up_str(p, "type", f"{where}.content[{j}]"), up_str(p, "text", f"{where}.content[{j}]") or "")
            for j, p in enumerate(parts)
        ]
        item_text = "".join(text for ptype, text in texts if ptype == "output_text")
        pos = self.offset + (len(SEPARATOR) if self.content and item_text else 0)
        refusals: list[str] = []
        for j, (part, (ptype, text)) in enumerate(zip(parts, texts, strict=True)):
            pwhere = f"{where}.content[{j}]"
            if ptype == "output_text":
                self._text_part(part, pwhere, pos)
                pos += len(text)
            elif ptype == "refusal":
                refusals.append(up_str(part, "refusal", pwhere) or "")
        if item_text:
            self.content.append(item_text)
            self.offset = pos
        _join_parts(refusals, self.refusal)
        if self.stops and item_text:
            self._cut_at_stop()

    def _text_part(self, part: dict[str, Any], where: str, pos: int) -> None:
        """An output_text part at ``pos`` in the content: its annotations and logprobs."""
        for ann in up_items(up_list(part, "annotations", where), f"{where}.annotations"):
            mapped = chat_annotation(ann, pos)
            if mapped is not None:
                self.annotations.append(mapped)
        lps = up_list(part, "logprobs", where)
        if lps:
            entries = chat_logprobs(lps, f"{where}.logprobs")
            self.logprobs.extend(entries)
            if self.stops:
                _token_starts(entries, pos, self.token_starts)

    def _cut_at_stop(self) -> None:
        joined = SEPARATOR.join(self.content)
        at = find_stop(joined, self.stops)
        if at is None:
            return
        self.stopped = True
        self.content = [joined[:at]]
        self.annotations = [a for a in self.annotations if a["url_citation"]["start_index"] < at]
        for a in self.annotations:
            a["url_citation"]["end_index"] = min(a["url_citation"]["end_index"], at)
        self.logprobs = [lp for lp, start in zip(self.logprobs, self.token_starts, strict=True) if start < at]

    def reasoning_item(self, item: dict[str, Any], where: str) -> None:
        for j, s in enumerate(up_items(up_list(item, "summary", where), f"{where}.summary")):
            summary = up_str(s, "text", f"{where}.summary[{j}]")
            if summary:
                self.reasoning.append(summary)
        parts = up_items(up_list(item, "content", where), f"{where}.content")
        _join_parts([up_str(c, "text", f"{where}.content[{j}]") or "" for j, c in enumerate(parts)], self.reasoning)

    def call(self, item: dict[str, Any], where: str, kind: str) -> None:
        name = up_str(item, "name", where)
        if not name:
            raise UpstreamProtocolError(f"{where}: a {kind} item without a name")
        call_id = up_str(item, "call_id", where) or up_str(item, "id", where)
        if kind == "function_call":
            fields = {"name": name, "arguments": up_str(item, "arguments", where) or ""}
            self.tool_calls.append({"id": call_id, "type": "function", "function": fields})
        else:
            fields = {"name": name, "input": up_str(item, "input", where) or ""}
            self.tool_calls.append({"id": call_id, "type": "custom", "custom": fields})

    def chat_message(self, reasoning_field: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": SEPARATOR.join(self.content) if self.content else None,
            "refusal": SEPARATOR.join(self.refusal) if self.refusal else None,
        }
        if self.reasoning:
            message[reasoning_field] = SEPARATOR.join(self.reasoning)
        if self.annotations:
            message["annotations"] = self.annotations
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message
