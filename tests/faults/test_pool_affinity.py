"""Lineage affinity (proxy/state/affinity.py): the turns of one conversation go to the replica
that served it before, so its prefix cache is used: a previous_response_id chain, a
conversation, Codex's session_id header, a prompt_cache_key; two crossfeed instances sharing one
SQLite store agree; a key whose replica is down moves (counted), and stays where it moved; an
x-codex-turn-state sent back reaches the replica it names. Without affinity each of these would
spread over the replicas: the picks of unkeyed calls take turns."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import pytest

from crossfeed.proxy.state import affinity
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import STORE
from tests.fakes.upstream import SSEReply
from tests.faults.fault_upstream import closed_port
from tests.faults.pool_harness import MODEL, ask, error_reply, pool_config, replicas, served
from tests.support.app_server import running_proxy
from tests.support.clients import sdk_client
from tests.support.responses_replies import answer


async def test_a_ten_turn_chain_stays_on_one_replica(tmp_path, captured) -> None:
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], store="sqlite")
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            await ask(client, "an unrelated turn first")  # moves the turn-taking on
            final, first = await ask(client, "turn 0")
            seen = {first["x-crossfeed-replica"]}
            for n in range(1, 10):
                final, headers = await ask(client, f"turn {n}", previous_response_id=final.id)
                assert final.status == "completed"
                seen.add(headers["x-crossfeed-replica"])
            await client.close()
    assert len(seen) == 1
    counts = served(fakes)
    assert sorted(counts) == [0, 1, 10] or sorted(counts) == [0, 0, 11]


async def socket_chain(client: openai.AsyncOpenAI, ws_frames, turns: int) -> None:
    """``turns`` chained turns (previous_response_id) over one SDK socket, each completed."""
    async with client.responses.connect() as conn:
        ws = ws_frames.attach(conn, "pool")
        previous = None
        for n in range(turns):
            turn, parsed = await ws.turn(model=MODEL, input=f"turn {n}", previous_response_id=previous)
            assert turn.terminal == "response.completed"
            previous = parsed[-1].response.id


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_a_chain_turn_reads_its_route_with_its_history(
    tmp_path, captured, ws_frames, monkeypatch, transport
) -> None:
    """The route of a chained turn comes with the response it continues (its record, or the
    socket's remembered response): an unkeyed chain makes no affinity lookup or write of its own
    (one per turn each before), and stays on its replica."""
    calls: list[str] = []
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], store="sqlite")
        async with running_proxy(config) as proxy:
            store = proxy.app[STORE]
            for name in ("recall", "remember"):
                real = getattr(store, name)

                async def counted(*args, _real=real, _name=name):
                    calls.append(f"{_name} {args[0]}")
                    return await _real(*args)

                monkeypatch.setattr(store, name, counted)
            client = sdk_client(proxy.base_url, captured)
            if transport == "http":
                final, _ = await ask(client, "turn 0")
                for n in range(1, 6):
                    final, _ = await ask(client, f"turn {n}", previous_response_id=final.id)
            else:
                await socket_chain(client, ws_frames, 6)
                assert ws_frames.validate()[0] == 6
            await client.close()
    assert calls == []
    assert sorted(served(fakes)) == [0, 0, 6]


async def test_a_conversation_stays_on_one_replica(tmp_path, captured) -> None:
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes])
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            conversation = await client.conversations.create()
            seen = set()
            for n in range(5):
                _, headers = await ask(client, f"turn {n}", conversation=conversation.id)
                seen.add(headers["x-crossfeed-replica"])
            await client.close()
    assert len(seen) == 1 and max(served(fakes)) == 5


async def test_a_session_header_or_a_prompt_cache_key_keeps_its_replica(tmp_path, captured) -> None:
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes])
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            sessions = set()
            caches = set()
            for n in range(4):
                _, headers = await ask(client, f"s {n}", extra_headers={"session_id": "codex-session-1"})
                sessions.add(headers["x-crossfeed-replica"])
                _, headers = await ask(client, f"c {n}", prompt_cache_key="cache-key-1")
                caches.add(headers["x-crossfeed-replica"])
            await client.close()
    assert len(sessions) == 1 and len(caches) == 1


async def test_two_crossfeed_instances_on_one_sqlite_store_agree(tmp_path, captured) -> None:
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], store="sqlite")
        async with running_proxy(config) as one, running_proxy(config) as two:
            a, b = sdk_client(one.base_url, captured), sdk_client(two.base_url, captured)
            await ask(a, "unrelated")  # instance one's turn-taking is one call ahead of two's
            final, headers = await ask(a, "first", extra_headers={"session_id": "shared"})
            chosen = headers["x-crossfeed-replica"]
            on_two = [
                (await ask(b, f"then {n}", extra_headers={"session_id": "shared"}))[1]["x-crossfeed-replica"]
                for n in range(3)
            ]
            _, chained = await ask(b, "a chain made on one", previous_response_id=final.id)
            await a.close()
            await b.close()
    assert on_two == [chosen] * 3
    assert chained["x-crossfeed-replica"] == chosen  # (the chain's key is the session it began in)


async def test_a_key_whose_replica_fails_moves_and_stays_moved(tmp_path, captured) -> None:
    async with replicas(2) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], failures_before_cooldown=5)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            _, headers = await ask(client, "one", prompt_cache_key="k")
            first = headers["x-crossfeed-replica"]
            i = int(first.rsplit("/", 1)[1])
            fakes[i].default = error_reply(503)
            moved = [
                (await ask(client, f"again {n}", prompt_cache_key="k"))[1]["x-crossfeed-replica"] for n in range(3)
            ]
            fakes[i].default = fakes[1 - i].default  # healthy again: the key stays where it moved
            _, after = await ask(client, "later", prompt_cache_key="k")
            async with aiohttp.ClientSession() as s, s.get(proxy.url + "/metrics") as r:
                text = await r.text()
            await client.close()
    other = f"gpu/{1 - i}"
    assert moved == [other] * 3 and after["x-crossfeed-replica"] == other
    assert served(fakes)[i] == 2  # the turn that moved the key asked it once, then it was left
    assert 'crossfeed_upstream_affinity_moves_total{upstream="gpu"} 1.0' in text


async def test_the_turn_state_sent_back_reaches_the_replica_it_names(tmp_path, captured) -> None:
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes])
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            _, headers = await ask(client, "first")
            token, replica = headers["x-codex-turn-state"], headers["x-crossfeed-replica"]
            assert replica not in token  # opaque
            pinned = [
                (await ask(client, f"n {n}", extra_headers={"x-codex-turn-state": token}))[1]["x-crossfeed-replica"]
                for n in range(4)
            ]
            spread = {(await ask(client, f"free {n}"))[1]["x-crossfeed-replica"] for n in range(3)}
            forged = (await ask(client, "x", extra_headers={"x-codex-turn-state": "cf1.bm9wZS85"}))[0]
            await client.close()
    assert pinned == [replica] * 4
    assert len(spread) == 3  # unkeyed calls take turns
    assert forged.status == "completed"  # a token naming no replica of this pool is ignored


async def test_a_websocket_chain_fails_over_and_stays_on_its_replica(tmp_path, ws_frames) -> None:
    """WebSocket mode's turns go through the pool too: a refused replica is left, and a chain made
    on the socket (previous_response_id) keeps the replica that answered its first turn."""
    async with replicas(2) as fakes:
        urls = [f"http://127.0.0.1:{closed_port()}/v1", *(f.base_url for f in fakes)]
        config = pool_config(tmp_path, urls, store="sqlite")
        async with running_proxy(config) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)
            await socket_chain(client, ws_frames, 4)
            await client.close()
    counts = served(fakes)
    assert sorted(counts) == [0, 4]


async def test_a_chain_on_a_pooled_responses_backend_returns_to_the_replica_that_stores_it(tmp_path) -> None:
    """A Responses backend passed through keeps its own stored responses, per replica: crossfeed
    reads each answer's id as it passes, so a previous_response_id goes back to its replica. (GET
    /v1/responses/{id} too. The fake's stream is passed through as it is: it is not held to the strict validator here.)"""
    async with replicas(3) as fakes:
        for i, fake in enumerate(fakes):
            fake.default = lambda recorded, i=i, fake=fake: SSEReply(
                b"".join(answer([f"from {i}"], resp_id=f"resp_r{i}n{len(fake.requests)}"))
            )
        config = pool_config(tmp_path, [f.base_url for f in fakes], api="responses")
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, [])
            await ask(client, "unrelated")
            final, _ = await ask(client, "turn 0")
            texts = {final.output_text}
            for n in range(1, 5):
                final, _ = await ask(client, f"turn {n}", previous_response_id=final.id)
                texts.add(final.output_text)
            async with aiohttp.ClientSession() as s, s.get(f"{proxy.base_url}/responses/{final.id}") as r:
                assert r.status == 200
            await client.close()
    assert len(texts) == 1
    assert sorted(len(f.requests) for f in fakes) in ([0, 1, 6], [0, 0, 7])
    holder = next(f for f in fakes if f.requests and f.requests[-1].method == "GET")
    assert holder.requests[-1].path == f"/v1/responses/{final.id}" and len(holder.requests) >= 6


@pytest.mark.parametrize("fault", ["fails", "hangs"])
async def test_a_broken_store_costs_the_affinity_never_the_turn(tmp_path, captured, monkeypatch, fault) -> None:
    monkeypatch.setattr(affinity, "MAX_WAIT", 0.1)
    never = asyncio.Event()

    async def broken(*_args: object) -> None:
        if fault == "hangs":
            await never.wait()
        raise StoreError("the store is down", backend="test")

    async with replicas(2) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes])
        async with running_proxy(config) as proxy:
            monkeypatch.setattr(proxy.app[STORE], "recall", broken)
            monkeypatch.setattr(proxy.app[STORE], "remember", broken)
            client = sdk_client(proxy.base_url, captured)
            finals = [(await ask(client, f"n {n}", prompt_cache_key="k"))[0] for n in range(2)]
            await client.close()
    assert [f.status for f in finals] == ["completed", "completed"]
