"""A pool's passive health (proxy/runtime/pool.py): a replica that fails ``failures_before_cooldown``
times in a row is left alone for ``cooldown_seconds`` (shown in /readyz and the metrics), then
the next call is its probe, and its answer brings it back."""

from __future__ import annotations

import asyncio

import aiohttp

from crossfeed.proxy.streaming.lifecycle import PROBE_ERRORS, PROBES
from tests.faults.fault_upstream import closed_port
from tests.faults.pool_harness import ask, error_reply, pool_config, replicas, served
from tests.support.app_server import running_proxy
from tests.support.clients import sdk_client
from tests.support.waiting import wait_until

COOLDOWN = 0.3


async def states(proxy) -> dict[str, dict]:
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/readyz") as r:
        body = await r.json()
    return {r["replica"]: r for r in body["pools"]["gpu"]}


async def metrics(proxy) -> str:
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/metrics") as r:
        return await r.text()


async def test_a_failing_replica_is_cooled_down_then_probed_back(tmp_path, captured) -> None:
    async with replicas(2) as fakes:
        fakes[0].reply(error_reply(503), error_reply(503))  # then it answers again (its default)
        config = pool_config(
            tmp_path, [f.base_url for f in fakes], failures_before_cooldown=2, cooldown_seconds=COOLDOWN
        )
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            for _ in range(6):  # the picks take turns: replica 0 is asked first every other call
                final, _ = await ask(client)
                assert final.output_text == "from 1"
                if (await states(proxy))["gpu/0"]["state"] == "cooldown":
                    break
            cooled = await states(proxy)
            assert cooled["gpu/0"]["state"] == "cooldown" and cooled["gpu/0"]["failures"] == 2
            assert "replica says 503" in cooled["gpu/0"]["last_error"]
            assert 'crossfeed_upstream_replica_up{replica="gpu/0",upstream="gpu"} 0.0' in await metrics(proxy)
            asked = served(fakes)[0]
            for _ in range(3):  # left alone while it cools down
                final, headers = await ask(client)
                assert headers["x-crossfeed-replica"] == "gpu/1"
            assert served(fakes)[0] == asked == 2
            await asyncio.sleep(COOLDOWN + 0.2)
            assert (await states(proxy))["gpu/0"]["state"] == "probe"
            final, headers = await ask(client)  # the probe: the next call tries it
            assert (final.output_text, headers["x-crossfeed-replica"]) == ("from 0", "gpu/0")
            back = await states(proxy)
            text = await metrics(proxy)
            await client.close()
    assert back["gpu/0"]["state"] == "up" and back["gpu/0"]["failures"] == 0
    assert 'crossfeed_upstream_replica_up{replica="gpu/0",upstream="gpu"} 1.0' in text
    assert 'crossfeed_upstream_failovers_total{upstream="gpu"} 2.0' in text


async def test_a_probe_that_fails_cools_the_replica_down_again(tmp_path, captured) -> None:
    async with replicas(2) as fakes:
        fakes[0].default = error_reply(502)
        config = pool_config(
            tmp_path, [f.base_url for f in fakes], failures_before_cooldown=1, cooldown_seconds=COOLDOWN
        )
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            for _ in range(2):
                await ask(client)
            assert (await states(proxy))["gpu/0"]["state"] == "cooldown"
            await asyncio.sleep(COOLDOWN + 0.2)
            final, headers = await ask(client)  # its probe fails: answered by the other all the same
            assert headers["x-crossfeed-replica"] == "gpu/1" and final.output_text == "from 1"
            again = await states(proxy)
            await client.close()
    assert served(fakes)[0] == 2
    assert again["gpu/0"]["state"] == "cooldown" and again["gpu/0"]["failures"] == 2


async def test_readyz_shows_each_replica_without_credentials(tmp_path) -> None:
    async with replicas(2) as fakes:
        urls = [f.base_url.replace("http://", "http://user:SECRET-PW@") for f in fakes]
        config = pool_config(tmp_path, urls)
        async with running_proxy(config) as proxy:
            async with aiohttp.ClientSession() as s, s.get(proxy.url + "/readyz") as r:
                raw = await r.text()
                body = await r.json()
    assert "SECRET-PW" not in raw
    assert [(e["replica"], e["url"], e["state"]) for e in body["pools"]["gpu"]] == [
        ("gpu/0", fakes[0].base_url, "up"),
        ("gpu/1", fakes[1].base_url, "up"),
    ]


async def test_a_pool_is_ready_while_one_replica_answers_its_probe(tmp_path) -> None:
    dead = [f"http://127.0.0.1:{closed_port()}/v1" for _ in range(2)]
    async with replicas(1) as (good,):
        async with running_proxy(pool_config(tmp_path, [dead[0], good.base_url])) as proxy:
            assert await wait_until(lambda: "gpu/1" in proxy.app[PROBES] and "gpu/0" in proxy.app[PROBE_ERRORS], 10)
            async with aiohttp.ClientSession() as s, s.get(proxy.url + "/readyz") as r:
                ready = (r.status, await r.json())
    assert ready[0] == 200 and ready[1]["status"] == "ready", ready
    async with running_proxy(pool_config(tmp_path, dead)) as proxy:
        assert await wait_until(lambda: len(proxy.app[PROBE_ERRORS]) == 2, 10)
        async with aiohttp.ClientSession() as s, s.get(proxy.url + "/readyz") as r:
            status, body = r.status, await r.json()
    assert status == 503
    assert [p.split(" at ")[0] for p in body["problems"]] == ["upstream 'gpu/0'", "upstream 'gpu/1'"]
    assert all("cannot connect to the upstream 'gpu'" in p for p in body["problems"])
