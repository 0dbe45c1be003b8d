"""A ``stream: false`` turn on a pool with ``continue_on_failure`` (exchange.whole_leg): the client
has seen nothing, so a replica that dies while crossfeed reads its whole answer (the connection
drops in the middle of the body, the body is cut JSON) is asked no more, and another healthy
replica answers the same request whole. A body of valid JSON and a 4xx are never asked again;
with the option off the error is the client's as before."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from crossfeed.proxy.runtime.observability import METRICS
from tests.fakes.upstream import JSONReply, Recorded, SSEReply
from tests.faults.pool_harness import MODEL, error_reply, scripted_pool, served
from tests.support.chat_replies import json_text

# The first bytes of a chat.completion, then nothing more.
CUT = b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"as'


def dying_then_whole(first: SSEReply | JSONReply) -> Any:
    """Every replica's reply: the pool's first call gets ``first``; any later one a whole answer."""
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply | JSONReply:
        calls.append(recorded)
        return first if len(calls) == 1 else json_text("whole from the second")

    reply.calls = calls  # type: ignore[attr-defined]
    return reply


def cut_body(*, dropped: bool) -> SSEReply:
    """200 headers and the start of a JSON body; then the connection drops (``dropped``) or the
    body ends there."""
    return SSEReply(CUT, content_type="application/json", cut=dropped)


async def ask_whole(client: Any) -> tuple[Any, dict[str, str]]:
    raw = await client.responses.with_raw_response.create(model=MODEL, input="hi")
    return raw.parse(), dict(raw.headers)


@pytest.mark.parametrize("dropped", [True, False], ids=["connection_dropped", "truncated_json"])
async def test_a_replica_dying_mid_body_is_asked_no_more(tmp_path, captured, dropped) -> None:
    script = dying_then_whole(cut_body(dropped=dropped))
    async with scripted_pool(tmp_path, captured, script, continue_on_failure=True) as pool:
        response, headers = await ask_whole(pool.client)
        retried = pool.proxy.app[METRICS].continuations.labels("gpu", "retried")._value.get()
    first, second = script.calls
    assert second.body == first.body  # the same request, no prefill: nothing reached the client
    assert sorted(served(pool.fakes)) == [1, 1]
    assert response.status == "completed"
    assert response.output_text == "whole from the second"
    second_index = next(i for i, f in enumerate(pool.fakes) if f.requests and f.requests[0] is second)
    assert headers["x-crossfeed-replica"] == f"gpu/{second_index}"
    assert retried == 1


async def test_without_continue_on_failure_the_error_is_the_clients(tmp_path, captured) -> None:
    async with scripted_pool(tmp_path, captured, dying_then_whole(cut_body(dropped=True))) as pool:
        with pytest.raises(openai.APIStatusError) as raised:
            await ask_whole(pool.client)
    assert raised.value.status_code == 502
    assert raised.value.code == "upstream_unavailable"
    assert sum(served(pool.fakes)) == 1


async def test_a_body_of_valid_json_is_never_asked_again(tmp_path, captured) -> None:
    """Whatever it says, a whole JSON body is the replica's answer (here an error inside a 200)."""
    said = JSONReply({"error": {"message": "the model broke", "code": "model_error"}})
    async with scripted_pool(tmp_path, captured, dying_then_whole(said), continue_on_failure=True) as pool:
        try:
            await ask_whole(pool.client)
        except openai.APIError:
            pass
    assert sum(served(pool.fakes)) == 1


async def test_a_4xx_is_never_asked_again(tmp_path, captured) -> None:
    async with scripted_pool(tmp_path, captured, dying_then_whole(error_reply(400)), continue_on_failure=True) as pool:
        with pytest.raises(openai.BadRequestError):
            await ask_whole(pool.client)
    assert sum(served(pool.fakes)) == 1


async def test_one_retry_per_turn_by_default(tmp_path, captured) -> None:
    """The second replica dies mid-body too: with max_continuations = 1 the error is the client's."""
    calls: list[Recorded] = []

    def reply(recorded: Recorded) -> SSEReply:
        calls.append(recorded)
        return cut_body(dropped=True)

    async with scripted_pool(tmp_path, captured, reply, n=3, continue_on_failure=True) as pool:
        with pytest.raises(openai.APIStatusError) as raised:
            await ask_whole(pool.client)
    assert raised.value.status_code == 502
    assert len(calls) == 2
