"""Hosted web search as the chat backend sees it (pure): the function's name, and how a
``web_search_call`` item of an earlier turn is replayed.

The search function is ``web_search``, or ``crossfeed_web_search`` when the client declares a
function of that name itself. A ``web_search_call`` item in the input (Codex sends them back;
a stored response holds them) becomes the tool exchange it was: an assistant ``tool_calls``
entry calling the function with its query, and a tool message with what is known of its
results: the sources when the item carries them (``include: ["web_search_call.action.sources"]``),
else a line saying the results were not kept (the answer that used them follows in the history).

``search_request``: what a request asks of the hosted search (the tool's options, a
``tool_choice`` naming it, the sources ``include``), read once by the request mapping for the
proxy's search runner (proxy/turns/hosted/search_runner.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

SEARCH_FUNCTION = "web_search"
CLASH_NAME = "crossfeed_web_search"
HOSTED_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11")
SOURCES_INCLUDE = "web_search_call.action.sources"


@dataclass(frozen=True, slots=True)
class WebSearchRequest:
    """The request's hosted search tool, as the proxy runs it."""

    function: str  # the chat function offered for it (search_function_name)
    context_size: Any  # search_context_size as sent (the proxy's settings say how many results)
    domains: tuple[str, ...]  # filters.allowed_domains, bare host names
    country: str | None  # user_location.country
    live: bool  # external_web_access is not false
    forced: bool  # tool_choice names the hosted tool: the first leg must search
    sources: bool  # include web_search_call.action.sources


def search_function_name(tools: Any) -> str:
    clash = isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "function" and t.get("name") == SEARCH_FUNCTION for t in tools
    )
    return CLASH_NAME if clash else SEARCH_FUNCTION


def search_request(tools: Any, tool_choice: Any, include: Collection[str]) -> WebSearchRequest | None:
    """The first hosted search tool of ``tools``, or None."""
    hosted = (
        next((t for t in tools if isinstance(t, dict) and t.get("type") in HOSTED_TYPES), None)
        if isinstance(tools, list)
        else None
    )
    if hosted is None:
        return None
    raw_filters = hosted.get("filters")
    filters: dict[str, Any] = raw_filters if isinstance(raw_filters, dict) else {}
    domains = tuple(
        str(d).lower().removeprefix("https://").removeprefix("http://").strip("/")
        for d in (filters.get("allowed_domains") or ())
        if isinstance(d, str) and d
    )
    raw_location = hosted.get("user_location")
    location: dict[str, Any] = raw_location if isinstance(raw_location, dict) else {}
    country = location.get("country")
    return WebSearchRequest(
        function=search_function_name(tools),
        context_size=hosted.get("search_context_size"),
        domains=domains,
        country=country if isinstance(country, str) else None,
        live=hosted.get("external_web_access") is not False,
        forced=isinstance(tool_choice, dict) and tool_choice.get("type") in HOSTED_TYPES,
        sources=SOURCES_INCLUDE in include,
    )


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
