"""Hosted web search as the chat backend sees it (pure): the function's name, and how a
``web_search_call`` item of an earlier turn is replayed.

The search function is ``web_search``, or ``crossfeed_web_search`` when the client declares a
function of that name itself. A ``web_search_call`` item in the input (Codex sends them back;
a stored response holds them) becomes the tool exchange it was: an assistant ``tool_calls``
entry calling the function with its query, and a tool message with what is known of its
results: the sources when the item carries them (``include: ["web_search_call.action.sources"]``),
else a line saying the results were not kept (the answer that used them follows in the history).
"""

from __future__ import annotations

from typing import Any

import orjson

SEARCH_FUNCTION = "web_search"
CLASH_NAME = "crossfeed_web_search"
HOSTED_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11")


def search_function_name(tools: Any) -> str:
    clash = isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "function" and t.get("name") == SEARCH_FUNCTION for t in tools
    )
    return CLASH_NAME if clash else SEARCH_FUNCTION


def replayed(item: dict[str, Any], name: str, call_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the tool_calls entry, the tool message) of an earlier ``web_search_call`` item."""
    raw = item.get("action")
    action: dict[str, Any] = raw if isinstance(raw, dict) else {}
    query = action.get("query")
    query = query if isinstance(query, str) else ""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps({"query": query}).decode()},
    }
    sources = [
        s.get("url") for s in action.get("sources") or () if isinstance(s, dict) and isinstance(s.get("url"), str)
    ]
    if item.get("status") == "failed":
        text = "The search failed."
    elif sources:
        text = f'Search results for "{query}" (sources only; their text was not kept):\n' + "\n".join(
            f"[{n}] {url}" for n, url in enumerate(sources, 1)
        )
    else:
        text = f'Searched for "{query}"; the results were not kept (the answer that used them follows).'
    return call, {"role": "tool", "tool_call_id": call_id, "content": text}
