"""Pools fail over before the first byte (proxy/runtime/pool.py): a replica that refuses the
connection, answers 429 (its Retry-After kept as its cooldown), 503, or stalls before its headers
is left for a healthy one, and the client's stream is whole and strictly valid (the ``captured``
fixture validates every stream); a 400 is the request's own and is never tried elsewhere; with
every replica down, one 503 envelope naming the pool, at once; a fallback upstream answers then,
its model in the Response. The fakes count the calls each replica got."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from crossfeed.proxy.keys import POOLS
from tests.fakes.upstream import JSONReply, SSEReply
from tests.faults.fault_upstream import FaultUpstream, closed_port
from tests.faults.pool_harness import ask, error_reply, in_flight, pool_config, replicas, scripted_pool, served
from tests.support.app_server import running_proxy
from tests.support.chat_replies import json_text, text_reply
from tests.support.clients import sdk_client
from tests.support.waiting import wait_until


def dead_url() -> str:
    return f"http://127.0.0.1:{closed_port()}/v1"


async def test_a_refused_connection_fails_over_to_a_healthy_replica(tmp_path, captured) -> None:
    async with replicas(1) as (good,):
        config = pool_config(tmp_path, [dead_url(), good.base_url], retries=1)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            for _ in range(3):
                final, headers = await ask(client)
                assert final.status == "completed" and final.output_text == "from 0"
                assert headers["x-crossfeed-replica"] == "gpu/1"
            assert in_flight(proxy.app) == {"gpu/0": 0, "gpu/1": 0}  # each call's place given back
            await client.close()
    assert served([good]) == [3]


@pytest.mark.parametrize("status", [429, 502, 503, 504])
async def test_a_retryable_status_fails_over(tmp_path, captured, status) -> None:
    async with replicas(2) as fakes:
        fakes[0].default = error_reply(status)  # no Retry-After: it stays in turn (5 failures to cool down)
        config = pool_config(tmp_path, [f.base_url for f in fakes], failures_before_cooldown=5)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            answers = [await ask(client) for _ in range(3)]
            await client.close()
    assert [(final.output_text, headers["x-crossfeed-replica"]) for final, headers in answers] == [
        ("from 1", "gpu/1")
    ] * 3
    assert served(fakes)[0] >= 1  # asked first at least once (the picks take turns), then left


async def test_429_with_retry_after_cools_the_replica_down_for_that_long(tmp_path, captured) -> None:
    async with replicas(2) as fakes:
        fakes[0].default = error_reply(429, {"Retry-After": "120"})
        config = pool_config(tmp_path, [f.base_url for f in fakes], failures_before_cooldown=5)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            for _ in range(4):
                final, headers = await ask(client)
                assert final.output_text == "from 1" and headers["x-crossfeed-replica"] == "gpu/1"
            states = {r["replica"]: r for r in (await _ready(proxy))["pools"]["gpu"]}
            await client.close()
    assert served(fakes)[0] == 1  # asked once: its Retry-After kept it out since
    assert states["gpu/0"]["state"] == "cooldown" and states["gpu/0"]["cooldown_left_seconds"] > 100
    assert states["gpu/1"]["state"] == "up"


async def test_a_stall_before_the_first_byte_fails_over(tmp_path, captured) -> None:
    """The fault replica keeps its answer's headers back (30 s); first_byte is 0.5 s there."""
    async with replicas(1) as (good,), FaultUpstream() as stalling:
        config = pool_config(
            tmp_path,
            [stalling.base_url, good.base_url],
            model="fault:slow_first_byte",
            timeouts={"first_byte": 0.5},
            failures_before_cooldown=1,
        )
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            outputs = [(await ask(client, model="fault:slow_first_byte"))[0].output_text for _ in range(3)]
            states = {r["replica"]: r["state"] for r in (await _ready(proxy))["pools"]["gpu"]}
            await client.close()
    assert outputs == ["from 0"] * 3
    assert states == {"gpu/0": "cooldown", "gpu/1": "up"}
    assert served([good]) == [3]


async def test_a_400_is_not_tried_on_another_replica(tmp_path, captured) -> None:
    async with scripted_pool(tmp_path, captured, error_reply(400)) as pool:
        with pytest.raises(openai.BadRequestError) as caught:
            await ask(pool.client)
    assert caught.value.status_code == 400 and "replica says 400" in str(caught.value)
    assert sum(served(pool.fakes)) == 1


async def test_every_replica_down_is_one_503_naming_the_pool(tmp_path, captured) -> None:
    config = pool_config(tmp_path, [dead_url(), dead_url(), dead_url()])
    async with running_proxy(config) as proxy:
        client = sdk_client(proxy.base_url, captured)
        with pytest.raises(openai.APIStatusError) as caught:
            await ask(client)
        await client.close()
    err = caught.value
    assert err.status_code == 503
    body = err.body if isinstance(err.body, dict) else {}
    assert body.get("code") == "upstream_pool_unavailable"
    assert "'gpu'" in body.get("message", "") and "3 replicas" in body.get("message", "")
    assert "127.0.0.1" not in str(err.body)


async def test_the_fallback_answers_when_no_replica_does_and_says_its_model(tmp_path, captured) -> None:
    async with replicas(1) as (spare,):
        config = pool_config(tmp_path, [dead_url(), dead_url()], fallback_urls=[spare.base_url])
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            final, headers = await ask(client)
            assert set(in_flight(proxy.app).values()) == {0}
            await client.close()
    assert final.status == "completed" and final.output_text == "from 0"
    assert final.model == "spare-model"
    assert headers["x-crossfeed-replica"] == "spare/0"
    assert spare.requests[-1].body["model"] == "spare-model"


async def _ready(proxy) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/readyz") as r:
        return await r.json()


async def test_a_passed_through_endpoint_fails_over_too(tmp_path, captured) -> None:
    """POST /v1/embeddings goes to the model's upstream unchanged: on a pool, to a replica that answers."""
    async with replicas(1) as (good,):
        good.default = JSONReply({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}]})
        config = pool_config(tmp_path, [dead_url(), good.base_url], retries=1)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            answers = [
                await client.embeddings.with_raw_response.create(model="pool-model", input="x") for _ in range(3)
            ]
            await client.close()
    assert [a.headers["x-crossfeed-replica"] for a in answers] == ["gpu/1"] * 3
    assert [a.parse().data[0].embedding for a in answers] == [[0.5]] * 3
    assert served([good]) == [0] and len(good.requests) == 3


async def test_a_whole_answer_fails_over_and_a_fallback_names_its_model(tmp_path, captured) -> None:
    """stream false: the same failover; the fallback's Response says the model that answered."""
    async with replicas(2) as (good, spare):
        good.default = json_text("whole from good")
        spare.default = json_text("whole from spare")
        config = pool_config(tmp_path, [dead_url(), good.base_url], retries=1)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            raw = await client.responses.with_raw_response.create(model="pool-model", input="hi")
            await client.close()
        assert raw.headers["x-crossfeed-replica"] == "gpu/1" and raw.parse().output_text == "whole from good"
        config = pool_config(tmp_path, [dead_url()], fallback_urls=[spare.base_url])
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            raw = await client.responses.with_raw_response.create(model="pool-model", input="hi")
            assert set(in_flight(proxy.app).values()) == {0}
            await client.close()
    answer = raw.parse()
    assert answer.output_text == "whole from spare" and answer.model == "spare-model"
    assert raw.headers["x-crossfeed-replica"] == "spare/0"


async def test_a_single_url_upstream_answers_without_replica_headers(tmp_path, captured) -> None:
    async with replicas(1) as (only,):
        async with running_proxy({"upstream.base_url": only.base_url, "store.backend": "memory"}) as proxy:
            assert not proxy.app[POOLS]
            client = sdk_client(proxy.base_url, captured)
            final, headers = await ask(client)
            await client.close()
    assert final.output_text == "from 0"
    assert "x-crossfeed-replica" not in headers and "x-codex-turn-state" not in headers


async def test_unkeyed_calls_go_to_the_least_busy_replica(tmp_path, captured) -> None:
    """A stream held open on one replica: the calls after it go to the other one."""
    gate = asyncio.Event()
    held: list[int] = []

    def once_held(i: int) -> Any:
        def reply(_recorded: Any) -> SSEReply:
            if not held:
                held.append(i)
                return SSEReply(text_reply(f"long from {i}").data, holds={5: gate})
            return text_reply(f"from {i}")

        return reply

    async with replicas(2) as fakes:
        for i, fake in enumerate(fakes):
            fake.default = once_held(i)
        async with running_proxy(pool_config(tmp_path, [f.base_url for f in fakes])) as proxy:
            client = sdk_client(proxy.base_url, captured)
            long = asyncio.create_task(ask(client, "long"))
            assert await wait_until(lambda: sum(in_flight(proxy.app).values()) == 1 and held, 10)
            busy = f"gpu/{held[0]}"
            others = [(await ask(client, f"short {n}"))[1]["x-crossfeed-replica"] for n in range(3)]
            gate.set()
            final, headers = await long
            await client.close()
    assert headers["x-crossfeed-replica"] == busy and final.output_text == f"long from {held[0]}"
    assert busy not in others and len(set(others)) == 1
