"""OpenTelemetry tracing: off unless the ``otel`` extra is installed and the environment asks for it.

Tracing is on when the standard variables name an exporter: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` (other than ``none``), and
``OTEL_SDK_DISABLED`` is not true. Then, and only then, ``proxy/runtime/tracing_otel.py`` is
imported: the one module that imports ``opentelemetry``. Asked for without the extra installed,
one warning says so and the application runs untraced.

The hooks are functions of this module that read one context variable, the turn being traced
(set by ``Tracer.turn`` in the transport). Untraced, it is never set: a hook is a lookup that finds
None, once per turn, leg or tool call, and never on the per-chunk path. Call sites have no
branches of their own:

  Tracer.turn(headers, route, log, body)   the transport's turn (HTTP handler, WebSocket frame):
                                           the span every other one is under; the client's
                                           ``traceparent`` is its parent
  leg_start / leg_end                      one backend call (proxy/turns/exchange.py); its
                                           ``traceparent`` goes to the backend
  span(name, attributes)                   a hosted tool run, a compaction
  inject(headers)                          the current span's ``traceparent`` into a request's
                                           headers (a pass-through's, a tokenizer's, an MCP
                                           server's)
  responded(response_id)                   the turn's Response id (proxy/state/history.py): a
                                           turn of its own starts a chain named by it, and a
                                           turn continuing it gets the same
                                           ``gen_ai.conversation.id``

Untraced, the client's W3C trace context is passed on as it came: ``Tracer.turn`` keeps a valid
``traceparent`` (and its ``tracestate``, when bounded) in a second context variable, and
``leg_start`` and ``inject`` add those headers to every backend and MCP request of the turn. A
client that sends no ``traceparent`` costs a header lookup per turn; one that sends it, a
variable set per turn and a dict update per backend call. These two hooks are the one place the
trace headers of an upstream request are decided, traced or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Protocol

import structlog

log = structlog.get_logger("crossfeed")

_TRUE = ("true", "1", "yes", "on")
STOP_WAIT = 5.0  # seconds a stopping server waits for the last spans to be exported


class SpanHandle(Protocol):
    """What a ``span`` block gets: a way to say the work failed, and to add attributes."""

    def fail(self, why: str) -> None: ...
    def set(self, attributes: Mapping[str, Any]) -> None: ...


class LegHandle(Protocol):
    def end(self, *, pump: Any = None, stats: Any = None, result: Any = None, error: Any = None) -> None: ...


class TurnTrace(Protocol):
    """The live side of one traced turn (``tracing_otel.LiveTurn``)."""

    def leg(self, backend: Any, path: str, body: Mapping[str, Any], headers: dict[str, str]) -> LegHandle: ...
    def span(self, name: str, attributes: Mapping[str, Any]) -> contextlib.AbstractContextManager[SpanHandle]: ...
    def inject(self, headers: dict[str, str]) -> None: ...
    def hide(self, secrets: tuple[str, ...]) -> None: ...
    def responded(self, response_id: str) -> None: ...
    def end(self, log: Any, error: BaseException | None) -> None: ...


class LiveTracer(Protocol):
    def start_turn(
        self, headers: Mapping[str, str], route: str, body: Mapping[str, Any], operation: str
    ) -> TurnTrace: ...
    def shutdown(self) -> None: ...


class _NoSpan:
    __slots__ = ()

    def fail(self, why: str) -> None:
        return None

    def set(self, attributes: Mapping[str, Any]) -> None:
        return None


NO_SPAN = _NoSpan()
_NULL = contextlib.nullcontext(NO_SPAN)
_TURN: ContextVar[TurnTrace | None] = ContextVar("crossfeed_traced_turn", default=None)
_LEG: ContextVar[LegHandle | None] = ContextVar("crossfeed_traced_leg", default=None)
# Untraced: the client's trace context headers, passed on unchanged to the turn's upstream calls.
_PASSED: ContextVar[dict[str, str] | None] = ContextVar("crossfeed_client_trace", default=None)

# W3C Trace Context, version 00: trace id and parent id in lower-case hex, neither all zeros.
_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}")  # printable ASCII, at most the 512 the spec asks to keep


def wanted(environ: Mapping[str, str]) -> bool:
    """The environment asks for traces (the standard ``OTEL_*`` variables)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def capture_content(environ: Mapping[str, str]) -> bool:
    """The GenAI conventions' opt-in to message content on spans."""
    return environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() in _TRUE


class Tracer:
    """An application's tracer: ``live`` None (the default) traces nothing."""

    __slots__ = ("live",)

    def __init__(self, live: LiveTracer | None = None) -> None:
        self.live = live

    @property
    def on(self) -> bool:
        return self.live is not None

    def turn(
        self, headers: Mapping[str, str], route: str, log: Any, body: Mapping[str, Any], operation: str = "chat"
    ) -> contextlib.AbstractContextManager[Any]:
        """The block of one client turn; its span (``gen_ai.operation.name`` ``operation``) ends
        with the fields of the turn's ``log``. Untraced, the block passes the client's trace
        context on (``client_context``)."""
        if self.live is None:
            passed = client_context(headers)
            return _NULL if passed is None else _Passing(passed)
        return _traced_turn(self.live, headers, route, log, body, operation)

    def shutdown(self) -> None:
        """Export what is left and stop (blocking: run it off the event loop)."""
        if self.live is not None:
            self.live.shutdown()

    async def close(self, wait: float = STOP_WAIT) -> None:
        """``shutdown`` in a thread of its own, awaited ``wait`` seconds at most: a collector that
        does not answer (the exporter retries for ``OTEL_EXPORTER_OTLP_TIMEOUT``) does not hold
        up the server's stop; its spans are then given up, and a warning says so."""
        if self.live is None:
            return
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def run() -> None:
            try:
                self.shutdown()
            except Exception as exc:
                _broken(exc)
            finally:
                try:
                    loop.call_soon_threadsafe(_settle, done)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    pass

        threading.Thread(target=run, name="crossfeed-tracing-stop", daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(done), wait)
        except TimeoutError:
            log.warning(
                "tracing.export_abandoned", waited_seconds=wait, note="the collector did not take the last spans"
            )


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def client_context(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The client's W3C trace context to pass on untraced: its ``traceparent`` when it is a valid
    version 00 one, with its ``tracestate`` when that is printable and at most 512 characters;
    None otherwise (an invalid ``traceparent`` is dropped, and its ``tracestate`` with it)."""
    parent = headers.get("traceparent")
    if not parent or _TRACEPARENT.fullmatch(parent) is None:
        return None
    getall = getattr(headers, "getall", None)  # a header sent more than once is one list (RFC 9110)
    state = ",".join(getall("tracestate", ())) if getall is not None else headers.get("tracestate")
    if state and _TRACESTATE.fullmatch(state):
        return {"traceparent": parent, "tracestate": state}
    return {"traceparent": parent}


class _Passing:
    """An untraced turn's block when the client sent a trace context: set for the turn, then reset
    (an HTTP connection's next request runs in the same task)."""

    __slots__ = ("passed", "token")

    def __init__(self, passed: dict[str, str]) -> None:
        self.passed = passed

    def __enter__(self) -> None:
        self.token = _PASSED.set(self.passed)

    def __exit__(self, *exc: object) -> None:
        _PASSED.reset(self.token)


@contextlib.contextmanager
def _traced_turn(
    live: LiveTracer, headers: Mapping[str, str], route: str, log: Any, body: Mapping[str, Any], operation: str
) -> Iterator[None]:
    try:
        turn = live.start_turn(headers, route, body, operation)
    except Exception as exc:  # the turn runs untraced, the client's trace context passed on
        _broken(exc)
        passed = client_context(headers)
        with contextlib.nullcontext() if passed is None else _Passing(passed):
            yield
        return
    token = _TURN.set(turn)
    failed: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failed = exc
        raise
    finally:
        _TURN.reset(token)
        try:
            turn.end(log, failed)
        except Exception as exc:
            _broken(exc)


def configure(environ: Mapping[str, str]) -> Tracer:
    """The application's tracer, from the ``OTEL_*`` variables: untraced unless they ask for it
    and the extra is installed."""
    if not wanted(environ):
        return Tracer()
    try:
        from crossfeed.proxy.runtime import tracing_otel
    except ImportError as exc:
        log.warning(
            "tracing.unavailable",
            error=str(exc),
            note="OTEL_* variables ask for traces but the extra is not installed: pip install 'crossfeed[otel]'",
        )
        return Tracer()
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if protocol.strip().lower() not in ("", "http/protobuf"):
        log.warning(
            "tracing.protocol_unsupported",
            protocol=protocol,
            note="the spans are sent as OTLP over HTTP with protobuf (the collector's HTTP port, 4318 by default)",
        )
    return Tracer(tracing_otel.live_tracer(environ, capture_content(environ)))


# -- the hooks: each one lookup when untraced ------------------------------------------------------


def leg_start(
    backend: Any, path: str, body: Mapping[str, Any], headers: dict[str, str], secrets: tuple[str, ...]
) -> None:
    """A backend call begins: its span, and its ``traceparent`` in ``headers`` (untraced, the
    client's trace context, if it sent one)."""
    turn = _TURN.get()
    if turn is None:
        passed = _PASSED.get()
        if passed is not None:
            headers.update(passed)
    else:
        try:
            turn.hide(secrets)
            _LEG.set(turn.leg(backend, path, body, headers))
        except Exception as exc:
            _broken(exc)


def leg_end(*, pump: Any = None, stats: Any = None, result: Any = None, error: Any = None) -> None:
    """The current backend call ended: with a stream's pump (its machine) and relay figures, a
    whole answer (``result``), or an exception."""
    leg = _LEG.get()
    if leg is not None:
        _LEG.set(None)
        try:
            leg.end(pump=pump, stats=stats, result=result, error=error)
        except Exception as exc:
            _broken(exc)


def _broken(exc: Exception) -> None:
    """A failure of tracing's own is logged; it never fails the turn it traces."""
    log.error("tracing.failed", error=repr(exc))


def span(name: str, attributes: Mapping[str, Any]) -> contextlib.AbstractContextManager[SpanHandle]:
    """A span of the traced turn (a tool run, a compaction), current inside the block."""
    turn = _TURN.get()
    return _NULL if turn is None else turn.span(name, attributes)


def inject(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the current span's ``traceparent`` added; untraced, with the client's
    trace context if it sent one (else the same object)."""
    turn = _TURN.get()
    if turn is None:
        passed = _PASSED.get()
        return headers if passed is None else {**headers, **passed}
    out = dict(headers)
    turn.inject(out)
    return out


def responded(response_id: str) -> None:
    """The traced turn's Response has its id (it is about to be saved): the session's name when
    the turn started a chain, and the chain a later turn's ``previous_response_id`` continues."""
    turn = _TURN.get()
    if turn is not None:
        try:
            turn.responded(response_id)
        except Exception as exc:
            _broken(exc)
