"""Responses results -> Chat Completions results (reverse direction, issue 4), non-streaming.

Also home of the small mappings the reverse stream machine shares with the non-streaming path
(usage, logprobs, url citations, finish reason, error envelope), so both answer the same way.

Failure contract (what the proxy does with a failed Response): ``response_to_chat_completion``
raises ``ResponseFailed``, a ``TranslationError`` whose ``http_status`` comes from the upstream
error code (429 for rate limits and quota, 400 for ``invalid_*``/``image_*`` codes, 502 for
everything else, including a Response left ``queued``/``in_progress``/``cancelled``) and whose
``body`` is the OpenAI error envelope ``{"error": {message, type, param, code}}`` to send as is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .errors import TranslationError
from .ids import CHAT_COMPLETION, IdFactory
from .options import MappingOptions

SEPARATOR = "\n\n"  # between message items' text, and between reasoning segments

_QUOTA_CODES = frozenset({"rate_limit_exceeded", "insufficient_quota"})


class ResponseFailed(TranslationError):
    """The upstream Response ended ``failed`` (or never finished): answer the chat client with
    ``http_status`` and ``body`` (an OpenAI error envelope)."""

    def __init__(self, body: dict[str, Any], http_status: int) -> None:
        err = body["error"]
        super().__init__(err["message"], param=err["param"], code=err["code"])
        self.error_type = err["type"]
        self.http_status = http_status
        self.body = body


def error_status(code: str | None) -> int:
    """HTTP status for an upstream Response error code.

    Rules:
    - ``rate_limit_exceeded`` / ``insufficient_quota`` -> 429 (clients back off and retry);
    - codes starting ``invalid_`` or ``image_`` (bad prompt or image) -> 400;
    - anything else (``server_error``, timeouts, unknown) -> 502: the backend failed.
    """
    if code in _QUOTA_CODES:
        return 429
    if code and (code.startswith("invalid_") or code.startswith("image_")):
        return 400
    return 502


def error_body(err: Any, *, code: str = "server_error", message: str = "upstream response failed") -> dict[str, Any]:
    """An upstream error object (nested ``error`` of an ``error`` event, a flat ``error`` event,
    or ``Response.error``) -> OpenAI's envelope ``{"error": {message, type, param, code}}``.

    Rules:
    - ``message``, ``code`` and ``param`` are copied when present (``code`` and ``message`` fall
      back to the arguments);
    - ``type`` is copied when the upstream gave one, else derived from the status class of the code
      (``invalid_request_error`` for 400, ``insufficient_quota``/``rate_limit_error`` for 429,
      ``server_error`` otherwise).
    """
    e = err if isinstance(err, dict) else {}
    c = e.get("code") or code
    c = c if isinstance(c, str) else str(c)
    t = e.get("type")
    if not isinstance(t, str) or not t or t == "error":
        status = error_status(c)
        if status == 400:
            t = "invalid_request_error"
        elif status == 429:
            t = "insufficient_quota" if c == "insufficient_quota" else "rate_limit_error"
        else:
            t = "server_error"
    m = e.get("message")
    param = e.get("param")
    return {
        "error": {
            "message": m if isinstance(m, str) and m else message,
            "type": t,
            "param": param if isinstance(param, str) else None,
            "code": c,
        }
    }


def chat_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Responses ``usage`` -> Chat ``usage``.

    Rules:
    - ``input_tokens`` -> ``prompt_tokens``, ``output_tokens`` -> ``completion_tokens``,
      ``total_tokens`` kept (sum when missing);
    - ``input_tokens_details.cached_tokens`` -> ``prompt_tokens_details.cached_tokens`` (0 default),
      ``cache_write_tokens`` copied only when the upstream reported it;
    - ``output_tokens_details.reasoning_tokens`` -> ``completion_tokens_details.reasoning_tokens``
      (0 default). Provider extras (xAI ``num_sources_used``...) are dropped.
    """
    prompt = usage.get("input_tokens") or 0
    completion = usage.get("output_tokens") or 0
    idet = usage.get("input_tokens_details") or {}
    odet = usage.get("output_tokens_details") or {}
    pdet: dict[str, Any] = {"cached_tokens": idet.get("cached_tokens") or 0}
    if idet.get("cache_write_tokens") is not None:
        pdet["cache_write_tokens"] = idet["cache_write_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": usage.get("total_tokens") or (prompt + completion),
        "prompt_tokens_details": pdet,
        "completion_tokens_details": {"reasoning_tokens": odet.get("reasoning_tokens") or 0},
    }


def chat_logprobs(lps: list[Any]) -> list[dict[str, Any]]:
    """Responses logprob entries -> Chat ``logprobs.content`` entries.

    Rules: ``token`` and ``logprob`` copied; ``bytes`` copied when present, else ``null`` (delta
    events may omit it); ``top_logprobs`` mapped the same way (``[]`` when absent).
    """
    return [
        {
            "token": lp.get("token"),
            "logprob": lp.get("logprob"),
            "bytes": lp.get("bytes"),
            "top_logprobs": [
                {"token": t.get("token"), "logprob": t.get("logprob"), "bytes": t.get("bytes")}
                for t in lp.get("top_logprobs") or ()
            ],
        }
        for lp in lps
        if isinstance(lp, dict)
    ]


def chat_annotation(ann: Any, base: int) -> dict[str, Any] | None:
    """A Responses annotation (flat) -> a Chat annotation (nested), or None when Chat has no place.

    Rules:
    - only ``url_citation`` maps: ``{type:"url_citation", url_citation:{start_index, end_index,
      title, url}}``; file/container citations and file paths are dropped (caller counts them);
    - indexes are shifted by ``base``, the offset of the annotated part in the joined
      ``content``; fields the upstream omitted (xAI sends only ``url``) become 0 (+ base) / "".
    """
    if not isinstance(ann, dict) or ann.get("type") != "url_citation":
        return None
    start = ann.get("start_index")
    end = ann.get("end_index")
    return {
        "type": "url_citation",
        "url_citation": {
            "start_index": base + (start if isinstance(start, int) else 0),
            "end_index": base + (end if isinstance(end, int) else 0),
            "title": ann.get("title") or "",
            "url": ann.get("url") or "",
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
    """
    reason = details.get("reason") if isinstance(details, dict) else None
    return "content_filter" if reason == "content_filter" else "length"


def _join_parts(texts: list[str], into: list[str]) -> None:
    text = "".join(texts)
    if text:
        into.append(text)


def response_to_chat_completion(
    resp: dict[str, Any],
    *,
    options: MappingOptions,
    ids: IdFactory,
    now: Callable[[], int] | None = None,
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
      non-streaming shape; streams use a function-typed call instead, see responses_to_chat);
    - hosted-tool items (web search...) are dropped;
    - ``finish_reason``: completed -> ``tool_calls`` when a call was made else ``stop``;
      incomplete -> ``length`` / ``content_filter``;
    - ``output_text`` part logprobs -> ``choices[0].logprobs.content`` (``null`` when none);
    - ``usage`` mapped by ``chat_usage`` when the upstream reported it.
    """
    status = resp.get("status")
    if status not in ("completed", "incomplete"):
        if status == "failed":
            body = error_body(resp.get("error"))
        else:
            body = error_body(None, message=f"upstream response ended with status {status!r}")
        raise ResponseFailed(body, error_status(body["error"]["code"]))
    content: list[str] = []
    refusal: list[str] = []
    reasoning: list[str] = []
    annotations: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    logprobs: list[dict[str, Any]] = []
    offset = 0
    for item in resp.get("output") or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            parts = [p for p in item.get("content") or () if isinstance(p, dict)]
            item_text = "".join(p.get("text") or "" for p in parts if p.get("type") == "output_text")
            pos = offset + (len(SEPARATOR) if content and item_text else 0)
            refusals: list[str] = []
            for part in parts:
                ptype = part.get("type")
                if ptype == "output_text":
                    for ann in part.get("annotations") or ():
                        mapped = chat_annotation(ann, pos)
                        if mapped is not None:
                            annotations.append(mapped)
                    lps = part.get("logprobs")
                    if lps:
                        logprobs.extend(chat_logprobs(lps))
                    pos += len(part.get("text") or "")
                elif ptype == "refusal":
                    refusals.append(part.get("refusal") or "")
            if item_text:
                content.append(item_text)
                offset = pos
            _join_parts(refusals, refusal)
        elif kind == "reasoning":
            for s in item.get("summary") or ():
                if isinstance(s, dict) and s.get("text"):
                    reasoning.append(s["text"])
            _join_parts([c.get("text") or "" for c in item.get("content") or () if isinstance(c, dict)], reasoning)
        elif kind == "function_call":
            tool_calls.append({
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name") or "", "arguments": item.get("arguments") or ""},
            })
        elif kind == "custom_tool_call":
            tool_calls.append({
                "id": item.get("call_id") or item.get("id"),
                "type": "custom",
                "custom": {"name": item.get("name") or "", "input": item.get("input") or ""},
            })
    message: dict[str, Any] = {
        "role": "assistant",
        "content": SEPARATOR.join(content) if content else None,
        "refusal": SEPARATOR.join(refusal) if refusal else None,
    }
    if reasoning:
        message[options.reasoning_field] = SEPARATOR.join(reasoning)
    if annotations:
        message["annotations"] = annotations
    if tool_calls:
        message["tool_calls"] = tool_calls
    if status == "incomplete":
        finish = incomplete_finish_reason(resp.get("incomplete_details"))
    else:
        finish = "tool_calls" if tool_calls else "stop"
    created = resp.get("created_at")
    result: dict[str, Any] = {
        "id": ids.new(CHAT_COMPLETION),
        "object": "chat.completion",
        "created": int(created) if isinstance(created, (int, float)) else (now() if now else 0),
        "model": resp.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": {"content": logprobs, "refusal": None} if logprobs else None,
                "finish_reason": finish,
            }
        ],
    }
    usage = resp.get("usage")
    if isinstance(usage, dict):
        result["usage"] = chat_usage(usage)
    return result
