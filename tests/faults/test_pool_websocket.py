"""A WebSocket's turns on a pool (proxy/state/affinity.py): the frames of a socket carry no headers
and, as Codex sends them, chain unstored responses (``store: false`` + ``previous_response_id``)
whose chain keeps no root in the store; they are keyed by the handshake's ``session-id`` or the
frames' ``prompt_cache_key`` then, so every turn of the socket reaches one replica (without that,
unkeyed picks take turns over the replicas). The real Codex CLI on a pool:
tests/e2e/test_codex_pool.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from crossfeed.proxy.state.affinity import TURN_STATE_HEADER
from tests.faults.pool_harness import MODEL, pool_config, replicas, served
from tests.support.app_server import running_proxy
from tests.support.ws import FrameRecorder, RawWS, ws_url


@pytest.mark.parametrize(
    ("headers", "frame"),
    [({"session-id": "codex-session-1"}, {}), ({}, {"prompt_cache_key": "cache-1"})],
    ids=["session-id header", "prompt_cache_key"],
)
async def test_an_unstored_chain_on_a_socket_stays_on_one_replica(
    tmp_path, ws_frames: FrameRecorder, headers: dict[str, str], frame: dict[str, Any]
) -> None:
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], store="sqlite")
        async with running_proxy(config) as proxy, ws_frames.connect(ws_url(proxy.url), headers=headers) as ws:
            previous = None
            for n in range(5):
                body: dict[str, Any] = {"model": MODEL, "input": f"turn {n}", "store": False, **frame}
                if previous is not None:
                    body["previous_response_id"] = previous
                turn = await ws.turn(**body)
                assert turn.terminal == "response.completed", turn.events[-1:]
                previous = turn.response["id"]
    assert sorted(served(fakes)) == [0, 0, 5]


@contextlib.asynccontextmanager
async def socket(
    recorder: FrameRecorder, url: str, headers: dict[str, str]
) -> AsyncIterator[tuple[RawWS, Mapping[str, str]]]:
    """A raw socket whose frames ``recorder`` validates, and the headers of its 101."""
    seen: list[Mapping[str, str]] = []

    async def on_end(_s: Any, _c: Any, params: aiohttp.TraceRequestEndParams) -> None:
        seen.append(params.response.headers)

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_end)
    async with aiohttp.ClientSession(trace_configs=[trace]) as session:
        ws = await session.ws_connect(url, headers=headers)
        try:
            yield RawWS(ws, recorder.log()), seen[-1]
        finally:
            await ws.close()


async def turns(ws: RawWS, n: int) -> None:
    previous = None
    for i in range(n):
        body: dict[str, Any] = {"model": MODEL, "input": f"turn {i}", "store": False}
        if previous is not None:
            body["previous_response_id"] = previous
        turn = await ws.turn(**body)
        assert turn.terminal == "response.completed", turn.events[-1:]
        previous = turn.response["id"]


async def test_the_101_names_the_session_and_a_socket_reconnecting_with_it_keeps_the_replica(
    tmp_path, ws_frames: FrameRecorder
) -> None:
    """Codex sends the 101's x-codex-turn-state back when it reconnects within a turn: the new
    socket's turns go where the first socket's went, with no session header of their own (without
    the token they are unkeyed and take turns over the replicas)."""
    async with replicas(3) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], store="sqlite")
        async with running_proxy(config) as proxy:
            url = ws_url(proxy.url)
            async with socket(ws_frames, url, {"session-id": "codex-session-9"}) as (ws, answer):
                token = answer.get(TURN_STATE_HEADER, "")
                assert token.startswith("cf2.")
                await turns(ws, 2)
            first = served(fakes).index(2)
            async with socket(ws_frames, url, {TURN_STATE_HEADER: token}) as (ws, answer):
                assert answer.get(TURN_STATE_HEADER) == token  # a token of ours comes back as it was
                await turns(ws, 3)
    assert served(fakes)[first] == 5 and sum(served(fakes)) == 5
    assert ws_frames.validate() == (5, 0)


@pytest.mark.parametrize("pooled", [True, False], ids=["pool without session", "one upstream"])
async def test_no_token_without_a_session_or_a_pool(tmp_path, ws_frames: FrameRecorder, pooled: bool) -> None:
    async with replicas(2) as fakes:
        urls = [f.base_url for f in fakes] if pooled else [fakes[0].base_url]
        config = pool_config(tmp_path, urls, store="sqlite")
        headers = {} if pooled else {"session-id": "s-1"}
        async with running_proxy(config) as proxy, socket(ws_frames, ws_url(proxy.url), headers) as (ws, answer):
            assert TURN_STATE_HEADER not in answer
            await turns(ws, 1)
    assert ws_frames.validate() == (1, 0)
