"""WebSocket frames, every one validated: the WebSocket counterpart of the ``captured`` fixture.

A WebSocket test opens its sockets through the ``ws_frames`` fixture (tests/conftest.py, a
``FrameRecorder``):
``ws_frames.connect(url)`` for a raw aiohttp client, ``ws_frames.attach(conn)`` for the official
Python SDK's ``client.responses.connect()`` connection, ``ws_frames.log(label)`` for frames a test
got some other way (the Node SDK's script prints them). Every frame received is recorded, in
order, before the test sees it. At teardown (and whenever a test calls ``validate()``) each
connection's frames are split into

  - responses: from ``response.created`` to its terminal event; each one goes through the strict
    validator ``tests.support.validators.validate_responses_events`` (the SSE streams' rules:
    ``sequence_number`` from 0, one terminal event, items and parts consistent, ...), and every
    response id on a connection is new;
    A response ended ``incomplete`` with reason ``steered`` must have had a steer accepted for
    it and be followed on its lane by its successor (``validate_steered``);
  - request-level error frames, ``{"type": "error", "status": N, "error": {"type", "code",
    "message", "param"}}``: exactly that shape, ``status`` an int >= 400, ``code`` a non-empty
    string (the Open Responses ``WebSocketErrorEvent``, also validated by its model), ``message``
    a non-empty string carrying no Python internals (tracebacks, file paths, exception class
    names).

Anything else is a violation: a frame that is not a JSON object with a string ``type``, a binary
frame, an event outside a response, a response left without its terminal event (unless the test
declared that its client leaves mid-response: ``allow_cut()``). An ``error`` frame with a
``sequence_number`` belongs to the response it arrives in (``error`` then ``response.failed``); one
without is request-level, wherever it arrives (a second ``response.create`` refused mid-response).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import openresponses_types as ort
import orjson
from pydantic import ValidationError

from tests.support.validators import StreamViolation, validate_responses_events

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
GUARD = 30.0  # seconds: hang guard of one receive; every frame awaited here comes within milliseconds
MAX_FRAMES = 100_000  # frames one turn may take before a test gives up (bounded loops)

# Python internals that must never reach a client in an error message.
LEAK_RE = re.compile(
    r"Traceback|File \"|site-packages|\.py\b|<[A-Za-z_.]*(?:Error|Exception)\b|"
    r"\b(?:[A-Z][a-z0-9]+){1,5}(?:Error|Exception)\b"
)


class FrameViolation(StreamViolation):
    """A WebSocket frame breaks the protocol's shape."""


class WSClosed(Exception):  # not ...Error: an outcome, not an error of the test
    """The server closed the socket while the test waited for a frame."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"socket closed (code {code}) {reason}".strip())
        self.code = code
        self.reason = reason


def is_request_error(frame: dict[str, Any]) -> bool:
    return frame.get("type") == "error" and "sequence_number" not in frame


def is_steer_event(frame: dict[str, Any]) -> bool:
    return str(frame.get("type", "")).startswith("response.steer.")


_SERVER_EVENTS: dict[str, Any] = {}


def check_sdk_event(frame: dict[str, Any], where: str) -> None:
    """The frame is the official SDK's model of its WebSocket server event (a member of
    ``ResponsesServerEvent``, which knows ``stream_id`` and the steering events), validated
    strictly by that pydantic model."""
    if not _SERVER_EVENTS:
        import typing

        from openai.types.responses.responses_server_event import ResponsesServerEvent

        union = typing.get_args(ResponsesServerEvent)[0]
        for model in typing.get_args(union):
            for kind in typing.get_args(model.model_fields["type"].annotation):
                _SERVER_EVENTS[kind] = model
    model = _SERVER_EVENTS.get(frame.get("type"))
    if model is None:
        raise FrameViolation(f"{where}: {frame.get('type')!r} is no SDK ResponsesServerEvent")
    try:
        model.model_validate(frame)
    except ValidationError as exc:
        raise FrameViolation(f"{where}: not an SDK {model.__name__}: {exc}") from None


def check_error_frame(frame: dict[str, Any], where: str = "error frame") -> dict[str, Any]:
    """A request-level error frame has exactly ``{"type", "status", "error"}`` (and the lane's
    ``stream_id`` when a create on a lane is refused), its ``error`` exactly ``{"type", "code",
    "message", "param"}``. Returns ``error``."""
    if "stream_id" in frame:
        if not isinstance(frame["stream_id"], str) or not frame["stream_id"]:
            raise FrameViolation(f"{where}: stream_id {frame['stream_id']!r} is not a non-empty string")
        check_sdk_event(frame, where)
        frame = {k: v for k, v in frame.items() if k != "stream_id"}
    if set(frame) != {"type", "status", "error"}:
        raise FrameViolation(f"{where}: keys {sorted(frame)} != ['error', 'status', 'type']: {frame!r}")
    status = frame["status"]
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status < 600:
        raise FrameViolation(f"{where}: status {status!r} is not an HTTP error status (int >= 400)")
    error = frame["error"]
    if not isinstance(error, dict) or set(error) != {"type", "code", "message", "param"}:
        got = sorted(error) if isinstance(error, dict) else error
        raise FrameViolation(f"{where}: error {got!r} != ['code', 'message', 'param', 'type']")
    if not isinstance(error["type"], str) or not error["type"]:
        raise FrameViolation(f"{where}: error.type {error['type']!r} is not a non-empty string")
    if not isinstance(error["message"], str) or not error["message"].strip():
        raise FrameViolation(f"{where}: error.message {error['message']!r} is not a non-empty string")
    if not isinstance(error["code"], str) or not error["code"]:
        raise FrameViolation(f"{where}: error.code {error['code']!r} is not a non-empty string (the spec wants one)")
    if error["param"] is not None and not isinstance(error["param"], str):
        raise FrameViolation(f"{where}: error.param {error['param']!r} is neither null nor a string")
    try:  # and the Open Responses schema's own model of it
        ort.WebSocketErrorEvent.model_validate(frame)
    except ValidationError as exc:
        raise FrameViolation(f"{where}: not an Open Responses WebSocketErrorEvent: {exc}") from None
    leak = LEAK_RE.search(error["message"])
    if leak:
        raise FrameViolation(f"{where}: error.message leaks Python internals ({leak.group(0)!r}): {error['message']!r}")
    return error


@dataclass
class Turn:
    """What one ``response.create`` brought: the response's events (empty when it was refused)
    and the request-level error frames that came while waiting."""

    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    steers: list[dict[str, Any]] = field(default_factory=list)  # response.steer.* events meanwhile

    @property
    def terminal(self) -> str | None:
        return self.events[-1]["type"] if self.events and self.events[-1]["type"] in TERMINAL else None

    @property
    def response(self) -> dict[str, Any]:
        assert self.terminal, f"no terminal event; errors {self.errors}"
        return self.events[-1]["response"]

    @property
    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "response.output_text.delta")

    @property
    def error(self) -> dict[str, Any]:
        """The one request-level error of a refused turn (its ``error`` object, ``status`` added)."""
        assert not self.events and len(self.errors) == 1, f"expected one error frame, got {self}"
        return {**self.errors[0]["error"], "status": self.errors[0]["status"]}

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def items(self, kind: str | None = None) -> list[dict[str, Any]]:
        done = [e["item"] for e in self.events if e["type"] == "response.output_item.done"]
        return [i for i in done if kind is None or i["type"] == kind]


class FrameLog:
    """Every frame one connection received, in order, parsed."""

    def __init__(self, label: str, dialect: str = "openai") -> None:
        self.label = label
        self.dialect = dialect  # the event names expected (validators.py)
        self.frames: list[dict[str, Any]] = []
        self.problems: list[str] = []  # violations found while recording (a binary frame, not JSON)
        self.cut_allowed = False
        self.close_code: int | None = None

    def allow_cut(self) -> None:
        """The test's client leaves mid-response on purpose: the open response is checked as a
        cut stream (every event present, no terminal event required)."""
        self.cut_allowed = True

    def add(self, data: str | bytes) -> dict[str, Any]:
        """Record one text frame's payload; returns the parsed frame."""
        where = f"{self.label} frame #{len(self.frames) + len(self.problems)}"
        try:
            frame = orjson.loads(data)
        except orjson.JSONDecodeError:
            raw = data if isinstance(data, bytes) else data.encode()
            self.problems.append(f"{where}: not JSON: {raw[:200]!r}")
            raise FrameViolation(self.problems[-1]) from None
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str) or not frame["type"]:
            self.problems.append(f"{where}: not a JSON object with a string `type`: {str(frame)[:200]}")
            raise FrameViolation(self.problems[-1])
        self.frames.append(frame)
        return frame

    def add_binary(self, data: bytes) -> None:
        self.problems.append(f"{self.label}: a binary frame ({len(data)} bytes); every server frame is JSON text")
        raise FrameViolation(self.problems[-1])

    def lanes(self) -> dict[str | None, list[dict[str, Any]]]:
        """The frames of each lane (``stream_id``; None: frames without one), in order; steering
        events and request-level error frames are left out (``steer_events``, ``split``)."""
        lanes: dict[str | None, list[dict[str, Any]]] = {}
        for frame in self.frames:
            if not is_request_error(frame) and not is_steer_event(frame):
                lanes.setdefault(frame.get("stream_id"), []).append(frame)
        return lanes

    def steer_events(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if is_steer_event(f)]

    def split(self) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]] | None]:
        """(complete responses, request-level error frames, the responses left open or None).
        Responses are split per lane: the frames of a ``stream_id`` make a stream of their own,
        which may interleave with the others'."""
        responses: list[list[dict[str, Any]]] = []
        errors = [f for f in self.frames if is_request_error(f)]
        left: list[dict[str, Any]] = []
        for stream_id, frames in self.lanes().items():
            current: list[dict[str, Any]] | None = None
            for n, frame in enumerate(frames):
                if current is None:
                    if frame["type"] != "response.created":
                        raise FrameViolation(
                            f"{self.label} lane {stream_id!r} frame #{n}: {frame['type']!r} outside a response "
                            "(a response starts with response.created)"
                        )
                    current = [frame]
                else:
                    current.append(frame)
                if current[-1]["type"] in TERMINAL:
                    responses.append(current)
                    current = None
            if current is not None:
                left += current
        return responses, errors, left or None

    def validate(self) -> tuple[int, int]:
        """Check every frame; returns (responses, error frames) checked."""
        if self.problems:
            raise FrameViolation("; ".join(self.problems))
        responses, errors, open_response = self.split()
        ids: set[str] = set()
        for n, events in enumerate(responses):
            lane = events[0].get("stream_id")
            if lane is not None:
                for m, event in enumerate(events):
                    check_sdk_event(event, f"{self.label} lane {lane!r} response #{n} event #{m}")
                events = [{k: v for k, v in e.items() if k != "stream_id"} for e in events]
            try:
                validate_responses_events(events, dialect=self.dialect)
            except StreamViolation as exc:
                raise FrameViolation(f"{self.label} response #{n}: {exc}") from None
            rid = events[0]["response"]["id"]
            if rid in ids:
                raise FrameViolation(f"{self.label} response #{n}: id {rid!r} was used before on this connection")
            ids.add(rid)
        for n, frame in enumerate(errors):
            check_error_frame(frame, f"{self.label} error frame #{n}")
        self.validate_steering()
        self.validate_steered(responses)
        if open_response is not None:
            if not self.cut_allowed:
                raise FrameViolation(
                    f"{self.label}: a response ({len(open_response)} events, last "
                    f"{open_response[-1]['type']!r}) never got its terminal event"
                )
            stripped = [{k: v for k, v in e.items() if k != "stream_id"} for e in open_response]
            validate_responses_events(stripped, require_terminal=False, dialect=self.dialect)
        return len(responses), len(errors)

    def validate_steering(self) -> None:
        """Each steering event is the SDK's model of it, numbered per socket from 0 (apart from
        the responses' numbering); those of one steering id go accepted, then at most one of
        pending / failed; a failed one returns the input."""
        seen: dict[str, list[str]] = {}
        for n, frame in enumerate(self.steer_events()):
            where = f"{self.label} steering event #{n}"
            check_sdk_event(frame, where)
            if frame["sequence_number"] != n:
                raise FrameViolation(f"{where}: sequence_number {frame['sequence_number']} != {n}")
            kind = frame["type"].rsplit(".", 1)[1]
            steer = frame["steer"]
            if kind == "failed" and "input" not in steer:
                raise FrameViolation(f"{where}: response.steer.failed without the input it returns")
            if "id" not in steer:  # failed before it was accepted
                continue
            history = seen.setdefault(steer["id"], [])
            after = history[-1] if history else None
            if (after, kind) not in {
                (None, "accepted"),
                ("accepted", "pending"),
                ("accepted", "failed"),
                ("pending", "failed"),
            }:
                raise FrameViolation(f"{where}: {kind} after {history or 'nothing'} for steer {steer['id']!r}")
            history.append(kind)

    def validate_steered(self, responses: list[list[dict[str, Any]]]) -> None:
        """A response that ended ``incomplete`` with reason ``steered`` was steered: a
        ``response.steer.accepted`` naming it came before its terminal event; after it, the next
        response of its lane is its successor (``previous_response_id`` naming it), unless a
        ``response.steer.pending`` or ``.failed`` naming it says why there is none."""
        at = {id(frame): n for n, frame in enumerate(self.frames)}
        steers = self.steer_events()
        for n, events in enumerate(responses):
            final = events[-1]["response"]
            if events[-1]["type"] != "response.incomplete" or final.get("incomplete_details") != {"reason": "steered"}:
                continue
            where, rid, end = f"{self.label} response #{n} (steered)", final["id"], at[id(events[-1])]
            named = [(at[id(f)], f["type"]) for f in steers if f["steer"].get("previous_response_id") == rid]
            if not any(pos < end and kind == "response.steer.accepted" for pos, kind in named):
                raise FrameViolation(f"{where}: no response.steer.accepted for {rid!r} before its terminal event")
            if any(pos > end and kind != "response.steer.accepted" for pos, kind in named):
                continue  # pending for the client's tool outputs, or failed with its input
            lane = events[0].get("stream_id")
            later = [r for r in responses if r[0].get("stream_id") == lane and at[id(r[0])] > end]
            if not later and self.cut_allowed:
                continue  # the client left before its successor ended
            successor = later[0][0]["response"] if later else None
            if successor is None or successor.get("previous_response_id") != rid:
                got = successor.get("previous_response_id") if successor is not None else "no response"
                raise FrameViolation(
                    f"{where}: the next response of its lane does not continue from it (previous_response_id: {got!r})"
                )


class RawWS:
    """A raw aiohttp WebSocket client whose every received frame is recorded in its log."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, log: FrameLog) -> None:
        self.ws = ws
        self.log = log

    async def send(self, frame: Any) -> None:
        await self.ws.send_str(orjson.dumps(frame).decode())

    async def create(self, **body: Any) -> None:
        await self.send({"type": "response.create", **body})

    async def recv(self, timeout: float = GUARD) -> dict[str, Any]:
        """The next frame (recorded); ``WSClosed`` when the server closes instead."""
        msg = await asyncio.wait_for(self.ws.receive(), timeout)
        if msg.type == aiohttp.WSMsgType.TEXT:
            return self.log.add(msg.data)
        if msg.type == aiohttp.WSMsgType.BINARY:
            self.log.add_binary(msg.data)
        if msg.type == aiohttp.WSMsgType.CLOSE:  # the code the server sent (the client's own may differ:
            self.log.close_code = msg.data  # its reply fails when the server has closed the transport)
            raise WSClosed(msg.data, str(msg.extra or ""))
        if msg.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
            self.log.close_code = self.ws.close_code
            raise WSClosed(self.ws.close_code, str(msg.extra or ""))
        raise WSClosed(self.ws.close_code, f"{msg.type!r}: {msg.data!r}")

    async def read_turn(self, timeout: float = GUARD) -> Turn:
        """Frames up to the end of one turn: its terminal event, or the request-level error frame
        that refused it (an error frame that arrives while a response is open is kept and the
        response read on)."""
        turn = Turn()
        for _ in range(MAX_FRAMES):
            frame = await self.recv(timeout)
            if is_steer_event(frame):
                turn.steers.append(frame)
                continue
            if is_request_error(frame):
                turn.errors.append(frame)
                if not turn.events:
                    return turn
                continue
            turn.events.append(frame)
            if frame["type"] in TERMINAL:
                return turn
        raise AssertionError(f"no end of the turn within {MAX_FRAMES} frames")

    async def turn(self, **body: Any) -> Turn:
        await self.create(**body)
        return await self.read_turn()

    async def closed(self, timeout: float = GUARD) -> int | None:
        """Wait for the server's close (frames before it are recorded, then must not be there);
        returns the close code."""
        try:
            frame = await self.recv(timeout)
        except WSClosed as closed:
            return closed.code
        raise AssertionError(f"expected the socket to close, got a frame: {frame}")


class SDKWS:
    """The official Python SDK's connection (``client.responses.connect()``), its raw frames
    recorded: ``recv()`` reads through ``recv_bytes()``, which is wrapped here."""

    def __init__(self, conn: Any, log: FrameLog) -> None:
        self.conn = conn
        self.log = log
        original = conn.recv_bytes

        async def recv_bytes() -> bytes:
            data = await original()
            log.add(data)
            return data

        conn.recv_bytes = recv_bytes

    async def recv(self, timeout: float = GUARD) -> Any:
        """The next event, parsed by the SDK; the same frame recorded raw (checked: a change in
        the SDK that read around ``recv_bytes`` would make frames escape the validator)."""
        from websockets.exceptions import ConnectionClosed

        before = len(self.log.frames)
        try:
            event = await asyncio.wait_for(self.conn.recv(), timeout)
        except ConnectionClosed as exc:
            self.log.close_code = exc.rcvd.code if exc.rcvd is not None else None
            raise WSClosed(self.log.close_code) from None
        assert len(self.log.frames) == before + 1, "the SDK received a frame the recorder did not see"
        assert event.type == self.log.frames[-1]["type"]
        return event

    async def read_turn(self, timeout: float = GUARD) -> tuple[Turn, list[Any]]:
        """(the turn's raw frames, the SDK's parsed events of the same frames)."""
        turn, parsed = Turn(), []
        for _ in range(MAX_FRAMES):
            event = await self.recv(timeout)
            frame = self.log.frames[-1]
            parsed.append(event)
            if is_steer_event(frame):
                turn.steers.append(frame)
                continue
            if is_request_error(frame):
                turn.errors.append(frame)
                if not turn.events:
                    return turn, parsed
                continue
            turn.events.append(frame)
            if frame["type"] in TERMINAL:
                return turn, parsed
        raise AssertionError(f"no end of the turn within {MAX_FRAMES} frames")

    async def turn(self, **create: Any) -> tuple[Turn, list[Any]]:
        await self.conn.response.create(**create)
        return await self.read_turn()


class FrameRecorder:
    """Every WebSocket connection of one test; ``validate()`` checks all their frames."""

    def __init__(self) -> None:
        self.logs: list[FrameLog] = []

    def log(self, label: str = "", dialect: str = "openai") -> FrameLog:
        log = FrameLog(label or f"socket {len(self.logs)}", dialect)
        self.logs.append(log)
        return log

    @contextlib.asynccontextmanager
    async def connect(
        self, url: str, *, headers: dict[str, str] | None = None, label: str = "", dialect: str = "openai", **kw: Any
    ) -> AsyncIterator[RawWS]:
        """A raw aiohttp WebSocket to ``url`` (its own session); closed on the way out. ``dialect``:
        the event names its responses are validated with (validators.py)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=GUARD)) as session:
            ws = await session.ws_connect(url, headers=headers, autoping=True, **kw)
            try:
                yield RawWS(ws, self.log(label, dialect))
            finally:
                await ws.close()

    def attach(self, conn: Any, label: str = "sdk") -> SDKWS:
        return SDKWS(conn, self.log(label))

    def validate(self) -> tuple[int, int]:
        """(responses, error frames) checked over every connection."""
        responses = errors = 0
        for log in self.logs:
            r, e = log.validate()
            responses += r
            errors += e
        return responses, errors


def ws_url(http_url: str, path: str = "/v1/responses") -> str:
    return "ws" + http_url[len("http") :] + path if http_url.startswith("http") else http_url + path
