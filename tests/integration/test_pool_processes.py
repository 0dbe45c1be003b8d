"""Two real crossfeed processes (``crossfeed serve``) on one redis-server, both in front of the
same pool of fake replicas: every turn of a ``previous_response_id`` chain, whichever process
gets it, goes to the replica the chain started on, since the affinity is kept in the store and
not in a process. (Per-key rate limits counted together by two processes on one Redis, the
N+1st request in the window a 429 on either: tests/integration/test_rate_limits.py
``test_two_replicas_count_together``.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import openai
import pytest

from tests.faults.pool_harness import MODEL, pool_config, replicas, served
from tests.support.chat_replies import reply
from tests.support.replicas import start


async def turn(url: str, text: str, previous: str | None = None) -> tuple[str, str]:
    """One stored turn: its Response's id and the replica that answered it."""
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(
            model=MODEL, input=text, previous_response_id=previous, stream=False
        )
        return raw.parse().id, raw.headers["x-crossfeed-replica"]


@pytest.mark.redis
async def test_two_processes_on_one_redis_agree_on_every_turns_replica(tmp_path: Path, redis_url: str) -> None:
    async with replicas(3) as fakes:
        for i, fake in enumerate(fakes):
            fake.default = reply(f"from {i}")  # non-streamed turns
        pool_config(tmp_path, [f.base_url for f in fakes], store="redis")
        path = tmp_path / "pool.toml"
        prefix = f"cf-pool-{os.getpid()}-{time.time_ns()}:"
        path.write_text(path.read_text().replace('backend = "redis"', f'backend = "redis"\nkey_prefix = "{prefix}"'))
        a = await start(path, {"CROSSFEED_REDIS_URL": redis_url})
        b = await start(path, {"CROSSFEED_REDIS_URL": redis_url})
        try:
            await turn(a.url, "unrelated")  # a's turn-taking one ahead of b's: unkeyed picks differ
            previous, first = await turn(b.url, "turn 0")
            chosen = [first]
            for n in range(1, 10):
                previous, label = await turn((a, b)[n % 2].url, f"turn {n}", previous)
                chosen.append(label)
        finally:
            assert await a.stop() == 0
            assert await b.stop() == 0
    assert chosen == [first] * 10, chosen
    counts = served(fakes)
    assert counts[int(first.rsplit("/", 1)[1])] >= 10 and sum(counts) == 11, counts
