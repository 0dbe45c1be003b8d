"""The lanes of a WebSocket (``stream_id``), and what a socket says of steering and cancelling.

A ``response.create`` with a ``stream_id`` runs on that lane: lanes run side by side, each one's
creates in order (FIFO), and every frame of a lane's responses carries its ``stream_id`` (the
``LaneSink`` adds it to each rendered frame). The creates without one are the default lane, one
response at a time, exactly as before lanes. Each lane remembers its last response (a
continuation may name any lane's).

Steering (``response.steer``, OpenAI's WebSocket event): accepted at once
(``response.steer.accepted``), queued on the response in flight (proxy/turns/steering.py), and
then, whichever comes first:

  - applied between two legs of a hosted tool loop (the next leg gets it as user messages);
  - a plain streamed answer whose backend stream is at a safe boundary when the steer comes
    (between two text or reasoning deltas, no call open, its finish_reason not read) ends at
    once: the upstream request is closed, the open item closes ``incomplete`` and the response
    ends ``response.incomplete`` with reason ``steered`` (saved and remembered as any other);
    then, as after a completed one, the successor below. A steer that comes while a call's
    arguments stream lets the response run on;
  - after a response that completed (or was steered) with nothing for the client to run: a
    successor response on the same lane, continuing from it (its partial answer too), with the
    queued input (its ``response.created`` is the commit point; a successor that fails before it
    returns the input, ``successor_creation_failed``);
  - after a response that stopped for the client's tool outputs: ``response.steer.pending``
    (``waiting_for_required_input``, the calls' stubs), and the input is prepended to the next
    create on the lane that continues from it;
  - otherwise (the response failed, was cancelled, ended incomplete, or the lane's next create
    continues from something else): ``response.steer.failed`` with the input.

Steering events are numbered per socket (their own ``sequence_number`` from 0), apart from the
responses' numbering. ``response.cancel`` (the Realtime API's client event, by ``response_id``)
ends that response as cancelled (``relay.Cancelled``).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from crossfeed.proxy.keys import IDS
from crossfeed.proxy.streaming.relay import Cancelled, OpenStream
from crossfeed.proxy.streaming.sinks import WebSocketSink
from crossfeed.proxy.turns.steering import Steer, Steering
from crossfeed.translators.responses.input_items import normalize_input
from crossfeed.translators.sse import render_json

MAX_QUEUED_STEERS = 16  # per response
_STEER_KEYS = frozenset({"type", "previous_response_id", "input"})
_PARTS = frozenset({"input_text", "input_image", "input_file"})
# the client-owned outputs a response that stopped waits for: the item type -> its stub
_REQUIRED = {
    "function_call": lambda i: {"type": "function_call_output", "call_id": i.get("call_id"), "name": i.get("name")},
    "custom_tool_call": lambda i: {"type": "custom_tool_call_output", "call_id": i.get("call_id")},
    "mcp_approval_request": lambda i: {"type": "mcp_approval_response", "approval_request_id": i.get("id")},
}


class Remembered:
    __slots__ = ("id", "items", "response", "settings", "routed")

    def __init__(
        self,
        rid: str,
        items: list[dict[str, Any]],
        response: dict[str, Any],
        settings: dict[str, Any] | None,
        routed: dict[str, str] | None = None,
    ) -> None:
        self.id = rid
        self.items = items  # the whole resolved input of that response
        self.response = response
        self.settings = settings  # a primed response's instructions and tools
        self.routed = routed  # on a pool: where its turn went (proxy/state/affinity.py routing)


class LaneSink(WebSocketSink):
    """The frames of one response of a lane: each carries the lane's ``stream_id`` (none on the
    default lane); the response's id is read from its first frame (what a cancel or a steer
    names); ``cancel()`` ends the relay running into it (or the next one, between two legs)."""

    __slots__ = ("suffix", "response_id", "cancelled", "_stream")

    def __init__(self, ws: web.WebSocketResponse, request: web.BaseRequest, stream_id: str | None) -> None:
        self._stream: OpenStream | None = None
        self.cancelled = False
        super().__init__(ws, request)
        self.suffix = None if stream_id is None else b',"stream_id":' + orjson.dumps(stream_id) + b"}"
        self.response_id: str | None = None
        self.render = self._first_render

    @property
    def open_stream(self) -> OpenStream | None:
        return self._stream

    @open_stream.setter
    def open_stream(self, handle: OpenStream | None) -> None:
        self._stream = handle
        if handle is not None and self.cancelled:
            handle.end(Cancelled())

    def cancel(self) -> None:
        self.cancelled = True
        if self._stream is not None:
            self._stream.end(Cancelled())

    def steer(self) -> bool:
        """End the response in flight for steering input, if its stream is at a safe boundary."""
        return self._stream is not None and self._stream.steer()

    def _first_render(self, events: list[Any]) -> list[bytes]:
        docs = render_json(events)
        if self.response_id is not None:  # (a relay keeps the render it started with)
            return self._tag(docs)
        for doc in docs:
            response = orjson.loads(doc).get("response")
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                self.response_id = response["id"]
                self.render = render_json if self.suffix is None else self._tagged
                break
        return docs if self.suffix is None else self._tag(docs)

    def _tagged(self, events: list[Any]) -> list[bytes]:
        return self._tag(render_json(events))

    def _tag(self, docs: list[bytes]) -> list[bytes]:
        suffix = self.suffix
        return [doc[:-1] + suffix for doc in docs] if suffix is not None else docs


class Lane:
    """One ``stream_id`` (None: the default lane): its task, its creates waiting, its last
    response, its response in flight (``sink``, ``steering``), steers pending for tool outputs."""

    __slots__ = ("stream_id", "task", "queue", "last", "sink", "steering", "pending")

    def __init__(self, stream_id: str | None) -> None:
        self.stream_id = stream_id
        self.task: Any = None  # asyncio.Task[None] | None
        # (body, turn number, the steers a successor carries)
        self.queue: deque[tuple[dict[str, Any], int, list[Steer]]] = deque()
        self.last: Remembered | None = None
        self.sink: LaneSink | None = None
        self.steering: Steering | None = None
        self.pending: tuple[str, list[Steer]] | None = None  # (the response waiting, its steers)

    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def in_flight(self, response_id: str) -> bool:
        sink = self.sink
        return self.steering is not None and sink is not None and sink.response_id == response_id


def steer_items(value: Any) -> list[dict[str, Any]] | None:
    """A steer's input as user message items, or None when it is not what steering takes (user
    messages only, each of ``type``/``role``/``content``, parts ``input_text``/``input_image``/``input_file``)."""
    if isinstance(value, str) and value:
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": value}]}]
    if not isinstance(value, list) or not value:
        return None
    items = []
    for item in value:
        if not isinstance(item, dict) or item.get("role") != "user" or item.get("type", "message") != "message":
            return None
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": "input_text", "text": content}]
        if not isinstance(content, list) or not content:
            return None
        if not all(isinstance(p, dict) and p.get("type") in _PARTS for p in content):
            return None
        items.append({"type": "message", "role": "user", "content": content})
    return items


def steer_problem(event: dict[str, Any]) -> tuple[str, str, str] | None:
    """What makes a ``response.steer`` frame unusable at all (param, code, message): answered with
    an error frame, since a ``response.steer.failed`` must name a response and carry an input."""
    extra = sorted(set(event) - _STEER_KEYS)
    if extra:
        message = f"`{extra[0]}` is not allowed in response.steer: it takes only previous_response_id and input"
        return extra[0], "unknown_parameter", message
    if not isinstance(event.get("previous_response_id"), str) or not event["previous_response_id"]:
        message = "response.steer needs `previous_response_id` (a string): the response to steer"
        return "previous_response_id", "missing_required_parameter", message
    value = event.get("input")
    if not (isinstance(value, str) and value) and not (isinstance(value, list) and value):
        message = "response.steer needs `input`: a non-empty string or a non-empty array of input items"
        return "input", "missing_required_parameter", message
    return None


def required_input(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stubs of the client-owned outputs a response stopped for (its calls for the client)."""
    return [_REQUIRED[i["type"]](i) for i in response.get("output") or () if i.get("type") in _REQUIRED]


def steer_record(steer: Steer, *, with_input: bool = False) -> dict[str, Any]:
    record: dict[str, Any] = {"id": steer.id, "previous_response_id": steer.target}
    if with_input:
        record["input"] = returned(steer.input)
    return record


def returned(value: Any) -> Any:
    """A steer's input as ``response.steer.failed`` returns it: as sent, each message's ``type``
    (optional in the event the client sends) filled in."""
    if not isinstance(value, list):
        return value
    return [{"type": "message", **i} if isinstance(i, dict) and "type" not in i else i for i in value]


class StreamsMixin:
    """What a socket (websocket.Connection) does with ``response.steer`` and ``response.cancel``,
    and with the steers still queued when a response ends."""

    app: web.Application
    lanes: dict[str | None, Lane]
    turns: int
    steer_seq: int  # the socket's steering events, numbered from 0 (apart from the responses' numbering)

    if TYPE_CHECKING:

        async def _send(self, frame: dict[str, Any]) -> None: ...
        async def _error(
            self, status: int, message: str, *, code: str, param: str | None = None, stream_id: str | None = None
        ) -> None: ...
        def _enqueue(self, lane: Lane, body: dict[str, Any], steers: list[Steer]) -> None: ...

    def _steer_event(self, lane: Lane | None, kind: str, steer: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """A ``response.steer.*`` event; on a lane's (``stream_id``) when it concerns one of its responses."""
        frame = {"type": f"response.steer.{kind}", "sequence_number": self.steer_seq, **fields, "steer": steer}
        self.steer_seq += 1
        if lane is not None and lane.stream_id is not None:
            frame["stream_id"] = lane.stream_id
        return frame

    def _failed(self, lane: Lane | None, steer: dict[str, Any], code: str, message: str) -> dict[str, Any]:
        error = {"type": "invalid_request_error", "code": code, "message": message}
        return self._steer_event(lane, "failed", steer, error=error)

    async def _cancel(self, event: dict[str, Any]) -> None:
        """``response.cancel``: the response ``response_id`` names (none: the default lane's) ends
        ``cancelled`` and its upstream request is closed."""
        rid = event.get("response_id")
        if rid is not None and not isinstance(rid, str):
            await self._error(400, "`response_id` must be a string", code="invalid_type", param="response_id")
            return
        for lane in self.lanes.values():
            sink = lane.sink
            if lane.steering is None or sink is None or sink.response_id is None:
                continue  # nothing in flight there (or its response.created is not out yet)
            if rid == sink.response_id or (rid is None and lane.stream_id is None):
                sink.cancel()
                return
        named = f"with id {rid!r}" if rid is not None else "without a stream_id"
        await self._error(
            404 if rid is not None else 400,
            f"no response {named} is in progress on this connection (finished, or never started)",
            code="response_not_found",
            param="response_id",
        )

    async def _steer(self, event: dict[str, Any]) -> None:
        """``response.steer``: accepted and queued on the response in flight, or failed."""
        problem = steer_problem(event)
        if problem is not None:
            await self._error(400, problem[2], code=problem[1], param=problem[0])
            return
        target, value = event["previous_response_id"], event["input"]
        asked = {"previous_response_id": target, "input": returned(value)}
        lane = next((la for la in self.lanes.values() if la.in_flight(target)), None)
        if lane is None or lane.steering is None:
            done = next((la for la in self.lanes.values() if la.last is not None and la.last.id == target), None)
            if done is not None:
                why = ("response_already_completed", f"the response {target!r} has ended; send a response.create")
            else:
                why = ("response_not_found", f"no response {target!r} is in progress on this connection")
            await self._send(self._failed(done, asked, *why))
            return
        items = steer_items(value)
        if items is None:
            message = "steering takes only user messages (content: text, image or file parts)"
            await self._send(self._failed(lane, asked, "invalid_input", message))
            return
        if len(lane.steering.queued) >= MAX_QUEUED_STEERS:
            message = f"the response already has {MAX_QUEUED_STEERS} steering inputs queued"
            await self._send(self._failed(lane, asked, "too_many_pending_steers", message))
            return
        steer = Steer(self.app[IDS].new("steer_"), target, value, items)
        steering = lane.steering
        steering.queued.append(steer)
        await self._send(self._steer_event(lane, "accepted", steer_record(steer)))
        if steering.stoppable and lane.steering is steering and lane.sink is not None:
            lane.sink.steer()  # a plain answer ends at a safe boundary now; its successor takes the input

    async def _with_pending(self, lane: Lane, body: dict[str, Any]) -> dict[str, Any]:
        """A create on a lane whose steers wait for tool outputs: their input goes first when it
        continues from that response; when it does not, they fail (their input returned)."""
        if lane.pending is None:
            return body
        (parent, steers), lane.pending = lane.pending, None
        if body.get("previous_response_id") != parent:
            message = f"the lane's next response does not continue from {parent!r}: the input was not applied"
            await self._fail_steers(lane, steers, "response_not_active", message)
            return body
        items = [item for steer in steers for item in steer.items]
        given = normalize_input(body.get("input"), self.app[IDS])
        # First, but after the outputs that answer the calls: a chat backend wants the tool
        # results right after the assistant's calls.
        at = next((i for i, item in enumerate(given) if not str(item.get("type", "")).endswith("_output")), len(given))
        return {**body, "input": [*given[:at], *items, *given[at:]]}

    async def _fail_steers(self, lane: Lane, steers: list[Steer], code: str, message: str) -> None:
        for steer in steers:
            await self._send(self._failed(lane, steer_record(steer, with_input=True), code, message))

    async def _steers_after(
        self,
        lane: Lane,
        final: dict[str, Any] | None,
        settings: dict[str, Any],
        steers: list[Steer],
        uncommitted: list[Steer],
    ) -> None:
        """The steers a response leaves queued (``steers``): a successor, pending for tool
        outputs, or failed with their input. ``uncommitted``: those a successor carried that
        failed before its ``response.created``."""
        if uncommitted:
            message = "the successor response could not be created: the input was not applied"
            await self._fail_steers(lane, uncommitted, "successor_creation_failed", message)
        if not steers:
            return
        status = final.get("status") if final is not None else None
        if final is not None and status == "incomplete" and final.get("incomplete_details") == {"reason": "steered"}:
            status = "steered"  # ended for these steers: as a completed one, a successor takes them
        if status not in ("completed", "steered") or final is None:
            message = f"the response ended {status or 'before it began'}: the input was not applied"
            await self._fail_steers(lane, steers, "response_not_active", message)
            return
        needed = required_input(final)
        if needed:
            lane.pending = (str(final["id"]), steers)
            for steer in steers:
                frame = self._steer_event(
                    lane, "pending", steer_record(steer), reason="waiting_for_required_input", required_input=needed
                )
                await self._send(frame)
            return
        successor = {**settings, "input": [i for s in steers for i in s.items], "previous_response_id": final["id"]}
        self.turns += 1
        for steer in steers:
            steer.target = str(final["id"])
        self._enqueue(lane, successor, steers)
