"""The pool's choice and health, on a fake clock (proxy/runtime/pool.py): the least busy replica
first (ties in turn), a replica at its stream cap skipped (all at it: a 429), cooldown after N
failures or a Retry-After, one probe at a time when it ends, bounded retries, a 4xx raised at once,
and the deadline."""

from __future__ import annotations

import gc
import random
from typing import Any

import pytest

from crossfeed.proxy.errors import ClientRequestError, ProxyError, UpstreamHTTPError, UpstreamUnavailable
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.runtime.pool import Pool, hold, release, retry_after, retryable

URLS = ("http://a/v1", "http://b/v1", "http://c/v1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool(clock: Clock, **keys: Any) -> Pool:
    return Pool(Upstream(name="gpu", base_urls=URLS, **keys), clock=clock)


def http(status: int, **headers: str) -> UpstreamHTTPError:
    return UpstreamHTTPError(status, {"error": {"message": f"said {status}"}}, headers)


def test_each_replica_is_the_upstream_with_its_own_base_url() -> None:
    p = pool(Clock())
    assert [r.upstream.base_url for r in p.replicas] == list(URLS)
    assert {r.upstream.name for r in p.replicas} == {"gpu"} and [r.label for r in p.replicas] == [
        "gpu/0",
        "gpu/1",
        "gpu/2",
    ]


def test_the_least_busy_replica_is_picked_and_ties_take_turns() -> None:
    p = pool(Clock())
    picked = [p.pick().index for _ in range(6)]  # type: ignore[union-attr]
    assert sorted(picked[:3]) == [0, 1, 2] and picked[3:] == picked[:3]
    p.replicas[0].inflight = p.replicas[1].inflight = 2
    assert {p.pick().index for _ in range(3)} == {2}  # type: ignore[union-attr]


def _by_the_rule(p: Pool, turn: int) -> int:
    """The documented choice: the least busy usable replica; among equals, the first at or after
    the turn's index (the turn moves on each call)."""
    n = len(p.replicas)
    usable = [r for r in p.replicas if not r.down_until]
    return min(usable, key=lambda r: (r.inflight, (r.index - turn) % n)).index


@pytest.mark.parametrize("seed", range(40))
def test_the_common_call_takes_the_replica_the_rule_names(seed: int) -> None:
    """``pick``'s path for a call with nothing asked for (no preferred replica, none excluded, no
    cap) names the replica the general rule names, for any load, as the turn moves; a replica
    cooling down or due its probe sends the call to the general rule."""
    rng = random.Random(seed)
    clock = Clock()
    p = Pool(Upstream(name="gpu", base_urls=tuple(f"http://r{i}/v1" for i in range(rng.randint(1, 5)))), clock=clock)
    for _ in range(30):
        for r in p.replicas:
            r.inflight = rng.randint(0, 3)
        if rng.random() < 0.2:
            r = rng.choice(p.replicas)
            r.down_until = clock.now + rng.choice((-1.0, 5.0))  # a probe due, or cooling down
        expected = _by_the_rule(p, p._turn + 1) if not any(r.down_until for r in p.replicas) else None
        got = p.pick()
        if expected is not None:
            assert got is not None and got.index == expected
        for r in p.replicas:
            r.down_until = 0.0


async def test_a_replica_that_fails_every_call_is_first_choice_of_one_call_in_n() -> None:
    """The turn among ties moves once per call, not per attempt: with replica 0 refusing every
    call (never cooled down), 60 sequential calls ask it first 20 times (a third), and each of
    those goes on to the replica after it. (Moving the turn on the failover's pick too made it
    every other call: 30 of 60.)"""
    p = pool(Clock(), failures_before_cooldown=10_000)
    first_asked: list[int] = []
    answered_by: list[int] = []
    asked: list[int] = []

    async def attempt(up: Upstream) -> int:
        index = URLS.index(up.base_url)
        asked.append(index)
        if index == 0:
            raise UpstreamUnavailable("refused")
        return index

    for _ in range(60):
        asked.clear()
        result, answered = await p.call(attempt)
        answered.lease.release()
        first_asked.append(asked[0])
        answered_by.append(result)
        if asked[0] == 0:
            assert asked == [0, 1]  # the next replica after the one that failed
    assert first_asked.count(0) == 20 and first_asked.count(1) == 20 and first_asked.count(2) == 20
    assert answered_by.count(1) == 40 and answered_by.count(2) == 20


def test_a_preferred_replica_wins_unless_it_is_unusable() -> None:
    clock = Clock()
    p = pool(clock, max_concurrent_streams=1)
    assert p.pick("gpu/2").index == 2  # type: ignore[union-attr]
    p.replicas[2].inflight = 1  # at its cap
    assert p.pick("gpu/2").index != 2  # type: ignore[union-attr]
    assert p.pick("other/0") is not None  # a label of no replica here is ignored


async def test_every_replica_at_its_cap_is_a_429() -> None:
    p = pool(Clock(), max_concurrent_streams=1)
    for r in p.replicas:
        r.inflight = 1

    async def attempt(up: Upstream) -> str:
        raise AssertionError("no replica may be asked")

    with pytest.raises(ClientRequestError) as caught:
        await p.call(attempt)
    assert caught.value.status == 429 and "limit 1 on each replica" in caught.value.message


def test_cooldown_after_n_failures_then_one_probe() -> None:
    clock = Clock()
    p = pool(clock, failures_before_cooldown=2, cooldown_seconds=10)
    r = p.replicas[0]
    p.failed(r, UpstreamUnavailable("refused"))
    assert r.state(clock()) == "up"
    p.failed(r, UpstreamUnavailable("refused"))
    assert r.state(clock()) == "cooldown" and not r.usable(clock())
    clock.now += 10
    assert r.state(clock()) == "probe"
    assert p.pick().index == 0  # type: ignore[union-attr]  # the probe goes first
    r.probing = True
    assert p.pick().index != 0  # type: ignore[union-attr]  # one probe at a time
    p.succeeded(r)
    assert r.state(clock()) == "up" and r.failures == 0


def test_a_retry_after_is_the_cooldown_and_a_400_clears_failures() -> None:
    clock = Clock()
    p = pool(clock, failures_before_cooldown=5)
    r = p.replicas[1]
    p.failed(r, http(503, **{"Retry-After": "42"}))
    assert r.state(clock()) == "cooldown" and r.down_until == clock() + 42
    other = p.replicas[2]
    p.failed(other, UpstreamUnavailable("refused"))
    p.failed(other, http(400))  # it answered: the request was at fault
    assert other.failures == 0
    assert retry_after(http(429, **{"retry-after": "abc"})) is None and retry_after(http(502)) is None
    assert not retryable(http(400)) and not retryable(http(500)) and retryable(http(504))


async def test_retries_are_bounded_and_the_answer_names_its_replica() -> None:
    clock = Clock()
    p = pool(clock, retries=1)
    asked: list[str] = []

    async def attempt(up: Upstream) -> str:
        asked.append(up.base_url)
        raise UpstreamUnavailable("refused")

    with pytest.raises(ProxyError) as caught:
        await p.call(attempt)
    assert len(asked) == 2 and len(set(asked)) == 2
    assert caught.value.status == 503 and "'gpu'" in caught.value.message

    async def second_works(up: Upstream) -> str:
        if up.base_url == URLS[0]:
            raise http(502)
        return up.base_url

    result, answered = await p.call(second_works, "gpu/0")
    assert result != URLS[0] and answered.replica.upstream.base_url == result and answered.moved
    assert all(r.inflight == 0 for r in p.replicas if r is not answered.replica)
    answered.lease.release()
    answered.lease.release()  # once only
    assert answered.replica.inflight == 0


async def test_a_4xx_is_raised_at_once_and_the_deadline_stops_retries() -> None:
    clock = Clock()
    p = pool(clock, retry_deadline_seconds=5)
    asked = 0

    async def bad_request(up: Upstream) -> str:
        nonlocal asked
        asked += 1
        raise http(422)

    with pytest.raises(UpstreamHTTPError):
        await p.call(bad_request)
    assert asked == 1

    async def slow_failure(up: Upstream) -> str:
        nonlocal asked
        asked += 1
        clock.now += 6  # past the deadline
        raise http(503)

    asked = 0
    with pytest.raises(UpstreamUnavailable):
        await p.call(slow_failure)
    assert asked == 1


def test_a_lease_held_by_a_response_is_released_by_release_or_when_the_response_goes() -> None:
    p = pool(Clock())
    first = p.first()
    assert first is not None
    replica, lease = first

    class Response:  # aiohttp's ClientResponse has a __dict__ too
        pass

    response = Response()
    hold(response, lease)
    assert replica.inflight == 1
    release(response)
    assert replica.inflight == 0
    release(response)  # once only
    assert replica.inflight == 0

    second = p.first()
    assert second is not None
    replica, lease = second
    response = Response()
    hold(response, lease)
    del lease, second
    assert replica.inflight == 1
    del response  # a leg that never ran: its response collected unreleased
    gc.collect()
    assert replica.inflight == 0
