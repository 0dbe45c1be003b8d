"""Pools: an upstream served by several replicas of one backend (``base_urls``), in this process.

Each replica is the upstream itself with its one ``base_url`` (``Upstream.model_copy``, made
once), so every call path (``open_upstream``, ``read_body``, error messages) is unchanged; only
the choice of replica is new, made once per call (``Pool.call``), never per chunk.

Health is passive and per replica: a call that fails before its first byte (no connection,
a timeout before the headers, a 429 or a 5xx) counts against it; ``failures_before_cooldown``
failures in a row, or one 429/503 with ``Retry-After``, put it in cooldown (``cooldown_seconds``,
or the ``Retry-After``). When its cooldown is over the next call is its probe (one at a time);
any answer clears it, a failure cools it down again.

A call goes to the replica asked for (its affinity: the one that served the conversation before)
when that one is healthy and below ``max_concurrent_streams``, else to the least busy healthy
one. It fails over before the first byte only: ``retries`` other replicas at most (default:
every other one), a small jittered backoff between tries, all within ``retry_deadline_seconds``.
A 4xx other than 429 is the request's own fault and is never tried elsewhere. When no replica
answers, the ``fallback`` upstream's pool is tried; then one 503 naming the upstream.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

import structlog

from crossfeed.proxy.errors import (
    ClientRequestError,
    ProxyError,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.observability import Metrics
from crossfeed.proxy.runtime.turn_trace import shown_url

log = structlog.get_logger("crossfeed")

T = TypeVar("T")

RETRIED_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER = 600.0  # a Retry-After longer than this is taken as this long
BACKOFF = 0.05  # seconds before the second try; doubled each try, with jitter, at most 1 s


def retryable(exc: BaseException) -> bool:
    """A failure before the first byte that another replica may not have: no connection, no
    headers in time, or a 429/502/503/504."""
    if isinstance(exc, UpstreamHTTPError):
        return exc.status in RETRIED_STATUSES
    if isinstance(exc, UpstreamTimeout):
        return exc.code in ("upstream_connect_timeout", "upstream_first_byte_timeout")
    return isinstance(exc, UpstreamUnavailable)


def counts_against(exc: BaseException) -> bool:
    """A failure that says the replica is unwell (a retryable one, or any 5xx)."""
    return retryable(exc) or (isinstance(exc, UpstreamHTTPError) and exc.status >= 500)


def retry_after(exc: BaseException) -> float | None:
    """The seconds a 429/503's ``Retry-After`` asks for (a number of seconds; a date is ignored)."""
    if not isinstance(exc, UpstreamHTTPError) or exc.status not in (429, 503):
        return None
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    try:
        seconds = float(headers.get("retry-after", ""))
    except ValueError:
        return None
    return min(seconds, MAX_RETRY_AFTER) if seconds > 0 else None


class Replica:
    """One replica: its upstream (the pool's, with this ``base_url``), its health, its load."""

    __slots__ = ("upstream", "index", "label", "failures", "down_until", "probing", "inflight", "last_error")

    def __init__(self, upstream: Upstream, index: int) -> None:
        self.upstream = upstream
        self.index = index
        self.label = f"{upstream.name}/{index}"  # what a client and the metrics see (never the URL)
        self.failures = 0
        self.down_until = 0.0  # monotonic time its cooldown ends (0: never cooled down)
        self.probing = False  # its probe (the first call after a cooldown) is in flight
        self.inflight = 0
        self.last_error = ""

    def state(self, now: float) -> str:
        """``up``, ``cooldown`` (left alone until ``down_until``) or ``probe`` (the next call tries it)."""
        if not self.down_until:
            return "up"
        return "cooldown" if now < self.down_until else "probe"

    def usable(self, now: float) -> bool:
        state = self.state(now)
        cap = self.upstream.max_concurrent_streams
        return (state == "up" or (state == "probe" and not self.probing)) and not (cap and self.inflight >= cap)


class Lease:
    """A call's place on its replica (the in-flight count "least busy" reads), until released."""

    __slots__ = ("replica", "_done")

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self._done = False
        replica.inflight += 1

    def release(self) -> None:
        if not self._done:
            self._done = True
            self.replica.inflight -= 1

    def __del__(self) -> None:  # the net for a lease no leg released (its response collected first)
        self.release()


class Answered(NamedTuple):
    """Which replica answered a call, whether it was another than the one asked for, and the
    call's place on it (released when the call's answer is read or closed: ``release``)."""

    replica: Replica
    moved: bool  # an affinity asked for another replica, which was down, busy or failed
    lease: Lease


# Each pooled call's lease rides on its response (an attribute of aiohttp's ClientResponse, which
# has a __dict__): released when its leg ends (proxy/turns/exchange.py), or, when the response is
# collected first (a leg that never ran: the client left), by the lease's own __del__.
_LEASE = "_crossfeed_lease"


def hold(response: Any, lease: Lease) -> None:
    """``lease`` is ``response``'s until ``release``."""
    setattr(response, _LEASE, lease)


def release(response: Any) -> None:
    lease = getattr(response, _LEASE, None)
    if lease is not None:
        lease.release()


class Pool:
    """The replicas of one upstream, their health and load."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.upstream = upstream
        self.replicas = tuple(
            Replica(upstream.model_copy(update={"base_url": url}) if url != upstream.base_url else upstream, i)
            for i, url in enumerate(upstream.replica_urls)
        )
        self._by_label = {r.label: r for r in self.replicas}
        reps = self.replicas  # the replicas in the turn's order, for each turn (``pick``)
        self._orders = tuple(reps[i:] + reps[:i] for i in range(len(reps)))
        self._clock = clock
        self._sleep = sleep
        self._metrics = metrics
        self._turn = 0  # rotates the ties among equally busy replicas
        self.fallback: Pool | None = None
        for r in self.replicas:
            self._up(r, 1)

    def _up(self, replica: Replica, value: int) -> None:
        if self._metrics is not None:
            self._metrics.replica_up.labels(self.upstream.name, replica.label).set(value)

    def _count(self, name: str) -> None:
        if self._metrics is not None:
            getattr(self._metrics, name).labels(self.upstream.name).inc()

    def moved(self) -> None:
        """A keyed call went to another replica than its key's (counted)."""
        self._count("affinity_moves")

    @property
    def retries(self) -> int:
        chosen = self.upstream.retries
        return len(self.replicas) - 1 if chosen is None else chosen

    def replica(self, label: str | None) -> Replica | None:
        return self._by_label.get(label) if label else None

    def pick(self, prefer: str | None = None, tried: Collection[int] = (), *, rotate: bool = True) -> Replica | None:
        """The replica for the next call: ``prefer`` when usable; else one whose cooldown just
        ended (its probe); else the least busy usable one (ties in turn). None: none usable.

        The turn among ties moves on once per call (``rotate``), not per attempt: a failover's
        pick (``rotate`` false) takes the next replica after the one that failed without moving
        the turn, so a replica that fails every call is still the first choice of only one call
        in n, and its calls go to the replica after it."""
        if prefer is None and not tried and not self.upstream.max_concurrent_streams:
            # The common call: no replica asked for, none excluded, no cap. The least busy in
            # the turn's order (``_orders``: the replicas from each index on), as the general
            # rule below picks it, without its per-replica key; a replica cooling down or due
            # its probe (``down_until`` set) sends the call to the general rule.
            turn = self._turn + 1 if rotate else self._turn
            least: Replica | None = None
            for r in self._orders[turn % len(self._orders)]:
                if r.down_until:
                    break
                if least is None or r.inflight < least.inflight:
                    least = r
            else:
                self._turn = turn
                return least
        now = self._clock()
        if prefer is not None:
            wanted = self.replica(prefer)
            if wanted is not None and wanted.index not in tried and wanted.usable(now):
                return wanted
        best: Replica | None = None
        best_key = (0, 0)
        turn = self._turn + 1 if rotate else self._turn
        n = len(self.replicas)
        cap = self.upstream.max_concurrent_streams  # (every replica's: a copy of the pool's upstream)
        for r in self.replicas:
            if tried and r.index in tried:
                continue
            if r.down_until:  # cooled down once: its state decides
                if not r.usable(now):
                    continue
                if r.state(now) == "probe":
                    return r  # a replica whose cooldown ended is tried first
            elif cap and r.inflight >= cap:
                continue
            key = (r.inflight, (r.index - turn) % n)
            if best is None or key < best_key:
                best, best_key = r, key
        if best is not None:
            self._turn = turn
        return best

    def succeeded(self, replica: Replica) -> None:
        replica.probing = False
        if replica.failures or replica.down_until:
            log.info("pool.replica_up", upstream=self.upstream.name, replica=replica.label)
            self._up(replica, 1)
        replica.failures = 0
        replica.down_until = 0.0

    def failed(self, replica: Replica, exc: BaseException) -> None:
        """Count a failure against ``replica``; cool it down past the threshold or on a Retry-After."""
        if not counts_against(exc):
            self.succeeded(replica)  # it answered: the request was at fault, not the replica
            return
        replica.probing = False
        replica.failures += 1
        replica.last_error = exc.message if isinstance(exc, UpstreamError) else type(exc).__name__
        wait = retry_after(exc)
        if wait is None and replica.failures >= self.upstream.failures_before_cooldown:
            wait = self.upstream.cooldown_seconds
        if wait is not None:
            replica.down_until = self._clock() + wait
            log.warning(
                "pool.replica_cooldown",
                upstream=self.upstream.name,
                replica=replica.label,
                seconds=wait,
                failures=replica.failures,
                error=replica.last_error,
            )
            self._up(replica, 0)

    def first(self, prefer: str | None = None, avoid: Replica | None = None) -> tuple[Replica, Lease] | None:
        """The first attempt of a call, for a caller that awaits it itself (``call``'s loop is
        then taken up with ``after`` only if it fails): its replica and its place on it. One
        coroutine frame fewer between the caller and the upstream call, on each of its
        resumptions, than ``call``'s. None: no replica is usable."""
        replica = self.pick(prefer, () if avoid is None else (avoid.index,))
        return None if replica is None else (replica, self._lease(replica))

    def _lease(self, replica: Replica) -> Lease:
        if replica.down_until and replica.state(self._clock()) == "probe":
            replica.probing = True
        return Lease(replica)

    def attempt_failed(self, replica: Replica, lease: Lease, exc: BaseException) -> None:
        """A failed attempt's verdict: the replica's health; raises it again unless another
        replica may answer (a retryable failure)."""
        lease.release()
        if not isinstance(exc, UpstreamError):
            replica.probing = False  # cancelled (the client left): no verdict on the replica
            raise exc
        self.failed(replica, exc)
        if not retryable(exc):
            raise exc
        log.info("pool.failover", upstream=self.upstream.name, replica=replica.label, error=exc.message)

    def answered(self, replica: Replica, lease: Lease, prefer: str | None) -> Answered:
        self.succeeded(replica)
        return Answered(replica, prefer is not None and replica.label != prefer, lease)

    async def call(
        self,
        attempt: Callable[[Upstream], Awaitable[T]],
        prefer: str | None = None,
        *,
        fallback: bool = True,
        avoid: Replica | None = None,
        after: tuple[Replica, BaseException] | None = None,
    ) -> tuple[T, Answered]:
        """``attempt`` on one replica after another until one answers (see the module's text);
        the answer and which replica gave it. Raises the request's own error (a 4xx) at once, and
        a 503 naming the upstream when none answers. ``avoid``: a replica not to ask (the one a
        continuation continues); ``after``: the first attempt (``first``) failed on that replica
        with that error, the call goes on from there."""
        deadline = self._clock() + self.upstream.retry_deadline_seconds
        tried: set[int] = set() if avoid is None else {avoid.index}
        last: BaseException | None = None
        start = 0
        if after is not None:
            tried.add(after[0].index)
            last, start = after[1], 1
        for n in range(start, self.retries + 1):
            if n and self._clock() >= deadline:
                break
            replica = self.pick(prefer, tried, rotate=not n)
            if replica is None:
                break
            if n:
                self._count("failovers")
                await self._backoff(n, deadline)
            tried.add(replica.index)
            lease = self._lease(replica)
            try:
                result = await attempt(replica.upstream)
            except BaseException as exc:
                self.attempt_failed(replica, lease, exc)
                last = exc
                continue
            return result, self.answered(replica, lease, prefer)
        if self.fallback is not None and fallback:
            self._count("fallbacks")
            log.warning("pool.fallback", upstream=self.upstream.name, fallback=self.fallback.upstream.name)
            result, answered = await self.fallback.call(attempt, fallback=False)
            return result, Answered(answered.replica, True, answered.lease)
        raise self.unavailable(last, bool(tried))

    async def _backoff(self, n: int, deadline: float) -> None:
        if self._sleep is None:
            return
        wait = min(1.0, BACKOFF * 2 ** (n - 1)) * (0.5 + random.random() / 2)
        await self._sleep(max(0.0, min(wait, deadline - self._clock())))

    def unavailable(self, last: BaseException | None, tried: bool = True) -> ProxyError:
        """The one error of a call no replica answered: a 503 naming the upstream and when to try
        again; a 429 when none was tried because every healthy one is at its stream cap."""
        now = self._clock()
        if not tried and any(r.state(now) == "up" for r in self.replicas):
            return ClientRequestError(
                f"too many concurrent streams to upstream '{self.upstream.name}' (limit "
                f"{self.upstream.max_concurrent_streams} on each replica); retry shortly",
                status=429,
                code="rate_limit_exceeded",
                headers={"Retry-After": "1"},
            )
        ends = [r.down_until - now for r in self.replicas if r.state(now) == "cooldown"]
        why = f"; the last error: {last.message}" if isinstance(last, UpstreamError) else ""
        return UpstreamUnavailable(
            f"no replica of the upstream {self.upstream.name!r} answered "
            f"({len(self.replicas)} replica{'s' if len(self.replicas) != 1 else ''}{why})",
            code="upstream_pool_unavailable",
            status=503,
            headers={"Retry-After": str(max(1, round(min(ends))))} if ends else {"Retry-After": "1"},
        )

    def states(self) -> list[dict[str, Any]]:
        """Each replica's state, for /readyz and check-config (URLs without credentials)."""
        now = self._clock()
        out = []
        for r in self.replicas:
            state = r.state(now)
            entry: dict[str, Any] = {
                "replica": r.label,
                "url": shown_url(r.upstream.base_url),
                "state": state,
                "in_flight": r.inflight,
                "failures": r.failures,
            }
            if state == "cooldown":
                entry["cooldown_left_seconds"] = round(r.down_until - now, 1)
            if r.last_error and state != "up":
                entry["last_error"] = r.last_error
            out.append(entry)
        return out


def make_pools(
    config: Config, metrics: Metrics | None = None, sleep: Callable[[float], Awaitable[Any]] | None = None
) -> dict[str, Pool]:
    """The pool of every pooled upstream, by name, their fallbacks linked."""
    pools = {u.name: Pool(u, metrics=metrics, sleep=sleep) for u in config.upstreams if u.pooled}
    for pool in pools.values():
        name = pool.upstream.fallback
        if name is not None:
            other = pools.get(name)
            if other is None:  # a single-URL fallback: a pool of one, for this use only
                other = Pool(next(u for u in config.upstreams if u.name == name), metrics=metrics, sleep=sleep)
            pool.fallback = other
    return pools


def pool_states(pools: Mapping[str, Pool]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for name, pool in pools.items():
        yield name, pool.states()
