"""Tools crossfeed runs inside a Response: the loop of backend calls (legs) and tool rounds.

A *runner* offers the backend functions whose calls crossfeed makes itself (web search:
proxy/turns/hosted/search_runner.py; remote MCP tools: proxy/turns/hosted/mcp.py). The forward machine streams nothing
for a call to one of them (``ToolContext.hosted``); when a leg ends with such calls and none for
the client, the Response stays open: each runner makes its calls (emitting its own items:
``web_search_call``, ``mcp_call``), the results go back to the backend as tool messages, and
the next leg continues the same Response (its numbering, its output, its usage summed).

Bounds: each runner's budget (``max_searches``, ``[mcp] max_calls``) and the request's
``max_tool_calls`` across all of them. Once spent, further calls are not made (the model is
told) and one last leg with ``tool_choice: "none"`` must answer; a model that calls a hosted tool
even then, or a Response still going past the upstream's total timeout, ends ``incomplete``
with ``max_messages``. A runner may also stop the Response (``stop``: an MCP call that waits for
the client's approval): it then completes after that round. So does a leg that also called the
client's own functions: the hosted calls are made, and the client gets its calls to run.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from crossfeed.proxy.state.history import final_saver, save_before_final
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.exchange import SinkOpener, ended, forward_machine, stream_turn, whole_leg
from crossfeed.proxy.turns.hosted.control import Budget, LegEnd, Step, next_step
from crossfeed.proxy.turns.steering import steered
from crossfeed.proxy.turns.turn import Create, Turn
from crossfeed.translators.forward.body import feed_completion
from crossfeed.translators.forward.machine import ChatToResponsesStream, LegDriver
from crossfeed.translators.forward.mcp_items import redacted
from crossfeed.translators.forward.request import MappedRequest
from crossfeed.translators.sse import Framing

REFUSED = "Not run: this response has used all the tool calls it may make. Answer with what you have."


class Runner(Protocol):
    names: frozenset[str]  # the chat function names whose calls it makes
    tools: list[dict[str, Any]]  # the chat tools it offers
    forced: str | None  # a function the first leg must call (tool_choice named the hosted tool)
    budget: int
    used: int
    stop: bool  # a call waits for the client: the Response ends after this round

    def prelude(self, main: ChatToResponsesStream) -> list[Any]:
        """Items at the start of the Response (after ``response.in_progress``)."""
        ...

    async def run(
        self, turn: Turn, main: ChatToResponsesStream, calls: list[dict[str, str]], sink: Sink | None
    ) -> dict[str, str]:
        """Make ``calls`` (their items streamed into ``sink``); call_id -> the tool result text."""
        ...


@dataclass(slots=True)
class ToolLoop:
    runners: list[Runner]
    limit: int | None  # the request's max_tool_calls
    used: int = 0
    final: bool = False  # spent: this leg must answer
    results: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> frozenset[str]:
        return frozenset().union(*(r.names for r in self.runners))

    def spent(self) -> bool:
        return all(r.used >= r.budget for r in self.runners) or (self.limit is not None and self.used >= self.limit)

    async def round(self, turn: Turn, main: ChatToResponsesStream, sink: Sink | None) -> bool:
        """Make the calls the last leg asked for; False when a runner stopped the Response."""
        calls = main.leg.hosted if main.leg else []
        plan: list[tuple[Runner, list[dict[str, str]]]] = []
        for call in calls:
            runner = next(r for r in self.runners if call["name"] in r.names)
            mine = next((cs for r, cs in plan if r is runner), None)
            if mine is None:
                mine = []
                plan.append((runner, mine))
            if runner.used < runner.budget and (self.limit is None or self.used < self.limit):
                runner.used += 1
                self.used += 1
                mine.append(call)
            else:
                self.results[call["call_id"]] = REFUSED
        watch = getattr(getattr(sink, "trace", None), "watch", None)  # the inspector's record of the turn
        for runner, allowed in plan:
            if allowed:
                started = time.monotonic()
                results = await runner.run(turn, main, allowed, sink)
                self.results.update(results)
                if watch is not None:
                    watch.tool_run(allowed, results, time.monotonic() - started)
        return not any(r.stop for r in self.runners)

    async def step(self, turn: Turn, main: ChatToResponsesStream, sink: Sink | None, deadline: float) -> Step:
        """Run the round of the leg that just ended, then say what comes next (control.next_step)."""
        stopped = not await self.round(turn, main, sink)
        leg = main.leg
        end = LegEnd(
            hosted=bool(leg and leg.hosted), client=bool(leg and leg.calls), final=self.final, ran=True, stopped=stopped
        )
        return next_step(end, Budget(spent=self.spent(), overdue=time.monotonic() > deadline))


class HostedLeg(LegDriver):
    """One leg of a Response with hosted tools, as the relay drives it: the forward machine, except
    that a leg whose model called hosted tools (and nothing for the client) leaves the Response
    open for the loop's round."""

    def __init__(self, main: ChatToResponsesStream, loop: ToolLoop) -> None:
        super().__init__(main)
        self.loop = loop
        self.feed = main.feed  # the per-chunk path goes straight to the machine
        self.feed_frame = main.feed_frame
        self.feed_run = main.feed_run
        self.fail = main.fail

    def start(self) -> list[Any]:
        out = self.main.start()
        for runner in self.loop.runners:
            out += runner.prelude(self.main)
        return out

    def finish(self, *, clean: bool = True) -> list[Any]:
        main = self.main
        out = main.end_leg(clean=clean)
        if main.done:
            return out
        leg = main.leg
        assert leg is not None
        step = next_step(LegEnd(hosted=bool(leg.hosted), client=bool(leg.calls), final=self.loop.final), Budget())
        if step.go == "end":  # an answer, calls the client runs, or hosted calls once they were spent
            return out + main.end_response(incomplete=step.incomplete)
        return out  # the round runs the hosted calls (then ends when the client has calls to run)


def first_body(plan: MappedRequest, loop: ToolLoop) -> dict[str, Any]:
    """The first leg's chat body: every runner's functions offered (one forced when the
    request's ``tool_choice`` names its hosted tool)."""
    offered = [t for r in loop.runners for t in r.tools]
    chat = {**plan.chat}
    if offered:
        chat["tools"] = [*(plan.chat.get("tools") or ()), *offered]
    forced = next((r.forced for r in loop.runners if r.forced), None)
    if forced:
        chat["tool_choice"] = {"type": "function", "function": {"name": forced}}
    return chat


def next_body(
    body: dict[str, Any], main: ChatToResponsesStream, loop: ToolLoop, leg_start: int, reasoning_field: str, final: bool
) -> dict[str, Any]:
    """The chat body of the leg after a round: the leg's assistant turn (its text, reasoning and
    hosted calls), the results as tool messages; nothing forced any more, and once the calls are
    spent (``final``), ``tool_choice: "none"`` for a last leg that must answer."""
    leg = main.leg
    assert leg is not None
    text, reasoning = [], []
    for item in main.output_since(leg_start):
        if item.get("type") == "message":
            text += [p.get("text", "") for p in item.get("content") or () if p.get("type") == "output_text"]
        elif item.get("type") == "reasoning":
            reasoning += [p.get("text", "") for p in item.get("content") or () if isinstance(p, dict)]
    turn: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(text) or None,
        "tool_calls": [
            {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in leg.hosted
        ],
    }
    if reasoning:
        turn[reasoning_field] = "".join(reasoning)
    messages = [
        *body["messages"],
        turn,
        *(
            {"role": "tool", "tool_call_id": c["call_id"], "content": loop.results.get(c["call_id"], "")}
            for c in leg.hosted
        ),
    ]
    out = {**body, "messages": messages}
    retool = next((r.leg_tools for r in loop.runners if hasattr(r, "leg_tools")), None)
    if retool is not None:  # a tool search revealed tools: they join the request's, in their place
        out["tools"] = [*retool(), *(t for r in loop.runners for t in r.tools)]
    if any(r.forced for r in loop.runners):
        out["tool_choice"] = "auto"
    if final:
        out["tool_choice"] = "none"
        loop.final = True
    return out


def _machine(turn: Turn, create: Create, loop: ToolLoop, framing: Framing | bool = False) -> HostedLeg:
    tools = dataclasses.replace(create.mapped.tools, hosted=loop.names)
    # the echo never carries an MCP server's headers
    main = forward_machine(turn, redacted(create.body), create.mapped, framing, tools)
    return HostedLeg(main, loop)


async def hosted_turn(turn: Turn, create: Create, loop: ToolLoop, open_sink: SinkOpener) -> dict[str, Any] | None:
    """Streamed (SSE or WebSocket): legs and rounds until the model answers."""
    body, plan, history, up = create.body, create.mapped, create.history, turn.upstream
    deadline = time.monotonic() + up.timeouts.total
    state: dict[str, Any] = {"body": first_body(plan, loop), "start": 0}
    save = final_saver(turn.app, body, history)

    async def then(leg: Any, sink: Sink) -> tuple[dict[str, Any], Any] | None:
        main = leg.main
        if main.done:
            return None
        step = await loop.step(turn, main, sink, deadline)
        if step.go == "end":
            events = main.end_response(incomplete=step.incomplete)
            await save(leg)  # saved before the terminal event goes out
            await write(sink, events)
            return None
        chat = next_body(state["body"], main, loop, state["start"], up.profile.reasoning_field, step.final)
        state["body"] = steered(turn, body, chat)  # input a WebSocket client queued meanwhile
        main.next_leg()
        state["start"] = main.output_count
        return state["body"], leg

    ran = await stream_turn(
        turn,
        "/chat/completions",
        state["body"],
        lambda framing: _machine(turn, create, loop, framing),
        open_sink,
        then=then,
        before_end=save,
        client=body,
    )
    final = ended(turn, ran)  # the terminal status and the usage of every leg, on the summary line
    if ran is not None:
        turn.log["hosted_calls"] = loop.used
    return final


async def hosted_now(turn: Turn, create: Create, loop: ToolLoop) -> dict[str, Any]:
    """Not streamed: the same legs, each a whole completion."""
    body, plan, history, up = create.body, create.mapped, create.history, turn.upstream
    deadline = time.monotonic() + up.timeouts.total
    leg = _machine(turn, create, loop)
    main = leg.main
    leg.start()
    chat = {k: v for k, v in first_body(plan, loop).items() if k != "stream_options"}
    start = 0
    while True:
        feed_completion(leg, await whole_leg(turn, "/chat/completions", {**chat, "stream": False}))
        if main.done:
            break
        step = await loop.step(turn, main, None, deadline)
        if step.go == "end":
            main.end_response(incomplete=step.incomplete)
            break
        chat = next_body(chat, main, loop, start, up.profile.reasoning_field, step.final)
        main.next_leg()
        start = main.output_count
    final = main.final_response
    assert final is not None
    await save_before_final(turn.app, body, final, history, turn.ids)
    turn.log["hosted_calls"] = loop.used
    return final


async def write(sink: Sink | None, events: list[Any]) -> None:
    """Events a runner makes between legs, into the open sink (none when not streamed)."""
    if sink is not None and events:
        await sink.write(sink.render(events))
