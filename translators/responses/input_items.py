"""The input items a stored response keeps, in the shape ``GET .../input_items`` lists them.

Rules:
  - A string ``input`` becomes one user message item with an ``input_text`` part.
  - A message item given as ``{role, content: str}`` gets ``type: message`` and its text as one
    part (``output_text`` for assistant messages, ``input_text`` otherwise).
  - Every item gets an ``id`` when it has none (``msg_`` for messages, ``item_`` otherwise), so
    the listing can be paginated by id. Nothing else is changed.
  - The history of a continued conversation is the previous response's items followed by its
    output items; ``instructions`` are never part of it (they are not inherited, as in the API).
"""

from __future__ import annotations

from typing import Any

from crossfeed.translators import ids as idp
from crossfeed.translators.ids import IdFactory


def normalize_input(value: Any, ids: IdFactory) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [
            {
                "id": ids.new(idp.MESSAGE),
                "type": "message",
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_text", "text": value}],
            }
        ]
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if not isinstance(item, dict):
            continue
        item = dict(item)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            item["type"] = "message"
            content = item.get("content")
            if isinstance(content, str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": content}]
        if not item.get("id"):
            item["id"] = ids.new(idp.MESSAGE if kind == "message" else "item_")
        out.append(item)
    return out


def continued_history(previous_input: list[dict[str, Any]], previous_response: dict[str, Any]) -> list[dict[str, Any]]:
    """What a request with ``previous_response_id`` continues from.

    A failed previous response contributes its input but none of its (partial) output: the
    conversation continues as if the failed turn had produced nothing.
    """
    history = list(previous_input)
    if previous_response.get("status") != "failed":
        for item in previous_response.get("output") or ():
            if isinstance(item, dict) and item.get("status") != "in_progress":
                history.append(item)
    return history
