"""A WebSocket's turns on a pool (proxy/state/affinity.py): the frames of a socket carry no headers
and, as Codex sends them, chain unstored responses (``store: false`` + ``previous_response_id``)
whose chain keeps no root in the store; they are keyed by the handshake's ``session-id`` or the
frames' ``prompt_cache_key`` then, so every turn of the socket reaches one replica (without that,
unkeyed picks take turns over the replicas). The real Codex CLI on a pool:
tests/e2e/test_codex_pool.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults.pool_harness import MODEL, pool_config, replicas, served
from tests.support.app_server import running_proxy
from tests.support.ws import FrameRecorder, ws_url


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
