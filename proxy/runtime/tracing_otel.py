"""The OpenTelemetry side of tracing: imported by ``tracing.configure`` only, when the environment
asks for traces and the ``otel`` extra is installed. The one module that imports ``opentelemetry``.

Each application gets a ``TracerProvider`` of its own (not the process's global one), set up as the
SDK sets itself up from the standard variables: the sampler (``OTEL_TRACES_SAMPLER``,
``OTEL_TRACES_SAMPLER_ARG``), the resource (``OTEL_SERVICE_NAME``, default ``crossfeed``;
``OTEL_RESOURCE_ATTRIBUTES``), the batch processor (``OTEL_BSP_*``), and the exporter:
``OTEL_TRACES_EXPORTER`` ``otlp`` (the default: OTLP over HTTP/protobuf, its endpoint, headers,
timeout and compression from ``OTEL_EXPORTER_OTLP_*``) or ``console``. The propagators are the
process's (``OTEL_PROPAGATORS``, W3C trace context and baggage by default).

Attributes follow the GenAI semantic conventions. Message content is recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, credentials redacted
(``turn_trace.redact``: secret fields by name, header values, the backend's and the client's keys).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from crossfeed.proxy.errors import UpstreamHTTPError
from crossfeed.proxy.runtime import sessions
from crossfeed.proxy.runtime.sessions import Session
from crossfeed.proxy.runtime.turn_trace import header_secrets, redact

SCOPE = "crossfeed"
CHAINS = 10_000  # response ids whose session a tracer remembers (a chain's later turns find it)


def live_tracer(environ: Mapping[str, str], content: bool) -> LiveTracer:
    attributes = {}
    if not environ.get("OTEL_SERVICE_NAME") and "service.name=" not in environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = "crossfeed"
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(_exporter(environ)))
    return LiveTracer(provider, content)


def _exporter(environ: Mapping[str, str]) -> SpanExporter:
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


class LiveTracer:
    def __init__(self, provider: TracerProvider, content: bool) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)
        self.content = content
        self.chains: collections.OrderedDict[str, Session] = collections.OrderedDict()

    def remember(self, response_id: str, session: Session) -> None:
        """A turn's response id and its session: a turn that continues it is of the same one."""
        self.chains[response_id] = session
        self.chains.move_to_end(response_id)
        while len(self.chains) > CHAINS:
            self.chains.popitem(last=False)

    def start_turn(
        self, headers: Mapping[str, str], route: str, body: Mapping[str, Any], operation: str = "chat"
    ) -> LiveTurn:
        return LiveTurn(self, headers, route, body, operation)

    def shutdown(self) -> None:
        self.provider.shutdown()


def _now() -> float:
    return asyncio.get_running_loop().time()


class LiveTurn:
    """One traced client turn: its span (current while the turn runs) and what its legs found."""

    def __init__(
        self, tracer: LiveTracer, headers: Mapping[str, str], route: str, body: Mapping[str, Any], operation: str
    ) -> None:
        self.live = tracer
        self.tracer = tracer.tracer
        self.operation = operation  # gen_ai.operation.name: "chat", or "count_tokens" (input_tokens)
        self.body = body if tracer.content else None
        self.hidden = set(header_secrets(headers))
        self.started = _now()
        self.first_data = 0.0
        self.response_model: str | None = None
        self.tokens = [0, 0]  # the legs' usage, in and out: the turn's when its log has none
        self.output: Any = None
        self.open: set[LiveLeg] = set()
        attributes = {"gen_ai.operation.name": operation, "crossfeed.route": route}
        # the session, as the inspector resolves it: a chain's turns share its first response's id
        self.session = sessions.resolve(body, headers, tracer.chains)
        self.response_id: str | None = None
        if self.session is not None:
            attributes["gen_ai.conversation.id"] = self.session[1]
        client = propagate.extract(headers)  # the client's traceparent, tracestate and baggage
        self.root = self.tracer.start_span(
            f"{operation} {body.get('model') or ''}".strip(),
            context=client,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        self.token = otel_context.attach(trace.set_span_in_context(self.root, client))

    def hide(self, secrets: tuple[str, ...]) -> None:
        self.hidden.update(secrets)

    def responded(self, response_id: str) -> None:
        if self.response_id is None:
            self.response_id = response_id
            if self.session is None:  # a turn of its own starts a chain: its response names it
                self.session = sessions.started(response_id)
                self.root.set_attribute("gen_ai.conversation.id", response_id)
            self.live.remember(response_id, self.session)

    def leg(self, backend: Any, path: str, body: Mapping[str, Any], headers: dict[str, str]) -> LiveLeg:
        leg = LiveLeg(self, backend, path, body)
        propagate.inject(headers, context=trace.set_span_in_context(leg.span))
        self.open.add(leg)
        return leg

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Handle]:
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield Handle(span)

    def inject(self, headers: dict[str, str]) -> None:
        propagate.inject(headers)

    def end(self, log: Any, error: BaseException | None) -> None:
        left = None if error is None or isinstance(error, asyncio.CancelledError) else error
        try:
            for leg in list(self.open):  # a leg the turn left (cancelled, or failed between two reads)
                leg.end(error=left)
            self._record(log, error)
        finally:  # the span ends and the context is restored whatever went wrong in recording it
            self.root.end()
            otel_context.detach(self.token)

    def _record(self, log: Any, error: BaseException | None) -> None:
        span = self.root
        model = log.get("model")
        if model:
            span.update_name(f"{self.operation} {model}")
        usage = log.get("usage") or ({"in": self.tokens[0], "out": self.tokens[1]} if any(self.tokens) else {})
        span.set_attributes(
            _present(
                {
                    "gen_ai.request.model": model,
                    "gen_ai.response.model": self.response_model,
                    "gen_ai.usage.input_tokens": usage.get("in", log.get("counted")),
                    "gen_ai.usage.output_tokens": usage.get("out"),
                    "gen_ai.response.finish_reasons": [log["terminal"]] if log.get("terminal") else None,
                    "gen_ai.response.time_to_first_chunk": self.first_data - self.started if self.first_data else None,
                    "crossfeed.upstream": log.get("upstream"),
                    "crossfeed.stream": log.get("stream"),
                    "crossfeed.ending": log.get("ending"),
                    "crossfeed.hosted_calls": log.get("hosted_calls"),
                    "crossfeed.compacted": log.get("compacted"),
                    "crossfeed.token_count": log.get("counted_by"),
                }
            )
        )
        if self.body is not None:
            span.set_attributes(self._content())
        if error is not None:
            _failed(span, error, server=True)

    def _content(self) -> dict[str, str]:
        """The opted-in message content, credentials redacted."""
        hidden = tuple(s for s in self.hidden if s)
        body = self.body or {}
        found = {
            "gen_ai.system_instructions": body.get("instructions"),
            "gen_ai.input.messages": body.get("input", body.get("messages")),
            "gen_ai.output.messages": self.output,
        }
        return {k: orjson.dumps(redact(v, hidden)).decode() for k, v in found.items() if v is not None}


class LiveLeg:
    """One backend call: a client span, child of the turn's (or of the compaction's)."""

    def __init__(self, turn: LiveTurn, backend: Any, path: str, body: Mapping[str, Any]) -> None:
        self.turn = turn
        self.started = _now()
        model = body.get("model")
        url = urlsplit(backend.base_url)
        self.span = turn.tracer.start_span(
            f"{turn.operation} {model or ''}".strip(),
            kind=SpanKind.CLIENT,
            attributes=_present(
                {
                    "gen_ai.operation.name": turn.operation,
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": model,
                    "gen_ai.request.max_tokens": body.get("max_tokens", body.get("max_output_tokens")),
                    "gen_ai.request.temperature": body.get("temperature"),
                    "gen_ai.request.top_p": body.get("top_p"),
                    "server.address": url.hostname,
                    "server.port": url.port,
                    "url.path": url.path.rstrip("/") + path,
                    "crossfeed.upstream": backend.name,
                    "crossfeed.upstream.api": backend.api,
                    "crossfeed.stream": bool(body.get("stream")),
                }
            ),
        )

    def end(self, *, pump: Any = None, stats: Any = None, result: Any = None, error: Any = None) -> None:
        if self not in self.turn.open:
            return
        self.turn.open.discard(self)
        try:
            self._record(pump, stats, result, error)
        finally:  # the span ends whatever went wrong in recording it
            self.span.end()

    def _record(self, pump: Any, stats: Any, result: Any, error: Any) -> None:
        turn, span = self.turn, self.span
        if pump is not None:
            self._machine(pump.machine)
        if isinstance(result, dict):
            self._result(result)
        if stats is not None:
            if stats.first_data:
                span.set_attribute("gen_ai.response.time_to_first_chunk", stats.first_data - self.started)
                if not turn.first_data:
                    turn.first_data = stats.first_data
            span.set_attribute("crossfeed.ending", stats.ending)
            if stats.ending not in ("ok", "client_disconnected"):
                span.set_status(Status(StatusCode.ERROR, stats.error or stats.ending))
                span.set_attribute("error.type", stats.ending)
        if error is not None:
            _failed(span, error)
            if isinstance(error, UpstreamHTTPError):
                span.set_attribute("http.response.status_code", error.status)

    def _machine(self, machine: Any) -> None:
        """What a stream's machine knows of this call: the forward machines (a tool loop's or a
        compaction's leg wraps one as ``main``) keep each call's finish reason and usage
        (``LegEnd``), the reverse machine the chat answer's; the Response, once it is final."""
        span, inner = self.span, getattr(machine, "main", machine)
        ended = getattr(inner, "leg", None)
        if ended is not None and hasattr(ended, "finish_reason"):
            reason, usage = ended.finish_reason, ended.usage
        else:
            reason, usage = getattr(inner, "finish_reason", None), getattr(inner, "usage", None)
        span.set_attributes(_present({"gen_ai.response.finish_reasons": _list(reason)}))
        _usage(span, usage, self.turn.tokens)
        final = getattr(inner, "final_response", None)
        if isinstance(final, dict):
            self.turn.output = final.get("output")
            span.set_attributes(
                _present({"gen_ai.response.model": final.get("model"), "gen_ai.response.id": final.get("id")})
            )
            if isinstance(final.get("model"), str):
                self.turn.response_model = final["model"]

    def _result(self, result: dict[str, Any]) -> None:
        """A chat completion's or a Response's model, id, usage, finish reasons."""
        span, turn = self.span, self.turn
        model = result.get("model")
        if isinstance(model, str):
            turn.response_model = model
        choices = result.get("choices")
        if isinstance(choices, list):
            reasons = [c.get("finish_reason") for c in choices if isinstance(c, dict) and c.get("finish_reason")]
            turn.output = [c.get("message") for c in choices if isinstance(c, dict)]
        else:
            reasons = [result["status"]] if result.get("status") else []
            turn.output = result.get("output")
        span.set_attributes(
            _present(
                {
                    "gen_ai.response.model": model,
                    "gen_ai.response.id": result.get("id"),
                    "gen_ai.response.finish_reasons": [str(r) for r in reasons] if reasons else None,
                }
            )
        )
        _usage(span, result.get("usage"), turn.tokens)
        if result.get("object") == "response.input_tokens":  # a token count's answer
            span.set_attributes(_present({"gen_ai.usage.input_tokens": result.get("input_tokens")}))


class Handle:
    """The handle a ``span`` block gets."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def fail(self, why: str) -> None:
        self.span.set_status(Status(StatusCode.ERROR, why))
        self.span.set_attribute("error.type", "tool_error")

    def set(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes(_present(dict(attributes)))


def _usage(span: Span, usage: Any, tokens: list[int]) -> None:
    """A call's usage (Responses' or chat's names) on its span, and added to its turn's ``tokens``."""
    if isinstance(usage, dict):
        tokens_in = usage.get("input_tokens", usage.get("prompt_tokens"))
        tokens_out = usage.get("output_tokens", usage.get("completion_tokens"))
        span.set_attributes(
            _present({"gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out})
        )
        for i, n in enumerate((tokens_in, tokens_out)):
            if isinstance(n, int):
                tokens[i] += n


def _failed(span: Span, error: BaseException, *, server: bool = False) -> None:
    """An exception out of a span's work: its code as ``error.type``, and an error status; on the
    turn's (``server``) span not when it is the client's (a 4xx). A client that left (cancelled)
    is no error."""
    if isinstance(error, asyncio.CancelledError):
        span.set_attribute("crossfeed.ending", "cancelled")
        return
    code = getattr(error, "code", None)
    span.set_attribute("error.type", str(code) if code else type(error).__qualname__)
    status = getattr(error, "status", 500)
    if not server or not isinstance(status, int) or status >= 500:
        span.set_status(Status(StatusCode.ERROR, str(getattr(error, "message", "") or error)[:500]))
        span.record_exception(error)


def _list(value: Any) -> list[str] | None:
    return [str(value)] if value else None


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes with a value (OpenTelemetry takes no None)."""
    return {k: v for k, v in attributes.items() if v is not None and v != ""}
