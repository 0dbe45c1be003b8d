"""The series every request records: its count, its duration, its time to first byte, its tokens
and how its stream ended, one lookup per request (``Record``).

One process (``serve``, one worker): the values are plain numbers in this process, updated with
no lock (the event loop is the only writer) and turned into metric families when ``/metrics`` is
scraped (``LocalFamilies``). prometheus-client's own ``Counter.inc`` and ``Histogram.observe``
take a lock per call and walk the buckets in Python: with them the metrics of a short turn
cost 58,000 instructions, recorded here 23,000 (docs/benchmark.md).

Several workers (``serve --workers``): the values must be shared between processes, so they are
prometheus-client's mmap-backed ones (``SharedFamilies``). Both expose the same families under
the same names, labels and buckets.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_BOUNDS = tuple(float(b) for b in TIME_BUCKETS)
_LE = [floatToGoString(b) for b in _BOUNDS] + ["+Inf"]

# name, help text, labels
REQUESTS = ("crossfeed_requests", "Requests handled", ("route", "model", "status", "key"))
TTFB = ("crossfeed_time_to_first_byte_seconds", "Time until the upstream answered", ("route",))
DURATION = ("crossfeed_request_duration_seconds", "Whole request duration", ("route",))
TOKENS = ("crossfeed_tokens", "Tokens reported by upstreams", ("model", "direction"))
TERMINALS = ("crossfeed_terminal_events", "How streams ended", ("route", "terminal"))


Record = Callable[[float, float | None, dict[str, int] | None, str | None], None]
"""One request into its series: (duration, time to first byte, usage {"in", "out"}, terminal);
the last three None (or empty) when the request has none."""


class _Hist:
    """One histogram series: a count per bucket (not cumulative; the last one is +Inf) and the sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BOUNDS) + 1)
        self.sum = 0.0


class _LocalSeries:
    """The cells one (route, model, status, key name) adds to; those a request may not have
    (time to first byte, tokens, terminals) are found on first use, so no series of them is
    exported before a request records one (as with prometheus-client's labelled series)."""

    __slots__ = ("_families", "_route", "_model", "_count", "_duration", "_ttfb", "_tokens", "_terminals")

    def __init__(self, families: LocalFamilies, route: str, model: str, status: int, key_name: str) -> None:
        self._families = families
        self._route = route
        self._model = model
        self._count = families.requests.setdefault((route, model, str(status), key_name), [0])
        self._duration = families.duration.setdefault(route, _Hist())
        self._ttfb: _Hist | None = None
        self._tokens: tuple[list[int], list[int]] | None = None
        self._terminals: dict[str, list[int]] = {}

    def record(self, seconds: float, ttfb: float | None, usage: dict[str, int] | None, terminal: str | None) -> None:
        self._count[0] += 1
        hist = self._duration
        hist.counts[bisect_left(_BOUNDS, seconds)] += 1
        hist.sum += seconds
        if ttfb is not None:
            hist = self._ttfb or self._first_ttfb()
            hist.counts[bisect_left(_BOUNDS, ttfb)] += 1
            hist.sum += ttfb
        if usage:
            tokens_in, tokens_out = self._tokens or self._first_tokens()
            tokens_in[0] += usage.get("in", 0)
            tokens_out[0] += usage.get("out", 0)
        if terminal:
            cell = self._terminals.get(terminal)
            if cell is None:
                cell = self._terminals[terminal] = self._families.terminals.setdefault((self._route, terminal), [0])
            cell[0] += 1

    def _first_ttfb(self) -> _Hist:
        found = self._ttfb = self._families.ttfb.setdefault(self._route, _Hist())
        return found

    def _first_tokens(self) -> tuple[list[int], list[int]]:
        tokens = self._families.tokens
        found = self._tokens = (
            tokens.setdefault((self._model, "in"), [0]),
            tokens.setdefault((self._model, "out"), [0]),
        )
        return found


class LocalFamilies(Collector):
    """The request families of one process: plain numbers, read at scrape time."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], list[int]] = {}
        self.ttfb: dict[str, _Hist] = {}
        self.duration: dict[str, _Hist] = {}
        self.tokens: dict[tuple[str, str], list[int]] = {}
        self.terminals: dict[tuple[str, str], list[int]] = {}

    def series(self, route: str, model: str, status: int, key_name: str) -> Record:
        return _LocalSeries(self, route, model, status, key_name).record

    def collect(self) -> Iterator[Any]:
        yield _counter(REQUESTS, self.requests)
        yield _histogram(TTFB, self.ttfb)
        yield _histogram(DURATION, self.duration)
        yield _counter(TOKENS, self.tokens)
        yield _counter(TERMINALS, self.terminals)


def _counter(spec: tuple[str, str, tuple[str, ...]], cells: dict[Any, list[int]]) -> CounterMetricFamily:
    family = CounterMetricFamily(spec[0], spec[1], labels=spec[2])
    for labels, cell in list(cells.items()):
        family.add_metric(labels, cell[0])
    return family


def _histogram(spec: tuple[str, str, tuple[str, ...]], series: dict[str, _Hist]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(spec[0], spec[1], labels=spec[2])
    for route, hist in list(series.items()):
        total = 0
        buckets = []
        for le, n in zip(_LE, hist.counts, strict=True):
            total += n
            buckets.append((le, total))
        family.add_metric([route], buckets, hist.sum)
    return family


class SharedFamilies:
    """The request families of ``serve --workers``: prometheus-client's metrics, whose values the
    workers share (multiprocess mode)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(*REQUESTS, registry=registry)
        self.ttfb = Histogram(*TTFB, buckets=TIME_BUCKETS, registry=registry)
        self.duration = Histogram(*DURATION, buckets=TIME_BUCKETS, registry=registry)
        self.tokens = Counter(*TOKENS, registry=registry)
        self.terminals = Counter(*TERMINALS, registry=registry)

    def series(self, route: str, model: str, status: int, key_name: str) -> Record:
        count = self.requests.labels(route, model, str(status), key_name)
        duration = self.duration.labels(route)

        def record(seconds: float, ttfb: float | None, usage: dict[str, int] | None, terminal: str | None) -> None:
            count.inc()
            duration.observe(seconds)
            if ttfb is not None:
                self.ttfb.labels(route).observe(ttfb)
            if usage:
                self.tokens.labels(model, "in").inc(usage.get("in", 0))
                self.tokens.labels(model, "out").inc(usage.get("out", 0))
            if terminal:
                self.terminals.labels(route, terminal).inc()

        return record
