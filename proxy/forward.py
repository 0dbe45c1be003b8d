"""Which plan a Responses create on a chat upstream follows (both transports).

  input ending with compaction_trigger         -> compaction.compaction_turn / compact_now
  context_management over its threshold        -> compaction.compacting_turn / compact_now
  a hosted web_search tool, [web_search] set   -> searching.searching_turn / search_now
  anything else                                -> exchange.forward_turn / one completion
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from translators.responses_request import MappedRequest

from .compaction import compact_now, compacting_turn, compaction_turn, over_threshold
from .config import Upstream
from .exchange import SinkOpener, Summary, forward_turn
from .searching import search_now, search_plan, searching_turn


async def forward_streamed(request: web.Request, body: dict[str, Any], up: Upstream, open_sink: SinkOpener,
                           plan: MappedRequest, history: list[dict[str, Any]] | None, *,
                           summary: Summary) -> dict[str, Any] | None:
    """A streamed create; the final Response (None when the client left before the stream)."""
    if plan.compact == "trigger":
        return await compaction_turn(request, body, up, open_sink, plan, summary=summary)
    if await over_threshold(request, up, plan):
        return await compacting_turn(request, body, up, open_sink, plan, history, summary=summary)
    sp = search_plan(request, body, plan)
    if sp is not None:
        return await searching_turn(request, body, up, open_sink, plan, sp, history, summary=summary)
    return await forward_turn(request, body, up, open_sink, history=history, summary=summary, mapped=plan)


async def forward_now(request: web.Request, body: dict[str, Any], up: Upstream, plan: MappedRequest,
                      history: list[dict[str, Any]] | None, *, summary: Summary) -> dict[str, Any] | None:
    """A create with ``stream`` false that is not one plain completion: its Response, else None."""
    compacted = await compact_now(request, body, up, plan, history, summary=summary)
    if compacted is not None:
        return compacted
    sp = search_plan(request, body, plan)
    if sp is not None:
        return await search_now(request, body, up, plan, sp, history, summary=summary)
    return None
