"""Steering: user input a WebSocket client queued for the response in flight (``response.steer``).

The socket (proxy/http/ws_streams.py) accepts the input at once and queues it on the response's
``Steering``, which it hands to the turn's task in ``STEERING``. A plan that can take new input
in the middle of a Response takes it here: the hosted tool loop (proxy/turns/hosted/tool_loop.py)
adds it, as user messages after the tool results, to the next leg (``steered``). The items join
the Response's input (``body["input"]``), so the store and the socket remember them. A plain
streamed answer (one leg, ``stoppable``) may instead be ended by the socket at a safe boundary,
``response.incomplete`` with reason ``steered`` (proxy/streaming/relay.py ``OpenStream.steer``).
Whatever is still queued when the Response ends is the socket's to settle (a successor response,
pending for the client's tool outputs, or returned in ``response.steer.failed``): never dropped.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from crossfeed.proxy.turns.exchange import map_forward
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.responses.input_items import normalize_input


@dataclass(slots=True)
class Steer:
    id: str
    target: str  # the response it steers (previous_response_id)
    input: Any  # as the client sent it: what response.steer.failed returns
    items: list[dict[str, Any]]  # the input as user message items


@dataclass(slots=True)
class Steering:
    queued: list[Steer] = field(default_factory=list)
    applied: list[Steer] = field(default_factory=list)
    stoppable: bool = False  # the plan is a plain answer: steering may end it at a safe boundary

    def take(self) -> list[Steer]:
        taken, self.queued = self.queued, []
        self.applied += taken
        return taken


STEERING: ContextVar[Steering | None] = ContextVar("crossfeed_steering", default=None)


def stoppable() -> None:
    """The turn's plan is a plain streamed answer (no hosted loop, no compaction): steering
    input may end it at a safe boundary, its successor taking the input."""
    steering = STEERING.get()
    if steering is not None:
        steering.stoppable = True


def steered(turn: Turn, body: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    """The next leg's chat body with the steering input queued so far, as user messages after
    the last ones; the items are added to the Response's input (``body``)."""
    steering = STEERING.get()
    if steering is None or not steering.queued:
        return chat
    items = [item for steer in steering.take() for item in steer.items]
    messages = map_forward(turn, {"model": body.get("model"), "input": items}, None).chat["messages"]
    body["input"] = [*normalize_input(body.get("input"), turn.ids), *items]
    turn.log["steered"] = turn.log.get("steered", 0) + len(items)
    return {**chat, "messages": [*chat["messages"], *messages]}
