"""Deferred tools and ``tool_search`` on a chat backend: a runner of the tool loop
(proxy/turns/hosted/tool_loop.py).

A request whose tools include ``defer_loading: true`` ones has them kept out of the backend's
``tools`` by the request mapping, which offers the search function in their place (its
description is their catalogue: translators/forward/tool_search.py). Each call to it is answered
here: the matching tools are revealed (they join the tools of every later leg of the Response,
in the request's order, before the search function), the backend gets their names as the tool
result, and the client sees a ``tool_search_call`` item and a ``tool_search_output`` item holding
the definitions (``execution: "server"``). A later request that replays those items (Codex does;
so does a stored history) has the tools revealed from its first leg (the mapping reads them).
Searching is local and instant; ``BUDGET`` bounds the searches of one Response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.hosted.tool_loop import write
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.forward import tool_search as ts
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest

BUDGET = 16  # tool searches per Response


@dataclass(slots=True)
class ToolSearchRunner:
    """The searches of one Response, and what they revealed (a ``tool_loop.Runner``)."""

    catalog: ts.ToolCatalog
    revealed: set[str] = field(default_factory=set)
    budget: int = BUDGET
    used: int = 0
    stop: bool = False
    forced: str | None = None

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.catalog.function})

    @property
    def tools(self) -> list[dict[str, Any]]:
        return []  # the search function is in the request's tools already, in its place

    def leg_tools(self) -> list[dict[str, Any]]:
        """The request's part of the next leg's tools: the revealed tools included."""
        return self.catalog.tools(self.revealed)

    def prelude(self, main: ChatToResponsesStream) -> list[Any]:
        return []

    async def run(
        self, turn: Turn, main: ChatToResponsesStream, calls: list[dict[str, str]], sink: Sink | None
    ) -> dict[str, str]:
        results: dict[str, str] = {}
        out: list[Any] = []
        for call in calls:
            args, query, limit = ts.arguments(call["arguments"])
            found = self.catalog.search(query, limit) if query else []
            self.revealed |= {d.name for d in found}
            results[call["call_id"]] = (
                ts.result_text(query, found) if query else 'The search needs its arguments as {"query": "..."}.'
            )
            common = {"call_id": call["call_id"], "execution": "server"}
            searched = {"id": turn.ids.new("tsc_"), "type": "tool_search_call", **common, "arguments": args}
            events, index = main.begin_item({**searched, "status": "in_progress"})
            out += events + main.finish_item(index, {**searched, "status": "completed"})
            loaded = {"id": turn.ids.new("tso_"), "type": "tool_search_output", **common}
            events, index = main.begin_item({**loaded, "status": "in_progress", "tools": []})
            out += events + main.finish_item(index, {**loaded, "status": "completed", "tools": ts.output_tools(found)})
        await write(sink, out)
        return results


def tool_search_plan(mapped: MappedRequest) -> ToolSearchRunner | None:
    """The runner of a request with deferred tools (the mapping's ``HostedTools.catalog``)."""
    catalog = mapped.hosted.catalog if mapped.hosted is not None else None
    if catalog is None or mapped.compact:
        return None
    return ToolSearchRunner(catalog, set(catalog.revealed))
