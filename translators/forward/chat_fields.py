"""Readers for the provider-specific fields of chat deltas, kept apart from the stream machine.

Each function reads one quirk and names it, so the machine only sees normalised values:
``reasoning_details`` (OpenRouter), Mistral's content-part arrays, nested url_citation
annotations, and chat logprobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def mistral_parts(parts: list[Any]) -> Iterator[tuple[str, str]]:
    """Mistral streams ``content: [{type: thinking, thinking: [{type: text}]}, {type: text}]``.

    Yields ("reasoning", text), ("text", text) or ("unknown", "") per part.
    """
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            if isinstance(part.get("text"), str) and part["text"]:
                yield "text", part["text"]
        elif kind == "thinking":
            text = "".join(
                p["text"] for p in part.get("thinking") or () if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
            if text:
                yield "reasoning", text
        else:
            yield "unknown", ""


def details_text(details: Any) -> str:
    """Readable text of OpenRouter ``reasoning_details`` entries (encrypted ones carry none)."""
    if not isinstance(details, list):
        return ""
    out = []
    for d in details:
        if isinstance(d, dict):
            t = d.get("text") or d.get("summary")
            if isinstance(t, str):
                out.append(t)
    return "".join(out)


def flat_annotation(ann: Any) -> dict[str, Any] | None:
    if not isinstance(ann, dict) or ann.get("type") != "url_citation":
        return None
    inner = ann.get("url_citation") or ann
    return {
        "type": "url_citation",
        "start_index": inner.get("start_index") or 0,
        "end_index": inner.get("end_index") or 0,
        "title": inner.get("title") or "",
        "url": inner.get("url") or "",
    }


def delta_logprobs(logprobs: dict[str, Any], part: list[Any]) -> list[dict[str, Any]]:
    """Chat logprobs -> delta-event logprobs; the part keeps the same entries. ``bytes`` is on
    both: OpenAI's delta events leave it out, the Open Responses schema requires it (clients of
    the first ignore it)."""
    entries = logprobs.get("content") or ()
    full = []
    for e in entries:  # built completely before the part is touched, so a bad entry changes nothing
        top = e.get("top_logprobs") or ()
        full.append(
            {
                "token": e.get("token", ""),
                "bytes": e.get("bytes") or [],
                "logprob": e.get("logprob", 0.0),
                "top_logprobs": [
                    {"token": t.get("token", ""), "bytes": t.get("bytes") or [], "logprob": t.get("logprob", 0.0)}
                    for t in top
                ],
            }
        )
    part[3].extend(full)
    return full
