"""Stored responses scoped by inbound key: what one key made, another key cannot read, list,
continue, delete or replay; it answers exactly as for an id that does not exist.

Keys: ``alice`` and ``bob`` from ``[[server.inbound_keys]]`` and one comma-separated key of
``inbound_keys_env`` (named ``key-1``). Neither key ever appears in a log line, a stored record
or the metrics; their names do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import structlog

from crossfeed.proxy.runtime.config import load_config
from crossfeed.translators.ids import SequentialIds
from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.ws import FrameRecorder

pytestmark = pytest.mark.timeout(60)

KEYS = {"ALICE_KEY": "sk-alice-0f9e8d", "BOB_KEY": "sk-bob-7a6b5c", "LEGACY_KEYS": "sk-legacy-1d2c3b"}


def answer(req: Any) -> SSEReply | JSONReply:
    if req.body.get("stream"):
        return SSEReply(chunk({"role": "assistant", "content": "hello"}, "stop") + DONE)
    return JSONReply(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "summary text"}}
            ],
        }
    )


@pytest.fixture
async def scoped(upstream: FakeUpstream, tmp_path: Path) -> Any:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "data"),
            "server.inbound_keys": [{"name": "alice", "key_env": "ALICE_KEY"}, {"name": "bob", "key_env": "BOB_KEY"}],
            "server.inbound_keys_env": "LEGACY_KEYS",
        },
    )
    upstream.default = answer
    async with running_proxy(config, dict(KEYS), ids=SequentialIds()) as handle:
        yield handle


def as_(handle: ProxyHandle, env: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(base_url=handle.base_url, timeout=30, headers={"Authorization": f"Bearer {KEYS[env]}"})


async def test_another_key_sees_nothing(scoped: ProxyHandle, tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        async with as_(scoped, "ALICE_KEY") as alice, as_(scoped, "BOB_KEY") as bob:
            made = (await alice.post("/responses", json={"model": "m", "input": "hi"})).json()
            rid = made["id"]
            unknown = await bob.get("/responses/resp_nope")
            for method, path in (
                ("GET", f"/responses/{rid}"),
                ("GET", f"/responses/{rid}/input_items"),
                ("DELETE", f"/responses/{rid}"),
            ):
                r = await bob.request(method, path)
                assert r.status_code == 404, (method, path)
                assert r.json()["error"]["message"] == unknown.json()["error"]["message"].replace("resp_nope", rid)
            r = await bob.post("/responses", json={"model": "m", "input": "more", "previous_response_id": rid})
            assert r.status_code == 404 and r.json()["error"]["code"] == "previous_response_not_found"
            # the owner still has it, and can do all of it
            assert (await alice.get(f"/responses/{rid}")).json()["id"] == rid
            assert (await alice.get(f"/responses/{rid}/input_items")).status_code == 200
            r = await alice.post("/responses", json={"model": "m", "input": "more", "previous_response_id": rid})
            assert r.status_code == 200
            assert (await alice.delete(f"/responses/{rid}")).json()["deleted"] is True
        async with as_(scoped, "LEGACY_KEYS") as legacy:
            assert (await legacy.post("/responses", json={"model": "m", "input": "hi"})).status_code == 200
    lines = [e for e in logs if e.get("event") == "request.completed"]
    assert {e.get("key") for e in lines} == {"alice", "bob", "key-1"}
    text = repr(logs)
    assert all(secret not in text for secret in KEYS.values())
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert b"alice" in stored and all(secret.encode() not in stored for secret in KEYS.values())
    async with httpx2.AsyncClient(base_url=scoped.url, timeout=10) as anyone:
        metrics = (await anyone.get("/metrics")).text
    assert 'key="alice"' in metrics and 'key="bob"' in metrics
    assert all(secret not in metrics for secret in KEYS.values())


async def test_websocket_continuation_and_compaction_replay_are_scoped(
    scoped: ProxyHandle, ws_frames: FrameRecorder
) -> None:
    async with as_(scoped, "ALICE_KEY") as alice, as_(scoped, "BOB_KEY") as bob:
        rid = (await alice.post("/responses", json={"model": "m", "input": "hi"})).json()["id"]
        compacted = (await alice.post("/responses/compact", json={"model": "m", "input": "long history"})).json()
        item = compacted["output"][-1]
        ok = await alice.post("/responses", json={"model": "m", "input": [item, {"role": "user", "content": "go"}]})
        assert ok.status_code == 200
        r = await bob.post("/responses", json={"model": "m", "input": [item, {"role": "user", "content": "go"}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_encrypted_content"
    url = scoped.url.replace("http", "ws") + "/v1/responses"
    async with ws_frames.connect(url, headers={"Authorization": f"Bearer {KEYS['BOB_KEY']}"}) as ws:
        turn = await ws.turn(type="response.create", model="m", input="more", previous_response_id=rid)
        assert turn.error["code"] == "previous_response_not_found"
    async with ws_frames.connect(url, headers={"Authorization": f"Bearer {KEYS['ALICE_KEY']}"}) as ws:
        turn = await ws.turn(type="response.create", model="m", input="more", previous_response_id=rid)
        assert turn.terminal == "response.completed"


def test_unset_named_keys_refuse_to_start(tmp_path: Path) -> None:
    from crossfeed.proxy.app import create_app
    from crossfeed.proxy.errors import ConfigError

    config = load_config(
        None, {}, {"store.data_dir": str(tmp_path), "server.inbound_keys": [{"name": "alice", "key_env": "ALICE_KEY"}]}
    )
    with pytest.raises(ConfigError, match=r"server.inbound_keys.0.key_env \(key 'alice'\) names \$ALICE_KEY"):
        create_app(config, environ={})
    with pytest.raises(ConfigError, match="key names must be unique"):
        create_app(
            load_config(
                None, {}, {"server.inbound_keys": [{"name": "a", "key_env": "K1"}, {"name": "a", "key_env": "K2"}]}
            ),
            environ={"K1": "x", "K2": "y"},
        )
