"""The inspector's memory: a bounded ring of recent turns, and the live feed the page reads.

A traced turn (proxy/runtime/turn_trace.py) that finds ``INSPECTOR`` on its application opens a
``Watched`` here. From then on its backend reads, the events it sends, and the quirks repaired are
appended to it, stamped in milliseconds since the request arrived, and passed to every page that is
listening (only when one is: an unwatched ring encodes nothing). The page's routes are
proxy/http/inspector.py; the static page is proxy/http/inspector_page/.

Bounds: ``turns`` turns (the oldest forgotten first), and per turn ``max_turn_bytes`` of chunks
and events (later ones are counted, not kept) and of each request body (a larger body has its long
strings cut). So the ring never holds more than ``InspectorConfig.memory_bound`` bytes of them.
Everything kept is redacted first: fields and headers that carry credentials, and the values of the
backend key and the client's key wherever they occur.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from crossfeed.proxy.runtime import sessions
from crossfeed.proxy.runtime.inspector_config import InspectorConfig
from crossfeed.proxy.runtime.inspector_diff import changes
from crossfeed.proxy.runtime.sessions import Session

LISTENER_BACKLOG = 2000  # messages a page may fall behind before it is dropped (it reconnects and reloads)
_RESPONSE_ID = re.compile(rb'"id":"((?:resp|chatcmpl)[A-Za-z0-9_.:-]*)"')


class Ring:
    """The recent turns of this process, and the pages listening to them."""

    def __init__(self, config: InspectorConfig, redact: Callable[..., Any]) -> None:
        self.config = config
        self.redact = redact  # turn_trace.redact: the one redaction of every trace
        self.turns: collections.OrderedDict[str, Watched] = collections.OrderedDict()
        self.listeners: set[asyncio.Queue[bytes | None]] = set()
        self.sessions: dict[str, Session] = {}  # a kept turn's response id -> its session
        self._serial = 0

    # -- turns --------------------------------------------------------------------------------

    def open(
        self,
        *,
        request_id: str,
        started: float,
        transport: str,
        upstream: str,
        path: str,
        client: dict[str, Any] | None,
        sent: dict[str, Any],
        headers: Mapping[str, str],
        hidden: tuple[str, ...],
    ) -> Watched:
        self._serial += 1
        turn = Watched(self, f"t{self._serial}", request_id, started, transport, upstream, path, hidden)
        turn.client = self._body(client, hidden) if client is not None else None
        turn.sent = self._body(sent, hidden)
        turn.changes = changes(client or {}, sent)
        turn.previous = str((client or {}).get("previous_response_id") or "") or None
        turn.session_key = sessions.resolve(client or {}, headers, self.sessions)
        turn.session = sessions.label(turn.session_key)
        turn.model = str((client or sent).get("model") or "")
        self.turns[turn.id] = turn
        while len(self.turns) > self.config.turns:
            _, old = self.turns.popitem(last=False)
            if old.response_id:
                self.sessions.pop(old.response_id, None)
        if self.listeners:
            self.publish({"kind": "turn", "turn": turn.summary()})
        return turn

    def _body(self, body: dict[str, Any], hidden: tuple[str, ...]) -> Any:
        redact = self.redact
        kept = redact(body, hidden)
        if len(orjson.dumps(kept)) > self.config.max_turn_bytes:
            kept = redact(body, hidden, self.config.max_body_chars)
            text = orjson.dumps(kept)
            if len(text) > self.config.max_turn_bytes:  # many short strings: only its head is kept
                cut = text[: self.config.max_turn_bytes].decode("utf-8", "ignore")
                kept = {"_cut": f"{cut}...[{len(text) - len(cut)} more bytes]"}
        return kept

    def held(self) -> int:
        """Bytes of chunks, events and bodies the ring holds now."""
        return sum(turn.size() for turn in self.turns.values())

    # -- the live feed ------------------------------------------------------------------------

    def listen(self) -> asyncio.Queue[bytes | None]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(LISTENER_BACKLOG)
        self.listeners.add(queue)
        return queue

    def unlisten(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.listeners.discard(queue)

    def publish(self, message: dict[str, Any]) -> None:
        if not self.listeners:
            return
        data = orjson.dumps(message)
        for queue in tuple(self.listeners):
            try:
                queue.put_nowait(data)
            except asyncio.QueueFull:  # a page that cannot keep up: ended; it reloads when it reconnects
                self.listeners.discard(queue)
                queue.get_nowait()
                queue.put_nowait(None)

    def close(self) -> None:
        """The server stops: every page's feed ends."""
        for queue in tuple(self.listeners):
            self.listeners.discard(queue)
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(None)


class Watched:
    """One turn in the ring."""

    def __init__(
        self,
        ring: Ring,
        turn_id: str,
        request_id: str,
        started: float,
        transport: str,
        upstream: str,
        path: str,
        hidden: tuple[str, ...],
    ) -> None:
        self.ring = ring
        self.id = turn_id
        self.request_id = request_id
        self.started = started  # time.monotonic() when the request (or WebSocket frame) arrived
        self.wall = time.time()
        self.transport = transport
        self.upstream = upstream
        self.path = path
        self.hidden = hidden
        self.client: Any = None
        self.sent: Any = None
        self.changes: list[dict[str, str]] = []
        self.previous: str | None = None
        self.session: str | None = None  # as the page names it
        self.session_key: Session | None = None
        self.model = ""
        self.response_id: str | None = None
        self.legs: list[dict[str, Any]] = []
        self.chunks: list[tuple[float, int, bytes]] = []  # (ms since started, leg, bytes read)
        self.events: list[tuple[float, bytes]] = []  # (ms since started, bytes sent)
        self.quirks: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []  # hosted tool runs between legs
        self.marks: dict[str, float] = {}  # upstream_sent, backend_first_byte, first_event, end
        self.jsonl = False
        self.whole = False  # a turn answered whole (stream false): its one answer and one body
        self.kept = 0
        self.dropped = 0
        self.ending: str | None = None
        self.reasoning_field = "reasoning_content"

    def now(self) -> float:
        return round((time.monotonic() - self.started) * 1000, 2)

    def size(self) -> int:
        bodies = len(orjson.dumps(self.client)) + len(orjson.dumps(self.sent))
        return self.kept + bodies

    def _keep(self, data: bytes) -> bool:
        if self.kept + len(data) > self.ring.config.max_turn_bytes:
            self.dropped += len(data)
            return False
        self.kept += len(data)
        return True

    # -- what the trace tells it ------------------------------------------------------------------

    def leg(self, index: int, url: str, status: int | None, headers: Mapping[str, str], sent_after: float) -> None:
        """A backend call answered (``sent_after``: seconds it took to answer)."""
        at = self.now()
        self.marks.setdefault("upstream_sent", round(at - sent_after * 1000, 2))
        self.legs.append({"index": index, "url": url, "status": status, "headers": dict(headers), "at": at})
        self.ring.publish({"kind": "leg", "turn": self.id, "leg": self.legs[-1]})

    def chunk(self, leg: int, data: bytes) -> None:
        t = self.now()
        self.marks.setdefault("backend_first_byte", t)
        if self._keep(data):
            self.chunks.append((t, leg, data))
        if self.ring.listeners:
            text = data.decode("utf-8", "replace")
            self.ring.publish({"kind": "chunk", "turn": self.id, "t": t, "leg": leg, "data": text})

    def event(self, data: bytes) -> None:
        t = self.now()
        self.marks.setdefault("first_event", t)
        if self.response_id is None:
            self._learn_id(data)
        if self._keep(data):
            self.events.append((t, data))
        if self.ring.listeners:
            self.ring.publish({"kind": "event", "turn": self.id, "t": t, "data": data.decode("utf-8", "replace")})

    def _learn_id(self, data: bytes) -> None:
        found = _RESPONSE_ID.search(data)
        if found is None:
            return
        self.response_id = found.group(1).decode()
        if self.session_key is None:
            self.session_key = sessions.started(self.response_id)
            self.session = sessions.label(self.session_key)
        if self.response_id.startswith("resp"):
            self.ring.sessions[self.response_id] = self.session_key
        if self.ring.listeners:
            self.ring.publish({"kind": "turn", "turn": self.summary()})

    def tool_run(self, calls: list[dict[str, str]], results: Mapping[str, str], seconds: float) -> None:
        """A hosted tool round crossfeed ran between two legs (web searches, MCP calls)."""
        limit = self.ring.config.max_body_chars
        redact = self.ring.redact
        for call in calls:
            run = {
                "t": self.now(),
                "name": call.get("name", ""),
                "arguments": redact(str(call.get("arguments", "")), self.hidden, limit),
                "result": redact(str(results.get(call.get("call_id", ""), "")), self.hidden, limit),
                "ms": round(seconds * 1000, 2),
            }
            self.tools.append(run)
            self.ring.publish({"kind": "tool", "turn": self.id, "tool": run})

    def quirk(self, mark: dict[str, Any]) -> None:
        mark = {**mark, "t": self.now()}
        self.quirks.append(mark)
        self.ring.publish({"kind": "quirk", "turn": self.id, "quirk": mark})

    def end(self, ending: str) -> None:
        self.ending = ending
        self.marks["end"] = self.now()
        if self.ring.listeners:
            self.ring.publish({"kind": "turn", "turn": self.summary(), "held_bytes": self.ring.held()})

    # -- what the page reads ----------------------------------------------------------------------

    def timings(self) -> dict[str, float | None]:
        marks = self.marks
        sent, first, event = marks.get("upstream_sent"), marks.get("backend_first_byte"), marks.get("first_event")
        added = None
        if sent is not None and first is not None and event is not None:
            added = round(max(sent, 0.0) + max(event - first, 0.0), 2)
        return {
            "upstream_sent_ms": sent,
            "backend_first_byte_ms": first,
            "first_event_ms": event,
            "end_ms": marks.get("end"),
            "crossfeed_added_ms": added,
        }

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "request_id": self.request_id,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.wall)),
            "transport": self.transport,
            "upstream": self.upstream,
            "path": self.path,
            "model": self.model,
            "session": self.session,
            "response_id": self.response_id,
            "previous_response_id": self.previous,
            "ending": self.ending,
            "quirks": len(self.quirks),
            "legs": len(self.legs),
            "stream": not self.whole,
            "timings": self.timings(),
        }

    def detail(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "client_request": self.client,
            "upstream_request": self.sent,
            "changes": self.changes,
            "leg_calls": self.legs,
            "chunks": [{"t": t, "leg": leg, "data": d.decode("utf-8", "replace")} for t, leg, d in self.chunks],
            "events": [{"t": t, "data": d.decode("utf-8", "replace")} for t, d in self.events],
            "quirk_marks": self.quirks,
            "tool_runs": self.tools,
            "kept_bytes": self.kept,
            "dropped_bytes": self.dropped,
        }

    def case(self) -> dict[str, Any]:
        """The backend's stream and the events made of it, as ``crossfeed translate --case`` replays
        them (and a golden test loads them)."""
        source = "chat" if self.path == "/chat/completions" else "responses"
        target = "chat" if isinstance(self.client, dict) and "messages" in self.client else "responses"
        notes = []
        if self.whole:
            notes.append("a whole answer (stream false): crossfeed translate replays streams, not this")
        if self.dropped:
            notes.append(f"{self.dropped} bytes past the inspector's max_turn_bytes were not kept: a partial turn")
        if len(self.legs) > 1:
            notes.append(f"{len(self.legs)} backend calls: the case replays the first one")
        return {
            "crossfeed_case": 1,
            "request_id": self.request_id,
            "from": source,
            "to": target,
            "reasoning_field": self.reasoning_field,
            "jsonl": self.jsonl,
            "request": self.client,
            "upstream_request": self.sent,
            "upstream": b"".join(d for _, leg, d in self.chunks if leg == 1).decode("utf-8", "replace"),
            "events": b"".join(d for _, d in self.events).decode("utf-8", "replace"),
            "ending": self.ending,
            "quirks": self.quirks,
            "complete": not self.dropped and len(self.legs) <= 1 and not self.whole,
            "notes": notes,
        }


INSPECTOR = web.AppKey("inspector", Ring)  # absent: the inspector is off
