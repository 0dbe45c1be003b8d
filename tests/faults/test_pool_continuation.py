"""Continuation (proxy/turns/continuation.py): with ``continue_on_failure``, a replica that dies in
the middle of the answer's text has it continued by another replica of the pool: that replica gets
the same conversation plus the partial text as a trailing assistant message (the prefill), and
the SDK reads one Response: one message item, its text the two parts, ``sequence_number``
continuous, one terminal event (the ``captured`` fixture validates every stream strictly). Inside a
call's arguments, with the option off, or with no healthy replica left: ``response.failed`` as
without it."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from crossfeed.proxy.keys import POOLS
from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.observability import METRICS
from tests.fakes.upstream import JSONReply, Recorded, SSEReply
from tests.faults.fault_upstream import closed_port
from tests.faults.pool_harness import (
    dying_then_rest,
    error_reply,
    failed_stream,
    failed_terminals,
    pool_config,
    replicas,
    scripted_pool,
    served,
    stream,
    terminals,
)
from tests.support.app_server import running_proxy
from tests.support.chat_chunks import DONE, chunk, usage_chunk
from tests.support.clients import sdk_client

HALF = chunk({"role": "assistant", "content": ""}) + chunk({"content": "Hello, "}) + chunk({"content": "wor"})
REST = chunk({"role": "assistant", "content": ""}) + chunk({"content": "ld!"}, "stop") + usage_chunk(12, 2) + DONE
CALL_HALF = chunk({"role": "assistant", "content": ""}) + chunk(
    {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"q":'}}]}
)
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]


@pytest.mark.parametrize("cut", [True, False], ids=["connection_dropped", "closed_without_finish"])
async def test_a_replica_dying_mid_text_is_continued_on_another(tmp_path, captured, cut) -> None:
    script = dying_then_rest(HALF, REST, cut=cut)
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True) as pool:
        events = await stream(pool.client)
        metric = pool.proxy.app[METRICS].continuations.labels("gpu", "continued")._value.get()
    first, second = script.calls
    assert first.body["messages"][-1]["role"] == "user"
    assert second.body["messages"][:-1] == first.body["messages"]
    assert second.body["messages"][-1] == {"role": "assistant", "content": "Hello, wor"}
    assert "continue_final_message" not in second.body
    assert sorted(served(pool.fakes)) == [1, 1]  # one replica each
    assert terminals(events) == ["response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == "Hello, world!"
    assert [e.type for e in events].count("response.output_item.added") == 1
    assert metric == 1


async def test_a_replica_that_repeats_the_prefill_first_has_it_dropped(tmp_path, captured) -> None:
    """llama.cpp's server streams the prefill it continues before its new text."""
    echoing = chunk({"role": "assistant", "content": None}) + chunk({"content": "Hello"}) + chunk({"content": ", wor"})
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply:
        calls.append(recorded)
        return SSEReply(HALF, cut=True) if len(calls) == 1 else SSEReply(echoing + REST)

    async with scripted_pool(tmp_path, captured, reply, continue_on_failure=True) as pool:
        events = await stream(pool.client)
    assert terminals(events) == ["response.completed"]
    assert events[-1].response.output_text == "Hello, world!"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello, world!"


async def test_vllm_prefill_asks_to_continue_the_final_message(tmp_path, captured) -> None:
    script = dying_then_rest(HALF, REST)
    keys = {"continue_on_failure": True, "prefill": "continue_final_message"}
    async with scripted_pool(tmp_path, captured, script, **keys) as pool:
        events = await stream(pool.client)
    body = script.calls[1].body
    assert body["messages"][-1] == {"role": "assistant", "content": "Hello, wor"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert events[-1].response.output_text == "Hello, world!"


async def test_a_replica_dying_inside_a_call_is_not_continued(tmp_path, captured) -> None:
    script = dying_then_rest(CALL_HALF, REST)
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True) as pool:
        events = await failed_stream(pool.client, captured, tools=TOOLS)
    assert failed_terminals(events) == ["response.failed"]
    assert events[-1]["response"]["error"]["code"] == "upstream_disconnected"
    assert sum(served(pool.fakes)) == 1  # no continuation asked


async def test_continuation_is_off_by_default(tmp_path, captured) -> None:
    async with scripted_pool(tmp_path, captured, dying_then_rest(HALF, REST)) as pool:
        events = await failed_stream(pool.client, captured)
    assert failed_terminals(events) == ["response.failed"]
    assert sum(served(pool.fakes)) == 1


async def test_no_healthy_replica_left_fails_as_before(tmp_path, captured) -> None:
    async with replicas(1) as (only,):
        script = dying_then_rest(HALF, REST)
        only.default = script
        dead = f"http://127.0.0.1:{closed_port()}/v1"
        config = pool_config(tmp_path, [only.base_url, dead], continue_on_failure=True)
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            events = await failed_stream(client, captured)
            await client.close()
            metric = proxy.app[METRICS].continuations.labels("gpu", "failed")._value.get()
    assert failed_terminals(events) == ["response.failed"]
    assert events[-1]["response"]["error"]["code"] == "upstream_disconnected"
    assert len(script.calls) == 1 and metric == 1


async def test_one_continuation_per_turn_by_default(tmp_path, captured) -> None:
    """The continuation dies too: with max_continuations = 1 the Response fails there."""
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply:
        calls.append(recorded)
        return SSEReply(HALF if len(calls) == 1 else chunk({"content": "ld"}), cut=True)

    async with scripted_pool(tmp_path, captured, reply, continue_on_failure=True) as pool:
        events = await failed_stream(pool.client, captured)
    assert len(calls) == 2
    assert failed_terminals(events) == ["response.failed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello, world"


async def test_a_replica_gone_silent_mid_text_is_continued_after_the_idle_timeout(tmp_path, captured) -> None:
    never = asyncio.Event()
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply:
        calls.append(recorded)
        return SSEReply(HALF, holds={len(HALF): never}) if len(calls) == 1 else SSEReply(REST)

    async with scripted_pool(tmp_path, captured, reply, continue_on_failure=True, timeouts={"idle": 0.5}) as pool:
        events = await stream(pool.client)
    assert terminals(events) == ["response.completed"]
    assert events[-1].response.output_text == "Hello, world!"
    assert calls[1].body["messages"][-1] == {"role": "assistant", "content": "Hello, wor"}
    usage = events[-1].response.usage
    assert (usage.input_tokens, usage.output_tokens) == (12, 2)  # the continuation's (the dead one sent none)


async def test_a_recorded_turn_shows_both_legs(tmp_path, captured) -> None:
    """With ``[logging] record_dir`` the turn is traced: the continuation is its second leg."""
    async with replicas(2) as fakes:
        script = dying_then_rest(HALF, REST)
        for fake in fakes:
            fake.default = script
        pool_config(tmp_path, [f.base_url for f in fakes], continue_on_failure=True)
        path = tmp_path / "pool.toml"
        where = tmp_path / "turns"
        path.write_text(path.read_text() + f'[logging]\nrecord_dir = "{where}"\n')
        async with running_proxy(load_config(path, {})) as proxy:
            client = sdk_client(proxy.base_url, captured)
            events = await stream(client)
            await client.close()
    assert events[-1].response.output_text == "Hello, world!"
    (turn,) = [p for p in where.rglob("turn.json")]
    meta = orjson.loads(turn.read_bytes())
    assert len(meta["legs"]) == 2 and meta["ending"] == "ok"


async def test_a_replica_that_refuses_the_prefill_leaves_the_failure_as_it_was(tmp_path, captured) -> None:
    """A 400 to the continuation (a server started with --no-prefill-assistant may refuse a
    trailing assistant message) is not tried elsewhere: the Response fails with the first error."""
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply | JSONReply:
        calls.append(recorded)
        return SSEReply(HALF, cut=False) if len(calls) == 1 else error_reply(400)

    async with scripted_pool(tmp_path, captured, reply, continue_on_failure=True) as pool:
        events = await failed_stream(pool.client, captured)
        states = {r["replica"]: r["state"] for r in pool.proxy.app[POOLS]["gpu"].states()}
    assert len(calls) == 2
    assert failed_terminals(events) == ["response.failed"]
    assert events[-1]["response"]["error"]["code"] == "upstream_truncated"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello, wor"
    assert set(states.values()) == {"up"}  # one failure each is below the cooldown threshold
