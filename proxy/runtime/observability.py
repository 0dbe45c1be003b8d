"""Metrics, request ids and the one summary log line per request.

- Every request gets an id: the client's ``X-Request-ID`` when it sends a sane one, else a new
  one. It is bound to every log line of the request (``logs.REQUEST_FIELDS``) and returned in the
  ``X-Request-ID`` response header, streams included.
- Handlers describe their work in ``request[SUMMARY]`` (a ``TurnLog``); the middleware adds
  status and timings and writes ``request.completed`` once, and feeds the Prometheus metrics.
- Metrics live in a per-application registry (no global state), served at ``GET /metrics``.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypedDict

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, GCCollector, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from crossfeed.proxy.errors import ClientRequestError, error_response
from crossfeed.proxy.runtime.logs import ARRIVED, REQUEST_FIELDS
from crossfeed.proxy.runtime.request_series import LocalFamilies, Record, SharedFamilies

# Request ids: a random per-process prefix and a counter: unique across replicas and restarts,
# and far cheaper than a uuid per request.
_ID_PREFIX = "req_" + os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


class TurnLog(TypedDict, total=False):
    """A request's (or a WebSocket turn's) fields on its summary line (``request.completed``), in
    the order they were set; ``record_request`` adds the status and the timings. A dict at run
    time, written as it is: set fields with ``log[key] = value`` or ``log.update({...})``."""

    transport: str  # "websocket": the socket's own line (websocket.closed), and each of its turns'
    key: str | None  # the inbound key's name
    model: str
    upstream: str | None
    replica: str  # a pool's replica that answered (its label, never its URL)
    continued: int  # a pool's continuations of the answer on another replica (proxy/turns/continuation.py)
    retried: int  # a pool's whole answers asked again of another replica (exchange.whole_leg)
    answered_model: str  # the model a pool's fallback upstream answered with
    stream: bool
    choices: int  # n > 1 (reverse)
    primed: bool  # a WebSocket generate: false
    compacted: bool
    ttfb: float  # seconds until the upstream answered: written as ttfb_ms
    ttfb_ms: float
    ending: str | None  # how the stream ended: ok, client_disconnected, upstream_idle_timeout, ...
    events_in: int
    events_out: int
    error: str | None
    terminal: str | None  # the Response's status, or the chat finish reason
    usage: dict[str, int] | None  # tokens in and out
    hosted_calls: int
    steered: int  # WebSocket steering input items applied inside the Response
    stream_id: str  # the WebSocket lane of a multiplexed turn
    joined: str  # a detached turn resent ([runs] detach_on_disconnect): the run it joined
    counted: int  # POST /v1/responses/input_tokens: the count
    counted_by: str  # how: the tokenizer's kind, "estimate", or "upstream" (a Responses backend's)
    turns: int  # a socket's turns
    close_code: int


SUMMARY = web.RequestKey[TurnLog]("crossfeed_summary")
REQUEST_ID = web.RequestKey("request_id", str)
SENT_STATUS = web.RequestKey("sent_status", int)  # the status of a response whose headers went out
STOPPING = web.AppKey("stopping", asyncio.Event)  # set when the server starts to stop
_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# No ``*_created`` series: a scrape gets the counts, not a timestamp per series (process-wide).
disable_created_metrics()

MAX_MODEL_LABELS = 200


class _OpenStreams(Collector):
    """``crossfeed_active_streams``, read at scrape time from the per-upstream counts the stream
    limits keep anyway: no second counter to update on every stream."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("crossfeed_active_streams", "Streams open right now", labels=["upstream"])
        for name, n in sorted(self._counts().items()):
            family.add_metric([name], n)
        yield family


class Metrics:
    def __init__(self, open_streams: Callable[[], Mapping[str, int]] = dict, shared_dir: str | None = None) -> None:
        """``open_streams``: the number of streams open per upstream, read at each scrape.

        ``shared_dir``: the workers of ``serve --workers`` record into prometheus-client's
        multiprocess files there (the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` before they
        start, so the values are mmap-backed) and a scrape of any worker reads the sum of all;
        open streams are then a gauge each worker sets (``streams_changed``), summed over the
        live ones."""
        self.registry = r = CollectorRegistry()
        self.streams_changed: Callable[[str, int], None] | None = None
        # The series every request records (request_series.py): shared between workers, else
        # plain numbers in this process.
        self._families: LocalFamilies | SharedFamilies
        if shared_dir:
            from prometheus_client import Gauge, multiprocess

            self.registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(self.registry, path=shared_dir)
            active = Gauge(
                "crossfeed_active_streams",
                "Streams open right now",
                ["upstream"],
                multiprocess_mode="livesum",
                registry=r,
            )
            self.streams_changed = lambda upstream, n: active.labels(upstream).set(n)
            self._families = SharedFamilies(r)
        else:
            r.register(_OpenStreams(open_streams))
            self._families = LocalFamilies()
            r.register(self._families)
            # The cyclic collector's passes and what they freed, read at each scrape
            # (proxy/runtime/collector.py); one process's own, so not with --workers.
            GCCollector(registry=r)
        self.upstream_errors = Counter(
            "crossfeed_upstream_errors", "Upstream failures by kind", ["upstream", "kind"], registry=r
        )
        self.store_failures = Counter("crossfeed_store_failures", "Response store failures", ["operation"], registry=r)
        # Failed saves kept for retry (proxy/state/store_retry.py): how many are held now, what became of them.
        from prometheus_client import Gauge as RetryGauge

        self.store_retry_queue = RetryGauge(
            "crossfeed_store_retry_queue",
            "Failed saves held in memory for retry, right now",
            ["unit"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.store_retries = Counter(
            "crossfeed_store_retries", "Failed saves held for retry, by outcome", ["outcome"], registry=r
        )
        self.store_lost = Counter(
            "crossfeed_store_saves_lost", "Responses never saved (given up), by reason", ["reason"], registry=r
        )
        self.anomalies = Counter(
            "crossfeed_translation_anomalies", "Upstream quirks absorbed by translation", ["kind"], registry=r
        )
        self._pool_metrics(r, RetryGauge)
        self._run_metrics(r, RetryGauge)
        self._request_series: dict[tuple[str, str, int, str], Record] = {}
        self._models: set[str] = set()

    def _run_metrics(self, r: CollectorRegistry, gauge: Any) -> None:
        """Runs (proxy/turns/background.py): background responses and detached streamed turns."""
        self.runs_active = gauge(
            "crossfeed_runs_active",
            "Runs (background or detached responses) going on in this process right now",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.runs_ended = Counter(
            "crossfeed_runs", "Runs ended, by the Response's final status", ["status"], registry=r
        )
        self.runs_joined = Counter(
            "crossfeed_runs_joined", "Resent identical turns answered from a detached turn's run", registry=r
        )

    def _pool_metrics(self, r: CollectorRegistry, gauge: Any) -> None:
        """Pools (proxy/runtime/pool.py): each replica's health as this process sees it, and the calls moved."""
        self.replica_up = gauge(
            "crossfeed_upstream_replica_up",
            "1: the replica takes calls; 0: it is cooling down after failures (in any live worker)",
            ["upstream", "replica"],
            multiprocess_mode="livemin",
            registry=r,
        )
        self.failovers = Counter(
            "crossfeed_upstream_failovers",
            "Calls tried again on another replica before the first byte",
            ["upstream"],
            registry=r,
        )
        self.fallbacks = Counter(
            "crossfeed_upstream_fallbacks",
            "Calls sent to the fallback upstream: no replica answered",
            ["upstream"],
            registry=r,
        )
        self.affinity_moves = Counter(
            "crossfeed_upstream_affinity_moves",
            "Conversations moved off their replica (it was down, failed or at its stream cap)",
            ["upstream"],
            registry=r,
        )
        self.continuations = Counter(
            "crossfeed_upstream_continuations",
            "Answers whose replica died mid-answer, continued on another replica (outcome: continued; "
            "retried: a whole non-streamed answer asked again; failed: none could take it)",
            ["upstream", "outcome"],
            registry=r,
        )

    def model_label(self, model: str) -> str:
        """Client-chosen model names become labels: bounded, so no client can explode the series;
        a request without one is ``none`` (never an empty label)."""
        if not model:
            return "none"
        if model in self._models:
            return model
        if len(self._models) >= MAX_MODEL_LABELS:
            return "other"
        self._models.add(model)
        return model

    def request_series(self, route: str, model: str, status: int, key_name: str = "none") -> Record:
        """What records a request of one (route, model, status, key name) in its series, found
        with one lookup (request_series.py)."""
        key = (route, model, status, key_name)
        found = self._request_series.get(key)
        if found is None:
            found = self._request_series[key] = self._families.series(route, model, status, key_name)
        return found


METRICS = web.AppKey("metrics", Metrics)
# The summary line's logger, bound once when the app is made (with the logging configured then):
# a lazy module-level logger would rebuild itself on every call, and this line runs per request.
SUMMARY_LOG = web.AppKey("summary_log", structlog.typing.FilteringBoundLogger)


# The key GET /metrics requires ([server] metrics_key_env), when one is configured.
METRICS_KEY = web.AppKey("metrics_key", bytes)


async def metrics_endpoint(request: web.Request) -> web.Response:
    key = request.app.get(METRICS_KEY)
    if key is not None and not _bearer_is(request, key):
        return error_response(
            ClientRequestError(
                "GET /metrics needs the metrics key: send Authorization: Bearer <key>.",
                status=401,
                code="invalid_api_key",
            ),
            headers={"WWW-Authenticate": "Bearer"},
        )
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _bearer_is(request: web.Request, key: bytes) -> bool:
    header = request.headers.get("Authorization", "")
    token = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
    return hmac.compare_digest(token, key)


def metrics_app(main: web.Application) -> web.Application:
    """The listener of ``[server] metrics_port``: ``GET /metrics`` of ``main``'s registry (the
    same key, if one is required), and nothing else."""
    app = web.Application()
    app[METRICS] = main[METRICS]
    key = main.get(METRICS_KEY)
    if key is not None:
        app[METRICS_KEY] = key
    app.router.add_get("/metrics", metrics_endpoint)
    return app


def _route_of(request: web.Request) -> str:
    info = request.match_info.route.resource
    return info.canonical if info is not None else "unmatched"


@web.middleware
async def observe_middleware(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    incoming = request.headers.get("X-Request-ID", "")
    request_id = incoming if incoming and _REQUEST_ID_OK.match(incoming) else f"{_ID_PREFIX}{next(_ID_COUNTER):x}"
    request[REQUEST_ID] = request_id
    summary: TurnLog = {}
    request[SUMMARY] = summary
    route = _route_of(request)
    token = REQUEST_FIELDS.set({"request_id": request_id, "route": route, "method": request.method})
    start = time.monotonic()
    ARRIVED.set(start)
    status = 500
    try:
        response = await handler(request)
        status = response.status
        if not response.prepared:
            response.headers["X-Request-ID"] = request_id
        return response
    except asyncio.CancelledError:
        # The handler was cancelled: its client went away (aiohttp cancels the handler of a closed
        # connection), or the server stopped it at the end of a drain. Neither is a failure of
        # crossfeed or the backend, so neither is a 5xx: a socket that was upgraded stays 101, an
        # HTTP request whose client left is 499 (the client closed the request, as nginx logs it).
        status = _cancelled_status(request, summary)
        raise
    finally:
        if summary.get("transport") == "websocket":  # each turn was recorded; this is the socket
            if route != "/metrics":
                request.app[SUMMARY_LOG].info(
                    "websocket.closed",
                    status=status,
                    duration_ms=round((time.monotonic() - start) * 1000, 1),
                    **summary,
                )
        else:
            record_request(request.app, route, summary, status, time.monotonic() - start)
        REQUEST_FIELDS.reset(token)


# Status of a request whose client left before its answer (nginx's "client closed request").
CLIENT_CLOSED_REQUEST = 499


def _cancelled_status(request: web.Request, summary: TurnLog) -> int:
    """The status logged for a cancelled handler, with how it ended on its line: ``101`` for a
    WebSocket (it was upgraded; the client left without a close frame, as Codex does), the
    status already sent for a response that had started (the stream was cut), else ``499``."""
    stopping = request.app.get(STOPPING)
    ending = "server_stopped" if stopping is not None and stopping.is_set() else "client_disconnected"
    if summary.get("transport") == "websocket":
        summary.setdefault("ending", ending)
        return 101
    summary.setdefault("terminal", ending)
    return request.get(SENT_STATUS, CLIENT_CLOSED_REQUEST)


async def mark_stopping(app: web.Application) -> None:
    """on_shutdown: handlers cancelled from now on were stopped by the server, not their client."""
    app[STOPPING].set()


def note_upstream_error(app: web.Application, summary: TurnLog, code: str | None) -> None:
    """An upstream failure that became the request's error answer: counted, and on its line."""
    app[METRICS].upstream_errors.labels(summary.get("upstream") or "none", code or "error").inc()
    summary["error"] = code


def record_request(app: web.Application, route: str, summary: TurnLog, status: int, duration: float) -> None:
    """One request's (or WebSocket turn's) metrics and its summary line."""
    metrics = app[METRICS]
    model = metrics.model_label(str(summary.get("model") or ""))
    record = metrics.request_series(route, model, status, str(summary.get("key") or "none"))
    ttfb = summary.pop("ttfb", None)
    record(duration, ttfb, summary.get("usage"), summary.get("terminal"))
    if ttfb is not None:
        summary["ttfb_ms"] = round(ttfb * 1000, 1)
    if route != "/metrics":
        log = app[SUMMARY_LOG]
        duration_ms = round(duration * 1000, 1)
        if "status" in summary or "duration_ms" in summary or "event" in summary:  # the call's own error, as before
            log.info("request.completed", status=status, duration_ms=duration_ms, **summary)
        else:
            summary_line(log, "request.completed", {"status": status, "duration_ms": duration_ms, **summary})


_INFO = 20  # logging.INFO


def summary_line(log: Any, event: str, fields: dict[str, Any]) -> None:
    """``log.info(event, **fields)`` as structlog runs it (``BoundLoggerBase._process_event``: the
    bound context, then the fields, then ``event``, through every processor, the result to the
    wrapped logger's ``info``), without the three times structlog packs the fields into keyword
    arguments again on the way: this line is written for every request (what that saves is measured in
    docs/DESIGN.md). A logger that is not a structlog bound
    logger, or that filters out info, gets the plain call."""
    processors = getattr(log, "_processors", None)
    enabled = getattr(log, "is_enabled_for", None)
    context = getattr(log, "_context", None)
    logger = getattr(log, "_logger", None)
    # structlog's private attributes: a release that renames them gets the plain call, never a failure
    if processors is None or enabled is None or context is None or logger is None or not enabled(_INFO):
        log.info(event, **fields)
        return
    event_dict: Any = {**context, **fields} if context else fields
    event_dict["event"] = event
    try:
        for proc in processors:
            event_dict = proc(logger, "info", event_dict)
    except structlog.DropEvent:
        return
    if isinstance(event_dict, (str, bytes, bytearray)):
        logger.info(event_dict)
    elif isinstance(event_dict, tuple):
        logger.info(*event_dict[0], **event_dict[1])
    elif isinstance(event_dict, dict):
        logger.info(**event_dict)
    else:
        raise ValueError("Last processor didn't return an appropriate value.")


async def add_request_id_header(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: streamed responses get the id too (headers go before the body)."""
    request[SENT_STATUS] = response.status
    request_id = request.get(REQUEST_ID)
    if request_id and "X-Request-ID" not in response.headers:
        response.headers["X-Request-ID"] = request_id


def usage_summary(response: dict[str, Any] | None) -> dict[str, int] | None:
    """The token counts of a Response or chat completion, for the summary line and metrics."""
    return usage_counts(response.get("usage") if isinstance(response, dict) else None)


def usage_counts(usage: Any) -> dict[str, int] | None:
    """``{"in", "out"}`` from a Responses or Chat ``usage`` object. It may come straight from the
    upstream, so a count that is not a non-negative integer is taken as 0."""
    if not isinstance(usage, dict):
        return None
    get = usage.get  # (inline: this runs for every request)
    n_in = get("input_tokens")
    if type(n_in) is not int or n_in <= 0:
        n_in = get("prompt_tokens")
        if type(n_in) is not int or n_in <= 0:
            n_in = 0
    n_out = get("output_tokens")
    if type(n_out) is not int or n_out <= 0:
        n_out = get("completion_tokens")
        if type(n_out) is not int or n_out <= 0:
            n_out = 0
    return {"in": n_in, "out": n_out}
