"""Responses events -> Responses events: a Responses upstream's stream, checked and relayed.

Used where crossfeed carries a Responses upstream's stream to a client on another transport
(WebSocket mode: the upstream is called over HTTP/SSE). Events pass through unchanged except
``sequence_number``, which is stamped here (from 0, one apart: numbering.py, the core the three
machines share), so the client's numbering holds whatever the upstream sent. The first terminal
event (``response.completed``, ``.incomplete``, ``.failed``) ends the stream and is the final
Response; after it nothing is relayed.

  feed(event)        -> [event]                     every upstream event
  finish(clean)      -> [error, response.failed]    the upstream ended without a terminal event
  fail(code, msg)    -> [error, response.failed]    transport failure, decided by the driver

A stream that fails before the upstream's ``response.created`` still gets a complete lifecycle:
``response.created`` (a Response built from the request) first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crossfeed.translators import ids as idp
from crossfeed.translators.errors import StreamStateError
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.responses.numbering import TERMINAL, Event, NumberedStream
from crossfeed.translators.responses.response_object import fill_response, map_usage, new_response


class ResponsesEventRelay(NumberedStream):
    __slots__ = ("done", "final_response", "_resp", "_request", "_ids", "_now", "_model")

    def __init__(
        self, *, model: str, ids: IdFactory, now: Callable[[], int], request: dict[str, Any] | None = None
    ) -> None:
        super().__init__()  # diagnostics stay empty: nothing to absorb, the events pass through
        self.done = False
        self.final_response: dict[str, Any] | None = None
        self._resp: dict[str, Any] | None = None  # the latest Response snapshot the upstream sent
        self._request = request or {}
        self._ids = ids
        self._now = now
        self._model = model

    def feed(self, event: Event) -> list[Event]:
        if self.done:
            raise StreamStateError("feed() after the terminal event")
        kind = event.get("type")
        if not isinstance(kind, str):
            return self.fail("upstream_protocol_error", "the upstream sent an event without a type")
        resp = event.get("response")
        if isinstance(resp, dict):
            self._resp = fill_response(resp)
        if kind in TERMINAL:
            self.done = True
            self.final_response = resp if isinstance(resp, dict) else self._snapshot()
        out = self._out = []
        self._emit(event)
        return out

    def finish(self, *, clean: bool = True) -> list[Event]:
        if self.done:
            raise StreamStateError("finish() after the terminal event")
        return self.fail("upstream_truncated", "the upstream closed the stream before it finished")

    def fail(self, code: str, message: str) -> list[Event]:
        if self.done:
            raise StreamStateError("fail() after the terminal event")
        out = self._out = []
        if self._resp is None:
            self._resp = self._snapshot()
            self._emit({"type": "response.created", "response": dict(self._resp)})
        resp = {**self._resp, "status": "failed", "error": {"code": code, "message": message}}
        self._emit_error(code, message)
        self._emit({"type": "response.failed", "response": resp})
        self.done = True
        self.final_response = resp
        return out

    def _snapshot(self) -> dict[str, Any]:
        return new_response(
            self._request, response_id=self._ids.new(idp.RESPONSE), created_at=self._now(), model=self._model
        )


def primed_response_events(request: dict[str, Any], *, ids: IdFactory, now: Callable[[], int]) -> list[Event]:
    """The events of a ``generate: false`` turn (a WebSocket connection primed, nothing sampled):
    a Response that completes at once with no output and no tokens spent."""
    resp = new_response(
        request, response_id=ids.new(idp.RESPONSE), created_at=now(), model=str(request.get("model") or "")
    )
    done = {**resp, "status": "completed", "usage": map_usage(None)}
    return [
        {"type": "response.created", "response": resp, "sequence_number": 0},
        {"type": "response.in_progress", "response": dict(resp), "sequence_number": 1},
        {"type": "response.completed", "response": done, "sequence_number": 2},
    ]
