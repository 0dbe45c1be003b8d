"""The create decision: which plan a Responses create on a chat upstream follows (both transports).

``respond`` is called by the HTTP handler and by the WebSocket connection alike: it resolves the
conversation before the input (history), maps the request, and picks the plan:

input ending with compaction_trigger         -> compaction.compaction_turn / compact_now
context_management over its threshold        -> compaction.compacting_turn / compact_now
hosted tools crossfeed runs (tool search, web search, images, MCP) -> tool_loop.hosted_turn / hosted_now
anything else                                -> exchange.forward_turn / one completion
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from crossfeed.proxy.runtime.turn_trace import inspect_whole
from crossfeed.proxy.state.history import load_history, resolve_item_references, save_before_final
from crossfeed.proxy.turns.common import secrets
from crossfeed.proxy.turns.compaction import compact_now, compacting_turn, compaction_turn, over_threshold
from crossfeed.proxy.turns.exchange import (
    SinkOpener,
    answered_body,
    forward_turn,
    map_forward,
    reasoning_sealer,
    whole_leg,
)
from crossfeed.proxy.turns.hosted.images import image_plan
from crossfeed.proxy.turns.hosted.mcp import plan_mcp
from crossfeed.proxy.turns.hosted.search_runner import search_plan
from crossfeed.proxy.turns.hosted.tool_loop import ToolLoop, hosted_now, hosted_turn
from crossfeed.proxy.turns.hosted.tool_search_runner import tool_search_plan
from crossfeed.proxy.turns.steering import stoppable
from crossfeed.proxy.turns.turn import Create, Turn
from crossfeed.translators.forward.body import chat_completion_to_response
from crossfeed.translators.forward.request import with_mcp_results


class Created(NamedTuple):
    """What a create came to: its final Response (None when the client left before the stream
    began) and the conversation before its input (what a WebSocket remembers with it)."""

    response: dict[str, Any] | None
    history: list[dict[str, Any]] | None


async def respond(
    turn: Turn, body: dict[str, Any], open_sink: SinkOpener | None, *, earlier: list[dict[str, Any]] | None = None
) -> Created:
    """A create on a chat upstream, streamed into ``open_sink``'s sink, or (None) answered whole.
    ``earlier``: the conversation the transport already holds (a WebSocket's remembered response,
    which ``previous_response_id`` names), else the store's is loaded."""
    history = await conversation(turn, body, earlier)
    create = Create(body, map_forward(turn, body, history), history)
    turn.log.setdefault("stream", open_sink is not None)  # (a WebSocket turn has it from the start)
    if open_sink is None:
        return Created(await forward_now(turn, create), history)
    return Created(await forward_streamed(turn, create, open_sink), history)


async def conversation(
    turn: Turn, body: dict[str, Any], earlier: list[dict[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """The conversation before the body's input: ``earlier`` when the transport holds it (the
    input's item references are resolved all the same), else the stored one (or None)."""
    if earlier is not None:
        await resolve_item_references(turn.app, body)  # (load_history does it on the other path)
        return earlier
    return await load_history(turn.app, body)


async def forward_streamed(turn: Turn, create: Create, open_sink: SinkOpener) -> dict[str, Any] | None:
    """A streamed create; the final Response (None when the client left before the stream)."""
    mapped = create.mapped
    if mapped.compact == "trigger":
        return await compaction_turn(turn, create, open_sink)
    if mapped.threshold is not None and await over_threshold(turn, mapped):
        return await compacting_turn(turn, create, open_sink)
    loop, create = await tool_loop(turn, create)
    if loop is not None:
        return await hosted_turn(turn, create, loop, open_sink)
    stoppable()  # (a WebSocket's steering may end this one at a safe boundary)
    return await forward_turn(turn, create, open_sink)


async def forward_now(turn: Turn, create: Create) -> dict[str, Any]:
    """A create with ``stream`` false: its Response (saved before it is returned)."""
    compacted = await compact_now(turn, create)
    if compacted is not None:
        return compacted
    loop, create = await tool_loop(turn, create)
    if loop is not None:
        return await hosted_now(turn, create, loop)
    body, mapped = create.body, create.mapped
    completion = await whole_leg(turn, "/chat/completions", mapped.chat)
    result = chat_completion_to_response(
        completion,
        answered_body(turn, body),
        ids=turn.ids,
        now=turn.clock,
        tools=mapped.tools,
        seal_reasoning=reasoning_sealer(turn, mapped),
        profile=turn.upstream.profile,
    )
    await save_before_final(turn.app, body, result, create.history, turn.ids)
    backend = turn.upstream
    inspect_whole(
        turn.app,
        turn.headers,
        backend,
        "/chat/completions",
        mapped.chat,
        body,
        completion,
        result,
        turn.log.get("ttfb", 0.0),
        secrets(turn, backend),
    )
    return result


async def tool_loop(turn: Turn, create: Create) -> tuple[ToolLoop | None, Create]:
    """The hosted tools a create asks for that crossfeed runs (tool search over deferred tools,
    web search, images, remote MCP), if any;
    and the create, with what came of the MCP approvals this input answers (the calls were made)
    in its chat request. What the request asks is the mapping's (``MappedRequest.hosted``)."""
    mapped = create.mapped
    if mapped.compact or mapped.hosted is None:  # no hosted tool, no MCP approval answered
        return None, create
    runners: list[Any] = [
        r for r in (tool_search_plan(mapped), search_plan(turn, mapped), image_plan(turn, mapped)) if r is not None
    ]
    mcp, results = await plan_mcp(turn, mapped.hosted)
    if results is not None:
        create = dataclasses.replace(create, mapped=with_mcp_results(mapped, results))
    if mcp is not None:
        runners.append(mcp)
    if not runners:
        return None, create
    return ToolLoop(runners, mapped.max_tool_calls), create
