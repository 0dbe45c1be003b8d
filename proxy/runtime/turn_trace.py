"""A streamed turn traced, for debugging a backend: debug log lines and recorded turns.

Nothing here runs unless ``logs.TRACE.on`` (``--log-level debug``, or an application with
``[logging] record_dir``): a turn reads that flag once, when its stream opens. Off, its legs get
the plain ``Pump`` and the transport's own sink, so the per-chunk path is the code it is without
this module.

Debug lines (``--log-level debug``):

  upstream.request      every upstream call (streamed or not): the URL, the body sent and its
                        headers, secrets redacted, strings cut to ``[logging] debug_max_chars``
  upstream.response     the status and headers that came back (secret ones redacted)
  upstream.first_chunk  the first read of each leg of a stream, when it arrives
  translation.quirk     each repair a translator made, by kind (``translation.anomaly`` counts
                        them per stream at info), with the read it was made in
  upstream.last_chunk   at the end of the turn, per leg: its last read, reads, bytes, ending

Recording (``serve --record DIR``, ``[logging] record_dir``, ``$CROSSFEED_RECORD_DIR``): every
translated streamed turn in a directory of its own, ``DIR/<UTC time>-<request id>/``:

  request.json           the client's request body
  upstream-request.json  the body crossfeed sent the backend (the first leg)
  upstream.sse           the backend's stream as read (a turn's later legs: upstream-2.sse...)
  events.sse             what crossfeed sent the client (a WebSocket turn: events.jsonl)
  turn.json              upstream, URL, status and headers, ending, quirks, and the
                         ``crossfeed translate`` command that replays the stream

Secrets are never logged or written: fields and headers that carry credentials are redacted by
name (every value of a ``headers`` object too: an MCP tool's carry its server's token), and the
values of the backend key and of the client's key are cut out of whatever is written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.inspector import INSPECTOR, Ring, Watched
from crossfeed.proxy.runtime.logs import ARRIVED, REQUEST_FIELDS, TRACE
from crossfeed.translators.pump import Machine, Out, Pump
from crossfeed.translators.responses.create_body import output_text

log = structlog.get_logger("crossfeed")

RECORD_DIR = web.AppKey("record_dir", Path)  # absent: this application records nothing
REDACTED = "[redacted]"
# JSON fields whose value is a credential (compared lower-cased), wherever they are in a body.
SECRET_FIELDS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api_key",
        "api-key",
        "apikey",
        "x-api-key",
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
        "password",
        "secret",
        "cookie",
        "set-cookie",
    }
)
# Header names whose value is redacted (rate-limit headers such as ...-remaining-tokens are kept).
_SECRET_HEADER = re.compile(r"auth|cookie|secret|api[-_]?key|password|token$|signature", re.IGNORECASE)
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def prepare(app: web.Application, config: Config) -> None:
    """At start: the record directory made (a ``ConfigError`` when it cannot be), the debug
    lines' string limit, and the process's switch turned on when this application records."""
    TRACE.max_chars = config.logging.debug_max_chars
    if config.inspector.enabled:
        app[INSPECTOR] = Ring(config.inspector, redact)
        TRACE.set(inspecting=True)
        app.on_cleanup.append(_stop_inspecting)
    where = config.logging.record_dir
    if not where:
        return
    path = Path(where).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".crossfeed-write-test-{time.monotonic_ns()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"logging.record_dir{config.origin_note('logging', 'record_dir')}: cannot write to {path}: "
            f"{exc.strerror or exc}"
        ) from None
    app[RECORD_DIR] = path
    TRACE.set(recording=True)
    log.warning(
        "record.enabled",
        dir=str(path),
        note="every streamed turn is written there (the backend's stream, the request, the events): "
        "a debugging switch, not for production",
    )


async def _stop_inspecting(app: web.Application) -> None:
    TRACE.set(inspecting=False)


# -- redaction ------------------------------------------------------------------------------------


def redact(value: Any, hidden: tuple[str, ...] = (), limit: int | None = None) -> Any:
    """A copy of a JSON value with credentials redacted: fields named in ``SECRET_FIELDS``,
    every value of a ``headers`` object, and the ``hidden`` strings wherever they occur;
    strings longer than ``limit`` cut (saying how much was cut). A tool output the request
    kept as JSON (translators/responses/create_body.py) is read as text first."""
    if value.__class__ is orjson.Fragment:
        value = output_text(value)
    if value.__class__ is str:
        for secret in hidden:
            if secret in value:
                value = value.replace(secret, REDACTED)
        if limit is not None and len(value) > limit:
            value = f"{value[:limit]}...[{len(value) - limit} more characters]"
        return value
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = key.lower() if isinstance(key, str) else ""
            if name in SECRET_FIELDS and item not in (None, ""):
                out[key] = REDACTED
            elif name == "headers" and isinstance(item, dict):
                out[key] = {k: REDACTED for k in item}
            else:
                out[key] = redact(item, hidden, limit)
        return out
    if isinstance(value, list):
        return [redact(item, hidden, limit) for item in value]
    return value


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(name): REDACTED if _SECRET_HEADER.search(name) else str(value) for name, value in headers.items()}


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The credentials in request headers (a bearer token, an API key header's value)."""
    found = []
    for name, value in headers.items():
        if _SECRET_HEADER.search(name) and value:
            token = value.split(None, 1)[1] if value[:7].lower() == "bearer " else value
            if len(token) >= 4:
                found.append(token.strip())
    return tuple(found)


def shown_url(url: str) -> str:
    """A URL for a log line: no user name or password, no query."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def excerpt(data: bytes | None, limit: int, hidden: tuple[str, ...] = ()) -> str | None:
    """Raw bytes as text for a log line, secrets cut out, cut to ``limit`` characters."""
    if data is None:
        return None
    cut = data[: limit * 4]  # enough bytes for ``limit`` characters
    shown = redact(cut.decode("utf-8", "replace"), hidden, limit)
    return shown if len(cut) == len(data) else f"{shown} [{len(data)} bytes in all]"


def _scrub(data: bytes, hidden: tuple[str, ...]) -> bytes:
    for secret in hidden:
        raw = secret.encode()
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


# -- debug lines of every upstream call (proxy/upstream.py) ----------------------------------------


def log_request(up: Upstream, url: str, body: Any, headers: Mapping[str, str], hidden: tuple[str, ...]) -> None:
    hidden = (*hidden, *header_secrets(headers))
    log.debug(
        "upstream.request",
        upstream=up.name,
        url=shown_url(url),
        body=redact(body, hidden, TRACE.max_chars),
        sent_headers=redact_headers(headers),  # not "headers": the log processor blanks that field
    )


def log_response(up: Upstream, url: str, status: int, headers: Mapping[str, str]) -> None:
    log.debug(
        "upstream.response",
        upstream=up.name,
        url=shown_url(url),
        status=status,
        response_headers=redact_headers(headers),
    )


# -- a traced streamed turn ----------------------------------------------------------------------


def open_trace(
    app: web.Application,
    client_headers: Mapping[str, str],
    up: Upstream,
    path: str,
    upstream_body: dict[str, Any],
    client_body: dict[str, Any] | None,
    hidden: tuple[str, ...],
) -> Trace | None:
    """The turn's trace, or None when this application neither logs at debug, records, nor keeps
    turns for the inspector. ``hidden``: secret values cut out of whatever is logged, written or
    kept (the backend key)."""
    record = app.get(RECORD_DIR)
    ring = app.get(INSPECTOR)
    if not TRACE.debug and record is None and ring is None:
        return None
    fields = REQUEST_FIELDS.get() or {}
    hidden = (*hidden, *header_secrets(client_headers))  # the backend key; the client's own
    request_id = str(fields.get("request_id") or "turn")
    trace = Trace(up, path, upstream_body, client_body, hidden, record, request_id)
    if ring is not None:
        trace.watch = _watch(ring, up, path, upstream_body, client_body, client_headers, trace.hidden)
    return trace


def _watch(
    ring: Ring,
    up: Upstream,
    path: str,
    sent: dict[str, Any],
    client: dict[str, Any] | None,
    client_headers: Mapping[str, str],
    hidden: tuple[str, ...],
) -> Watched:
    """The inspector's record of the turn being served (its request id and arrival from the
    request's context)."""
    fields = REQUEST_FIELDS.get() or {}
    watch = ring.open(
        request_id=str(fields.get("request_id") or "turn"),
        started=ARRIVED.get() or time.monotonic(),
        transport="websocket" if fields.get("method") == "WS" else "http",
        upstream=up.name,
        path=path,
        client=client,
        sent=sent,
        headers=client_headers,
        hidden=hidden,
    )
    watch.reasoning_field = up.profile.reasoning_field
    return watch


def inspect_whole(
    app: web.Application,
    client_headers: Mapping[str, str],
    up: Upstream,
    path: str,
    sent: dict[str, Any],
    client: dict[str, Any],
    answer: Any,
    result: dict[str, Any],
    answered_after: float,
    hidden: tuple[str, ...],
) -> None:
    """A turn answered whole (``stream`` false), for the inspector: the body sent, the backend's
    answer, and the body the client got. Nothing when the inspector is off."""
    ring = app.get(INSPECTOR)
    if ring is None:
        return
    hidden = tuple(s for s in (*hidden, *header_secrets(client_headers)) if len(s) >= 4)
    watch = _watch(ring, up, path, sent, client, client_headers, hidden)
    watch.whole = True
    watch.leg(1, shown_url(up.base_url + path), 200, {}, answered_after)
    watch.chunk(1, _scrub(orjson.dumps(redact(answer, hidden)), hidden))
    watch.event(_scrub(orjson.dumps(redact(result, hidden)), hidden))
    watch.end(str(result.get("status") or "ok"))


class Trace:
    """One streamed turn: its legs' reads, the quirks repaired, what the client was sent."""

    def __init__(
        self,
        up: Upstream,
        path: str,
        upstream_body: dict[str, Any],
        client_body: dict[str, Any] | None,
        hidden: tuple[str, ...],
        record: Path | None,
        request_id: str,
    ) -> None:
        self.up = up
        self.path = path
        self.upstream_body = upstream_body
        self.client_body = client_body
        self.hidden = tuple(s for s in hidden if len(s) >= 4)
        self.record = record
        self.request_id = request_id
        self.debug = TRACE.debug
        self.limit = TRACE.max_chars
        self.started = time.time()
        self.legs: list[Leg] = []
        self.quirks: list[dict[str, Any]] = []
        self.events: list[bytes] | None = [] if record is not None else None
        self.watch: Watched | None = None  # the inspector's record of the turn
        self.jsonl = False
        self.closed = False

    def sink(self, sink: Any) -> TapSink:
        return TapSink(sink, self)

    def pump(self, machine: Machine, upstream: Any, answered_after: float = 0.0) -> Pump:
        """The pump of the turn's next leg (``upstream``: its answer, for the status and headers;
        ``answered_after``: the seconds it took to answer)."""
        leg = Leg(self, len(self.legs) + 1, upstream, answered_after)
        self.legs.append(leg)
        return TapPump(machine, leg)

    def quirk(self, kind: str, count: int, leg: Leg, chunk: bytes | None) -> None:
        where = {"leg": leg.index, "read": leg.reads} if chunk is not None else {"leg": leg.index, "at": "end"}
        self.quirks.append({"kind": kind, "count": count, **where})
        if self.watch is not None:
            self.watch.quirk({"kind": kind, "count": count, **where})
        if self.debug:
            log.debug(
                "translation.quirk",
                kind=kind,
                count=count,
                upstream=self.up.name,
                **where,
                chunk=excerpt(chunk, self.limit, self.hidden),
            )

    def sent(self, payload: Any) -> None:
        """What a write to the client carried (recording, the inspector)."""
        if not payload or (self.events is None and self.watch is None):
            return
        if payload.__class__ is bytes:
            data = payload
        else:
            self.jsonl = True  # WebSocket documents (or a choice's outputs): one JSON value a line
            data = b"".join((doc if isinstance(doc, bytes) else orjson.dumps(doc)) + b"\n" for doc in payload)
        if self.events is not None:
            self.events.append(data)
        if self.watch is not None:
            self.watch.jsonl = self.jsonl
            self.watch.event(data)

    def close(self, ending: str) -> None:
        """The turn is over: the last chunks logged, the turn written. Acts once; never raises
        for a directory that cannot be written (the turn was served)."""
        if self.closed:
            return
        self.closed = True
        if self.watch is not None:
            self.watch.end(ending)
        if self.debug:
            for leg in self.legs:
                log.debug(
                    "upstream.last_chunk",
                    upstream=self.up.name,
                    leg=leg.index,
                    reads=leg.reads,
                    bytes=leg.size,
                    ending=ending,
                    chunk=excerpt(leg.last, self.limit, self.hidden),
                )
        if self.record is not None:
            try:
                where = self._write(ending)
            except OSError as exc:
                log.warning("record.failed", dir=str(self.record), error=exc.strerror or str(exc))
            else:
                log.info("record.written", dir=str(where))

    # -- the recorded turn ----------------------------------------------------------------------

    def _write(self, ending: str) -> Path:
        assert self.record is not None and self.events is not None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.started))
        name = f"{stamp}-{_UNSAFE_NAME.sub('_', self.request_id)[:100]}"
        where = self.record / name
        n = 1
        while True:
            try:
                where.mkdir()
                break
            except FileExistsError:
                n += 1
                where = self.record / f"{name}-{n}"
        hidden = self.hidden
        dump = orjson.OPT_INDENT_2
        files: dict[str, bytes] = {}
        if self.client_body is not None:
            files["request.json"] = orjson.dumps(redact(self.client_body, hidden), option=dump) + b"\n"
        files["upstream-request.json"] = orjson.dumps(redact(self.upstream_body, hidden), option=dump) + b"\n"
        for leg in self.legs:
            files[leg.file] = _scrub(b"".join(leg.chunks), hidden)
        events = "events.jsonl" if self.jsonl else "events.sse"
        files[events] = _scrub(b"".join(self.events), hidden)
        files["turn.json"] = orjson.dumps(self._meta(ending, events), option=dump) + b"\n"
        for file, data in files.items():
            (where / file).write_bytes(data)
        return where

    def _meta(self, ending: str, events: str) -> dict[str, Any]:
        up = self.up
        client = self.client_body or {}
        source = "chat" if self.path == "/chat/completions" else "responses"
        target = "chat" if "messages" in client else "responses"
        replay: str | None = None
        notes: list[str] = []
        if source != target:
            replay = f"crossfeed translate --from {source} --to {target} upstream.sse"
            if self.client_body is not None:
                replay += " --request request.json"
            if up.profile.reasoning_field != "reasoning_content":
                replay += f" --reasoning-field {up.profile.reasoning_field}"
            if self.jsonl:
                replay += " --jsonl"
            notes.append("ids and created_at are the replay's own (sequential, from the stream's `created`)")
        else:
            notes.append("a Responses stream relayed to a Responses client: `crossfeed translate` does not replay it")
        if len(self.legs) > 1:
            notes.append(f"{len(self.legs)} backend calls (hosted tools or compaction): a replay is of one stream")
        if up.profile.think_tags or up.profile.tool_markup:
            notes.append("this upstream's think_tags / tool_markup are not applied by `crossfeed translate`")
        return {
            "request_id": self.request_id,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "upstream": up.name,
            "api": f"{target} client, {source} backend",
            "ending": ending,
            "legs": [
                {
                    "file": leg.file,
                    "url": shown_url(leg.url),
                    "status": leg.status,
                    "headers": leg.headers,
                    "reads": leg.reads,
                    "bytes": leg.size,
                }
                for leg in self.legs
            ],
            "events": events,
            "quirks": self.quirks,
            "replay": replay,
            "notes": notes,
        }


class Leg:
    """One backend stream of a traced turn."""

    __slots__ = ("trace", "index", "file", "url", "status", "headers", "reads", "size", "first", "last", "chunks")

    def __init__(self, trace: Trace, index: int, upstream: Any, answered_after: float = 0.0) -> None:
        self.trace = trace
        self.index = index
        self.file = "upstream.sse" if index == 1 else f"upstream-{index}.sse"
        self.url = str(getattr(upstream, "url", "") or (trace.up.base_url + trace.path))
        self.status = getattr(upstream, "status", None)
        self.headers = redact_headers(getattr(upstream, "headers", None) or {})
        self.reads = 0
        self.size = 0
        self.first: bytes | None = None
        self.last: bytes | None = None
        self.chunks: list[bytes] = []
        if trace.watch is not None:
            trace.watch.leg(index, shown_url(self.url), self.status, self.headers, answered_after)

    def read(self, chunk: bytes) -> None:
        self.reads += 1
        self.size += len(chunk)
        self.last = chunk
        trace = self.trace
        if trace.events is not None:
            self.chunks.append(chunk)
        if trace.watch is not None:
            trace.watch.chunk(self.index, chunk)
        if self.first is None:
            self.first = chunk
            if trace.debug:
                log.debug(
                    "upstream.first_chunk",
                    upstream=trace.up.name,
                    leg=self.index,
                    chunk=excerpt(chunk, trace.limit, trace.hidden),
                )


class TapPump(Pump):
    """A ``Pump`` that shows its leg each read and each repair the machine made of it."""

    __slots__ = ("leg", "_seen")

    def __init__(self, machine: Machine, leg: Leg) -> None:
        super().__init__(machine)
        self.leg = leg
        self._seen = dict(getattr(machine, "diagnostics", None) or {})  # a later leg's machine shares them

    def feed(self, chunk: bytes) -> list[Out]:
        self.leg.read(chunk)
        out = Pump.feed(self, chunk)
        self._repaired(chunk)
        return out

    def finish(self) -> list[Out]:
        out = Pump.finish(self)
        self._repaired(None)
        return out

    def fail(self, code: str, message: str) -> list[Out]:
        out = Pump.fail(self, code, message)
        self._repaired(None)
        return out

    def _repaired(self, chunk: bytes | None) -> None:
        diagnostics = getattr(self.machine, "diagnostics", None)
        if not diagnostics or diagnostics == self._seen:
            return
        for kind, n in diagnostics.items():
            before = self._seen.get(kind, 0)
            if n > before:
                self.leg.trace.quirk(kind, n - before, self.leg, chunk)
        self._seen = dict(diagnostics)


class TapSink:
    """The turn's sink, with what each write carries shown to the trace (the relay sets
    ``open_stream`` on it: that goes to the transport's sink, where shutdown looks)."""

    __slots__ = ("inner", "trace", "render", "write", "empty", "framing")

    def __init__(self, inner: Any, trace: Trace) -> None:
        self.inner = inner
        self.trace = trace
        self.render = inner.render
        self.empty = inner.empty
        self.framing = inner.framing
        self.write = self._write if trace.events is not None or trace.watch is not None else inner.write

    @property
    def open_stream(self) -> Any:
        return self.inner.open_stream

    @open_stream.setter
    def open_stream(self, value: Any) -> None:
        self.inner.open_stream = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _write(self, payload: Any) -> None:
        self.trace.sent(payload)
        await self.inner.write(payload)

    async def flush(self) -> None:
        await self.inner.flush()

    async def keepalive(self) -> None:
        await self.inner.keepalive()

    async def close(self, last: Any) -> None:
        self.trace.sent(last)
        self.trace.sent(getattr(self.inner, "done_frame", b""))  # an SSE chat stream's [DONE]
        await self.inner.close(last)

    async def end(self, events: list[Any]) -> None:
        await self.close(self.render(events) if events else self.empty)
