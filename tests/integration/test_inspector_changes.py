"""The inspector's "what changed" rows and its sessions, on real turns (issue 37).

- A field crossfeed does not pass to a chat backend (``metadata``, ``truncation``) is a ``dropped``
  row; a value crossfeed fills in for a field the client left out (``stream``, and ``store`` on a
  Responses backend) a ``defaulted`` one, never ``added``.
- Turns are grouped by session: a conversation's turn under ``conversation conv_...``, a Codex
  turn (its ``session_id`` header) under ``session <id>``, and a turn with a ``prompt_cache_key``
  under ``session <key>``; a turn with none of them starts a chain of its own.
The pure rows are tests/proxy/runtime/test_inspector_diff.py.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy
from tests.support.chat_replies import json_text
from tests.support.inspector_turns import ADMIN_KEY, CLIENT_KEY, ENVIRON, settings, text_stream
from tests.support.responses_replies import answer

pytestmark = pytest.mark.timeout(90)
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
CLIENT = {"Authorization": f"Bearer {CLIENT_KEY}"}


async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any] | bytes:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers={**CLIENT, **(headers or {})}) as r:
        assert r.status == 200, await r.read()
        return await r.json() if r.content_type == "application/json" else await r.read()


async def shown_turns(handle: ProxyHandle) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s:
        async with s.get(handle.url + "/inspector/api/turns", headers=ADMIN) as r:
            listed = (await r.json())["turns"]
        out = []
        for turn in listed:
            async with s.get(f"{handle.url}/inspector/api/turns/{turn['id']}", headers=ADMIN) as r:
                out.append(await r.json())
        return out


def rows(turn: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["field"]: c for c in turn["changes"]}


async def test_dropped_and_defaulted_fields_on_a_chat_backend(upstream: FakeUpstream) -> None:
    upstream.reply(json_text("A whole answer."))
    body = {"model": "m", "input": "hi", "metadata": {"team": "blue"}, "truncation": "auto", "include": []}
    async with running_proxy(settings(upstream), environ=ENVIRON) as handle:
        await post(handle.base_url + "/responses", body)  # no stream: crossfeed sends stream false
        (turn,) = await shown_turns(handle)
    sent = turn["upstream_request"]
    assert "metadata" not in sent and "truncation" not in sent and sent["stream"] is False
    changes = rows(turn)
    for name in ("metadata", "truncation", "include"):
        assert changes[name]["change"] == "dropped", changes[name]
        assert changes[name]["detail"] == "not sent to the backend"
    assert changes["stream"]["change"] == "defaulted" and changes["stream"]["detail"].endswith(": False")
    assert changes["input"]["change"] == "mapped"
    assert [c["field"] for c in turn["changes"] if c["change"] == "added"] == ["messages"]  # built from the input


async def test_store_is_defaulted_on_a_responses_backend(upstream: FakeUpstream) -> None:
    upstream.reply(SSEReply(b"".join(answer(["Hi."]))))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with running_proxy(settings(upstream, **{"upstream.api": "responses"}), environ=ENVIRON) as handle:
        await post(handle.base_url + "/chat/completions", body)
        (turn,) = await shown_turns(handle)
    assert turn["upstream_request"]["store"] is False
    changes = rows(turn)
    assert changes["store"]["change"] == "defaulted" and changes["store"]["detail"].endswith(": False")
    assert changes["messages"]["change"] == "mapped" and "stream" not in changes  # sent as the client sent it


async def test_turns_are_grouped_by_conversation_codex_session_and_cache_key(upstream: FakeUpstream) -> None:
    upstream.default = lambda req: SSEReply(text_stream("ok"))
    async with running_proxy(settings(upstream), environ=ENVIRON) as handle:
        created = await post(handle.base_url + "/conversations", {"items": []})
        assert isinstance(created, dict)
        conv = created["id"]
        assert conv.startswith("conv_")
        turn = {"model": "m", "input": "hi", "stream": True}
        await post(handle.base_url + "/responses", {**turn, "conversation": conv})
        await post(handle.base_url + "/responses", {**turn, "conversation": {"id": conv}})
        await post(handle.base_url + "/responses", turn, {"session_id": "codex-session-7"})
        await post(handle.base_url + "/responses", {**turn, "prompt_cache_key": "cache-key-3"})
        await post(handle.base_url + "/responses", turn)
        shown = await shown_turns(handle)
    assert [t["session"] for t in shown[:4]] == [
        f"conversation {conv}",
        f"conversation {conv}",
        "session codex-session-7",
        "session cache-key-3",
    ]
    alone = shown[4]
    assert alone["response_id"].startswith("resp_") and alone["session"] == f"chain {alone['response_id']}"
    # the conversation's second turn: its earlier items resolved from the store
    assert rows(shown[1])["conversation"]["change"] == "mapped"
    assert len(shown[1]["upstream_request"]["messages"]) > len(shown[0]["upstream_request"]["messages"])
