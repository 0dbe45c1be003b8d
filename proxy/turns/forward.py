"""Which plan a Responses create on a chat upstream follows (both transports).

input ending with compaction_trigger         -> compaction.compaction_turn / compact_now
context_management over its threshold        -> compaction.compacting_turn / compact_now
hosted tools crossfeed runs (web search, MCP) -> tool_loop.hosted_turn / hosted_now
anything else                                -> exchange.forward_turn / one completion
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.turns.compaction import compact_now, compacting_turn, compaction_turn, over_threshold
from crossfeed.proxy.turns.exchange import SinkOpener, Summary, forward_turn, map_forward
from crossfeed.proxy.turns.hosted.mcp import plan_mcp
from crossfeed.proxy.turns.hosted.search_runner import search_plan
from crossfeed.proxy.turns.hosted.tool_loop import ToolLoop, hosted_now, hosted_turn
from crossfeed.translators.forward.mcp_items import answered
from crossfeed.translators.forward.request import MappedRequest


async def forward_streamed(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    open_sink: SinkOpener,
    plan: MappedRequest,
    history: list[dict[str, Any]] | None,
    *,
    summary: Summary,
) -> dict[str, Any] | None:
    """A streamed create; the final Response (None when the client left before the stream)."""
    if plan.compact == "trigger":
        return await compaction_turn(request, body, up, open_sink, plan, summary=summary)
    if plan.threshold is not None and await over_threshold(request, up, plan):
        return await compacting_turn(request, body, up, open_sink, plan, history, summary=summary)
    loop, plan = await tool_loop(request, body, up, plan, history)
    if loop is not None:
        return await hosted_turn(request, body, up, open_sink, plan, loop, history, summary=summary)
    return await forward_turn(request, body, up, open_sink, history=history, summary=summary, mapped=plan)


async def forward_now(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    plan: MappedRequest,
    history: list[dict[str, Any]] | None,
    *,
    summary: Summary,
) -> dict[str, Any] | None:
    """A create with ``stream`` false that is not one plain completion: its Response, else None."""
    compacted = await compact_now(request, body, up, plan, history, summary=summary)
    if compacted is not None:
        return compacted
    loop, plan = await tool_loop(request, body, up, plan, history)
    if loop is not None:
        return await hosted_now(request, body, up, plan, loop, history, summary=summary)
    return None


async def tool_loop(
    request: web.Request, body: dict[str, Any], up: Upstream, plan: MappedRequest, history: list[dict[str, Any]] | None
) -> tuple[ToolLoop | None, MappedRequest]:
    """The hosted tools a create asks for that crossfeed runs (web search, remote MCP), if any;
    and the plan, mapped again when this input answers MCP approvals (the calls were made)."""
    if plan.compact:
        return None, plan
    if not body.get("tools"):  # no hosted tool to run; only an MCP approval answered here remaps the input
        raw_input = body.get("input")
        if not isinstance(raw_input, list) or not answered(raw_input):
            return None, plan
    runners: list[Any] = [r for r in (search_plan(request, body, plan),) if r is not None]
    mcp, results = await plan_mcp(request, body, history)
    if results is not None:
        plan = map_forward(request, body, up, history, mcp_results=results)
    if mcp is not None:
        runners.append(mcp)
    if not runners:
        return None, plan
    limit = body.get("max_tool_calls")
    return ToolLoop(runners, limit if isinstance(limit, int) and not isinstance(limit, bool) else None), plan
