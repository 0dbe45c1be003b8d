"""The hosted ``web_search`` tool on a chat backend: crossfeed runs the searches inside the Response.

A request with ``{"type": "web_search"}`` (or ``web_search_preview``) and a configured
``[web_search]`` backend gets one more function offered to the backend (``web_search``, or
``crossfeed_web_search`` when the client has a function of that name: web_search_items.py). A leg whose model calls it does not
end the Response: each call becomes a ``web_search_call`` item (``in_progress``, ``searching``,
then ``completed``, or ``failed`` with no event of its own), the searches run concurrently, their
results go back to the backend as the tool results, and the next leg continues the same Response
(its numbering, its output, its usage summed). The message that follows cites the results
(translators/citations.py). Bounds: ``max_searches`` (and the request's ``max_tool_calls``): once
spent, further calls are not run (the model is told so) and one last leg with ``tool_choice:
"none"`` must answer; a model that searches even then, or a Response that passes the upstream's
total timeout between legs, ends ``incomplete`` with ``max_messages`` (the API's reason for a
response that stopped at its bound of turns).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog
from aiohttp import web

from translators.chat_to_responses import ChatToResponsesStream, LegDriver
from translators.response_bodies import feed_completion
from translators.responses_request import MappedRequest
from translators.web_search_items import HOSTED_TYPES, search_function_name

from .config import Upstream
from .exchange import SinkOpener, Summary, open_leg, reasoning_sealer, stream_turn
from .keys import CLOCK, CONFIG, ENV, IDS, MAX_NONSTREAM_BODY, SESSION
from .responses_api import schedule_save
from .sinks import Sink
from .upstream import read_json
from .web_search import Result, SearchFailed, result_count, results_text, search

log = structlog.get_logger("crossfeed")

SOURCES_INCLUDE = "web_search_call.action.sources"


def _description(live: bool) -> str:
    return ("Search the web. Returns numbered results, each with a title, its URL and a snippet. Cite what you "
            "use as a markdown link to the result's URL, [title](url), or by its number, like [1]. "
            + ("" if live else "Results come from a search index; pages cannot be opened."))


@dataclass(slots=True)
class SearchPlan:
    """What one Response may search, and what it has searched so far."""

    fn: str
    count: int
    domains: tuple[str, ...]
    country: str | None
    sources: bool
    budget: int
    forced: bool
    tool: dict[str, Any]
    used: int = 0
    final: bool = False  # the searches are spent: this leg must answer
    numbered: list[tuple[str, str]] = field(default_factory=list)  # every result so far, [n] = numbered[n-1]
    results: dict[str, str] = field(default_factory=dict)  # call_id -> the text the model read


def search_plan(request: web.Request, body: dict[str, Any], mapped: MappedRequest) -> SearchPlan | None:
    """The plan of a request that asks for hosted search on a crossfeed with a search backend."""
    cfg = request.app[CONFIG].web_search
    tools = body.get("tools")
    hosted = next((t for t in tools if isinstance(t, dict) and t.get("type") in HOSTED_TYPES), None) \
        if cfg.backend and isinstance(tools, list) else None
    if hosted is None or mapped.compact:
        return None
    fn = search_function_name(tools)
    filters = hosted.get("filters") if isinstance(hosted.get("filters"), dict) else {}
    domains = tuple(str(d).lower().removeprefix("https://").removeprefix("http://").strip("/")
                    for d in (filters.get("allowed_domains") or ()) if isinstance(d, str) and d)
    location = hosted.get("user_location") if isinstance(hosted.get("user_location"), dict) else {}
    country = location.get("country") if isinstance(location.get("country"), str) else None
    limit = body.get("max_tool_calls")
    budget = min(cfg.max_searches, limit) if isinstance(limit, int) and not isinstance(limit, bool) else cfg.max_searches
    choice = body.get("tool_choice")
    include = body.get("include") if isinstance(body.get("include"), list) else []
    live = hosted.get("external_web_access") is not False
    tool = {"type": "function", "function": {"name": fn, "description": _description(live), "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "description": "what to search for"}},
        "required": ["query"]}}}
    return SearchPlan(fn=fn, count=result_count(cfg, hosted.get("search_context_size")), domains=domains,
                      country=country, sources=SOURCES_INCLUDE in include, budget=budget, tool=tool,
                      forced=isinstance(choice, dict) and choice.get("type") in HOSTED_TYPES)


def first_body(plan: MappedRequest, sp: SearchPlan) -> dict[str, Any]:
    """The first leg's chat body: the search function offered (forced when ``tool_choice`` names it)."""
    chat = {**plan.chat, "tools": [*(plan.chat.get("tools") or ()), sp.tool]}
    if sp.forced:
        chat["tool_choice"] = {"type": "function", "function": {"name": sp.fn}}
    elif chat.get("tool_choice") is None and plan.chat.get("tools") is None:
        chat.pop("tool_choice", None)
    return chat


class SearchLeg(LegDriver):
    """One leg of a searching Response, as the relay drives it: the forward machine, except that
    a leg whose model called the search function (and nothing for the client) leaves the
    Response open for the exchange to search and go on."""

    def __init__(self, main: ChatToResponsesStream, sp: SearchPlan) -> None:
        super().__init__(main)
        self.sp = sp
        self.feed = main.feed  # the per-chunk path goes straight to the machine
        self.feed_frame = main.feed_frame
        self.fail = main.fail
        self.start = main.start

    def finish(self, *, clean: bool = True) -> list[Any]:
        main = self.main
        out = main.end_leg(clean=clean)
        if main.done:
            return out
        leg = main.leg
        assert leg is not None
        if not leg.hosted or leg.calls:
            return out + main.end_response()  # an answer, or calls the client runs
        if self.sp.final:  # told the searches were spent, and searching again
            return out + main.end_response(incomplete="max_messages")
        return out


def _query(call: dict[str, str]) -> str | None:
    """The query a search call asks for, or None when its arguments do not say."""
    try:
        args = orjson.loads(call["arguments"] or "{}")
    except orjson.JSONDecodeError:
        return None
    query = args.get("query") if isinstance(args, dict) else None
    return query.strip()[:500] if isinstance(query, str) and query.strip() else None


async def _run(request: web.Request, sp: SearchPlan, query: str | None) -> list[Result] | str:
    """The results, or why there are none."""
    if query is None:
        return 'the search call needs its arguments as {"query": "..."}'
    app = request.app
    try:
        return await search(app[SESSION], app[CONFIG].web_search, app[ENV], query, count=sp.count,
                            domains=sp.domains, country=sp.country)
    except SearchFailed as exc:
        log.warning("web_search.failed", backend=app[CONFIG].web_search.backend, error=exc.message)
        return exc.message


async def search_round(request: web.Request, main: ChatToResponsesStream, sp: SearchPlan, sink: Sink | None) -> None:
    """The searches one leg asked for, as ``web_search_call`` items between the legs."""
    calls = main.leg.hosted if main.leg else []
    room = max(0, sp.budget - sp.used)
    allowed, refused = calls[:room], calls[room:]
    sp.used += len(allowed)
    queries = [_query(c) for c in allowed]
    opened = []
    out: list[Any] = []
    for query in queries:
        item_id = request.app[IDS].new("ws_")
        events, index = main.begin_item({"id": item_id, "type": "web_search_call", "status": "in_progress",
                                         "action": {"type": "search", "query": query or ""}},
                                        then="response.web_search_call.in_progress")
        out += events + main.item_event("response.web_search_call.searching", index, item_id)
        opened.append((item_id, index))
    await _write(sink, out)
    ran = await asyncio.gather(*(_run(request, sp, q) for q in queries))
    out = []
    for call, (item_id, index), query, found in zip(allowed, opened, queries, ran):
        action: dict[str, Any] = {"type": "search", "query": query or ""}
        if isinstance(found, str):
            sp.results[call["call_id"]] = f"The search failed: {found}."
            out += main.finish_item(index, {"id": item_id, "type": "web_search_call", "status": "failed",
                                            "action": action})
            continue
        start = len(sp.numbered)
        sp.numbered += [(r.url, r.title) for r in found]
        sp.results[call["call_id"]] = results_text(action["query"], found, start=start)
        if sp.sources:
            action["sources"] = [{"type": "url", "url": r.url} for r in found]
        out += main.item_event("response.web_search_call.completed", index, item_id)
        out += main.finish_item(index, {"id": item_id, "type": "web_search_call", "status": "completed",
                                        "action": action})
    for call in refused:
        sp.results[call["call_id"]] = ("Not searched: this response has used all the searches it may make. "
                                       "Answer with what you have.")
    main.cite(sp.numbered)
    await _write(sink, out)


async def _write(sink: Sink | None, events: list[Any]) -> None:
    if sink is not None and events:
        await sink.write(sink.render(events))  # type: ignore[arg-type]


def next_body(body: dict[str, Any], main: ChatToResponsesStream, sp: SearchPlan, leg_start: int,
              reasoning_field: str) -> dict[str, Any]:
    """The chat body of the leg after a search round: the leg's assistant turn (its text,
    reasoning and search calls), the results as tool messages; the function no longer forced,
    and once the searches are spent, ``tool_choice: "none"`` for a last leg that must answer."""
    leg = main.leg
    assert leg is not None
    text, reasoning = [], []
    for item in main.output_since(leg_start):
        if item.get("type") == "message":
            text += [p.get("text", "") for p in item.get("content") or () if p.get("type") == "output_text"]
        elif item.get("type") == "reasoning":
            reasoning += [p.get("text", "") for p in item.get("content") or () if isinstance(p, dict)]
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None, "tool_calls": [
        {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in leg.hosted]}
    if reasoning:
        turn[reasoning_field] = "".join(reasoning)
    messages = [*body["messages"], turn,
                *({"role": "tool", "tool_call_id": c["call_id"], "content": sp.results.get(c["call_id"], "")}
                  for c in leg.hosted)]
    out = {**body, "messages": messages}
    if sp.forced:
        out["tool_choice"] = "auto"
    if sp.used >= sp.budget:
        out["tool_choice"] = "none"
        sp.final = True
    return out


def _machine(request: web.Request, body: dict[str, Any], up: Upstream, plan: MappedRequest, sp: SearchPlan,
             framing: Any = False) -> SearchLeg:
    app = request.app
    tools = dataclasses.replace(plan.tools, hosted=frozenset({sp.fn}))
    main = ChatToResponsesStream(body, ids=app[IDS], now=app[CLOCK], tools=tools,
                                 seal_reasoning=reasoning_sealer(request, body), think_tags=up.think_tags, wire=framing)
    return SearchLeg(main, sp)


async def searching_turn(request: web.Request, body: dict[str, Any], up: Upstream, open_sink: SinkOpener,
                         plan: MappedRequest, sp: SearchPlan, history: list[dict[str, Any]] | None, *,
                         summary: Summary) -> dict[str, Any] | None:
    """Streamed (SSE or WebSocket): legs and search rounds until the model answers."""
    deadline = time.monotonic() + up.timeouts.total
    chat = first_body(plan, sp)
    state = {"body": chat, "start": 0}

    async def then(leg: Any, sink: Sink) -> tuple[dict[str, Any], Any] | None:
        main = leg.main
        if main.done:
            return None
        await search_round(request, main, sp, sink)
        if time.monotonic() > deadline:
            await _write(sink, main.end_response(incomplete="max_messages"))
            return None
        state["body"] = next_body(state["body"], main, sp, state["start"], up.mapping.reasoning_field)
        main.next_leg()
        state["start"] = main.output_count
        return state["body"], leg

    ran = await stream_turn(request, up, "/chat/completions", chat,
                            lambda framing: _machine(request, body, up, plan, sp, framing), open_sink, summary,
                            then=then)
    if ran is None:
        return None
    final = ran[0].final_response
    schedule_save(request.app, body, final, history, request.app[IDS])
    summary.update(terminal=final.get("status") if final else ran[1].ending, searches=sp.used)
    return final  # type: ignore[no-any-return]


async def search_now(request: web.Request, body: dict[str, Any], up: Upstream, plan: MappedRequest,
                     sp: SearchPlan, history: list[dict[str, Any]] | None, *, summary: Summary) -> dict[str, Any]:
    """Not streamed: the same legs, each a whole completion."""
    deadline = time.monotonic() + up.timeouts.total
    leg = _machine(request, body, up, plan, sp)
    main = leg.main
    main.start()
    chat = {k: v for k, v in first_body(plan, sp).items() if k != "stream_options"}
    start = 0
    while True:
        upstream = await open_leg(request, up, "/chat/completions", {**chat, "stream": False}, summary)
        feed_completion(leg, await read_json(upstream, up, MAX_NONSTREAM_BODY))  # type: ignore[arg-type]
        if main.done:
            break
        await search_round(request, main, sp, None)
        if time.monotonic() > deadline:
            main.end_response(incomplete="max_messages")
            break
        chat = next_body(chat, main, sp, start, up.mapping.reasoning_field)
        main.next_leg()
        start = main.output_count
    final = main.final_response
    assert final is not None
    schedule_save(request.app, body, final, history, request.app[IDS])
    summary.update(searches=sp.used)
    return final
