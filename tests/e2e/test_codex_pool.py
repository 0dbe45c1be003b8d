"""The real Codex CLI through crossfeed whose upstream is a pool of two fake chat replicas.

Codex runs a task of several requests (two shell commands, then the answer built from their
output), then ``codex exec resume --last`` adds a turn in a new Codex process. Every request of
the session must reach ONE replica, in both of Codex's configurations (tests/e2e/test_codex.py):

- ``provider`` (HTTP and SSE): each POST's answer carries the ``x-codex-turn-state`` crossfeed
  minted, and Codex 0.171 sends it back on the next POSTs of the same turn (the requests after a
  tool call), so those are pinned to the replica it names. A new turn (the ``resume``) starts with
  no turn state: Codex keeps it per turn only; that turn reaches the same replica through its
  ``session-id`` header (the affinity key, kept in the store).
- ``openai_base_url`` (WebSocket): the frames of a socket carry no headers; crossfeed's 101
  answer carries an ``x-codex-turn-state`` naming the handshake's session (docs/DESIGN.md
  "Pools"), which a reconnect within a turn sends back; every turn on the socket is
  keyed by the handshake's ``session-id`` (the prewarm, which does not reach the backend, roots the
  ``previous_response_id`` chain of the frames after it), so all reach the same replica.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from crossfeed.proxy.state import affinity
from crossfeed.translators.ids import SequentialIds
from tests.e2e import codex_support as cx
from tests.fakes.upstream import FakeUpstream, Recorded
from tests.faults.pool_harness import pool_config, replicas, served
from tests.support.app_server import running_proxy
from tests.support.chat_replies import call_reply, text_reply

pytestmark = [pytest.mark.codex, pytest.mark.timeout(400)]

codex_bin = pytest.fixture(autouse=True)(cx.codex_binary_or_skip)


class Seen:
    """What crossfeed got and answered on its Responses routes (its ``on_response_prepare``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.path.startswith("/v1/responses"):
            self.requests.append(
                {
                    "method": request.method,
                    "status": response.status,
                    "sent": request.headers.get(affinity.TURN_STATE_HEADER),
                    "minted": response.headers.get(affinity.TURN_STATE_HEADER),
                    "replica": response.headers.get(affinity.REPLICA_HEADER),
                }
            )


def tool_outputs(req: Recorded) -> str:
    return " ".join(str(m["content"]) for m in req.body["messages"] if m.get("role") == "tool")


def script(fake: FakeUpstream) -> None:
    """Two shell commands, the answer from their outputs, then the resumed turn's answer."""
    fake.reply(
        call_reply("call_a", "exec_command", json.dumps({"cmd": "echo alpha-$((6*7))"})),
        call_reply("call_b", "exec_command", json.dumps({"cmd": "echo beta-$((7*8))"})),
        lambda req: text_reply(f"Outputs: {'alpha' if 'alpha-42' in tool_outputs(req) else '?'} done."),
        text_reply("Second turn answered."),
    )


@pytest.mark.parametrize("setup", ["provider", "openai_base_url"])
async def test_a_codex_session_stays_on_one_replica(tmp_path: Path, setup: str) -> None:
    seen = Seen()
    async with replicas(2) as fakes:
        for fake in fakes:
            script(fake)
        config = pool_config(tmp_path, [f.base_url for f in fakes], store="sqlite", model=cx.FALLBACK_MODEL)

        def watch(app: web.Application) -> None:
            app.on_response_prepare.append(seen)

        async with running_proxy(config, before_start=watch, ids=SequentialIds(), clock=lambda: 1_700_000_000) as proxy:
            home, work = tmp_path / "home", tmp_path / "work"
            work.mkdir()
            write = cx.write_codex_home if setup == "provider" else cx.write_codex_home_builtin
            env = write(home, base_url=proxy.base_url, model=cx.FALLBACK_MODEL)
            first = await asyncio.to_thread(cx.run_codex_exec, "run both", cwd=work, env=env, ephemeral=False)
            assert first.returncode == 0, first.stderr[-3000:]
            assert cx.agent_messages(cx.parse_events(first.stdout))[-1] == "Outputs: alpha done."
            second = await asyncio.to_thread(cx.run_codex_exec, "again", cwd=work, env=env, resume_last=True)
            assert second.returncode == 0, second.stderr[-3000:]
            assert cx.agent_messages(cx.parse_events(second.stdout))[-1] == "Second turn answered."
            out = first.stdout + first.stderr + second.stdout + second.stderr
            assert "Reconnecting" not in out and "Falling back" not in out, out[-3000:]

    counts = served(fakes)
    assert sorted(counts) == [0, 4], counts  # 3 requests of the first turn, 1 of the second
    chosen = f"gpu/{counts.index(4)}"
    if setup == "provider":
        posts = [r for r in seen.requests if r["method"] == "POST"]
        assert len(posts) == 4 and all(r["replica"] == chosen for r in posts), posts
        token = affinity.turn_state(chosen)
        assert all(r["minted"] == token for r in posts)
        # sent back within a turn (after each tool call), not at a turn's start
        assert [r["sent"] for r in posts] == [None, token, token, None], posts
    else:
        assert all(r["method"] == "GET" for r in seen.requests), seen.requests
        # each 101 names the socket's session; a handshake sends back none or one crossfeed minted
        assert all(r["status"] == 101 for r in seen.requests), seen.requests
        keys = {affinity.read_key_token(r["minted"]) for r in seen.requests}
        assert len(keys) == 1 and next(iter(keys), "").startswith("session:"), seen.requests
        assert all(r["sent"] in (None, r["minted"]) for r in seen.requests), seen.requests
