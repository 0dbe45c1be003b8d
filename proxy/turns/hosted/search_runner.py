"""The hosted ``web_search`` tool on a chat backend: a runner of the tool loop (proxy/turns/hosted/tool_loop.py).

A request with ``{"type": "web_search"}`` (or ``web_search_preview``) and a configured
``[web_search]`` backend gets one more function offered to the backend (``web_search``, or
``crossfeed_web_search`` when the client has a function of that name: web_search_items.py).
Each call to it becomes a ``web_search_call`` item (``in_progress``, ``searching``, then
``completed``, or ``failed`` with no event of its own); the searches of one round run
concurrently and their results go back to the backend as the tool results. The message that
follows cites the results (translators/forward/citations.py): numbers run on across the searches of one
Response, so ``[n]`` always names one result. ``max_searches`` is this runner's budget.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from crossfeed.proxy.keys import ENV
from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.hosted.search_backends import Result, SearchFailed, result_count, results_text, search
from crossfeed.proxy.turns.hosted.tool_loop import write
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest

log = structlog.get_logger("crossfeed")


def _description(live: bool) -> str:
    return (
        "Search the web. Returns numbered results, each with a title, its URL and a snippet. Cite what you "
        "use as a markdown link to the result's URL, [title](url), or by its number, like [1]. "
        + ("" if live else "Results come from a search index; pages cannot be opened.")
    )


@dataclass(slots=True)
class SearchPlan:
    """What one Response may search, and what it has searched so far (a ``tool_loop.Runner``)."""

    fn: str
    count: int
    domains: tuple[str, ...]
    country: str | None
    sources: bool
    budget: int
    forced: str | None
    tool: dict[str, Any]
    used: int = 0
    stop: bool = False
    numbered: list[tuple[str, str]] = field(default_factory=list)  # every result so far, [n] = numbered[n-1]

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.fn})

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [self.tool]

    def prelude(self, main: ChatToResponsesStream) -> list[Any]:
        return []

    async def run(
        self, turn: Turn, main: ChatToResponsesStream, calls: list[dict[str, str]], sink: Sink | None
    ) -> dict[str, str]:
        return await _search_calls(turn, main, self, calls, sink)


def search_plan(turn: Turn, mapped: MappedRequest) -> SearchPlan | None:
    """The plan of a request that asks for hosted search on a crossfeed with a search backend
    (what it asks: the request mapping's ``HostedTools.search``)."""
    cfg = turn.config.web_search
    asked = mapped.hosted.search if mapped.hosted is not None else None
    if not cfg.backend or asked is None or mapped.compact:
        return None
    tool = {
        "type": "function",
        "function": {
            "name": asked.function,
            "description": _description(asked.live),
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to search for"}},
                "required": ["query"],
            },
        },
    }
    return SearchPlan(
        fn=asked.function,
        count=result_count(cfg, asked.context_size),
        domains=asked.domains,
        country=asked.country,
        sources=asked.sources,
        budget=cfg.max_searches,
        tool=tool,
        forced=asked.function if asked.forced else None,
    )


def _query(call: dict[str, str]) -> str | None:
    """The query a search call asks for, or None when its arguments do not say."""
    try:
        args = orjson.loads(call["arguments"] or "{}")
    except orjson.JSONDecodeError:
        return None
    query = args.get("query") if isinstance(args, dict) else None
    return query.strip()[:500] if isinstance(query, str) and query.strip() else None


# A web search's span (proxy/runtime/tracing.py): a tool crossfeed runs itself.
_SPAN = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search", "gen_ai.tool.type": "extension"}


async def _run(turn: Turn, sp: SearchPlan, query: str | None) -> list[Result] | str:
    """The results, or why there are none."""
    if query is None:
        return 'the search call needs its arguments as {"query": "..."}'
    app = turn.app
    backend = turn.config.web_search.backend
    with tracing.span("execute_tool web_search", _SPAN | {"crossfeed.search.backend": backend or ""}) as span:
        try:
            found = await search(
                turn.session,
                turn.config.web_search,
                app[ENV],
                query,
                count=sp.count,
                domains=sp.domains,
                country=sp.country,
            )
        except SearchFailed as exc:
            log.warning("web_search.failed", backend=backend, error=exc.message)
            span.fail(exc.message)
            return exc.message
        span.set({"crossfeed.search.results": len(found)})
        return found


async def _search_calls(
    turn: Turn, main: ChatToResponsesStream, sp: SearchPlan, calls: list[dict[str, str]], sink: Sink | None
) -> dict[str, str]:
    """The searches of one round, as ``web_search_call`` items between the legs."""
    results: dict[str, str] = {}
    queries = [_query(c) for c in calls]
    opened = []
    out: list[Any] = []
    for query in queries:
        item_id = turn.ids.new("ws_")
        events, index = main.begin_item(
            {
                "id": item_id,
                "type": "web_search_call",
                "status": "in_progress",
                "action": {"type": "search", "query": query or ""},
            },
            then="response.web_search_call.in_progress",
        )
        out += events + main.item_event("response.web_search_call.searching", index, item_id)
        opened.append((item_id, index))
    await write(sink, out)
    ran = await asyncio.gather(*(_run(turn, sp, q) for q in queries))
    out = []
    for call, (item_id, index), query, found in zip(calls, opened, queries, ran, strict=True):
        action: dict[str, Any] = {"type": "search", "query": query or ""}
        if isinstance(found, str):
            results[call["call_id"]] = f"The search failed: {found}."
            out += main.finish_item(
                index, {"id": item_id, "type": "web_search_call", "status": "failed", "action": action}
            )
            continue
        start = len(sp.numbered)
        sp.numbered += [(r.url, r.title) for r in found]
        results[call["call_id"]] = results_text(action["query"], found, start=start)
        if sp.sources:
            action["sources"] = [{"type": "url", "url": r.url} for r in found]
        out += main.item_event("response.web_search_call.completed", index, item_id)
        out += main.finish_item(
            index, {"id": item_id, "type": "web_search_call", "status": "completed", "action": action}
        )
    main.cite(sp.numbered)
    await write(sink, out)
    return results
