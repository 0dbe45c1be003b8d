"""Affinity hints (proxy/state/affinity_hints.py): an upstream's ``affinity_header`` and
``affinity_field`` carry the turn's affinity key, hashed, to a backend or router that routes by
it; on one URL as on a pool, translated or passed through, and never the raw key. Validated where
the config is loaded."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.state.affinity_hints import hint_value
from tests.fakes.upstream import JSONReply, Recorded, SSEReply
from tests.faults.pool_harness import MODEL, ask, error_reply, pool_config, replicas
from tests.support.app_server import running_proxy
from tests.support.clients import sdk_client
from tests.support.responses_replies import answer


def sent(fake, header: str = "x-session-id", field: str = "user") -> list[tuple[str | None, str | None]]:
    """Each chat call's hint header and body field, as the backend got them."""
    return [(r.headers.get(header), r.body.get(field)) for r in fake.requests if r.path.endswith("/chat/completions")]


async def test_one_backend_gets_the_keys_hashed_in_a_header_and_a_field(tmp_path, captured) -> None:
    async with replicas(1) as (fake,):
        config = pool_config(tmp_path, [fake.base_url], affinity_header="x-session-id", affinity_field="user")
        assert not config.upstreams[0].pooled
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            await ask(client, "keyed", prompt_cache_key="cache-key-1")
            await ask(client, "a session", extra_headers={"session_id": "codex-session-1"})
            first, _ = await ask(client, "a chain starts, unkeyed")
            second, _ = await ask(client, "turn 2", previous_response_id=first.id)
            await ask(client, "turn 3", previous_response_id=second.id)
            conversation = await client.conversations.create()
            await ask(client, "in a conversation", conversation=conversation.id)
            await client.close()
    root = hint_value(f"resp:{first.id}")
    cache, session, conv = (
        hint_value(k) for k in ("cache:cache-key-1", "session:codex-session-1", f"conv:{conversation.id}")
    )
    assert sent(fake) == [(cache, cache), (session, session), (None, None), (root, root), (root, root), (conv, conv)]
    assert len({cache, session, root, conv}) == 4 and all(len(h) == 32 for h in (cache, root))
    raw = ("cache-key-1", "codex-session-1", first.id, conversation.id)
    for request in fake.requests:  # the raw keys reach the backend nowhere but in the prompt
        assert not any(k in str(request.headers) for k in raw)
        assert request.body.get("prompt_cache_key") is None


async def test_a_pools_replicas_get_the_hint_too(tmp_path, captured) -> None:
    async with replicas(2) as fakes:
        config = pool_config(tmp_path, [f.base_url for f in fakes], affinity_header="x-sticky")
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, captured)
            for n in range(3):
                await ask(client, f"turn {n}", extra_headers={"session_id": "s-1"})
            await ask(client, "unkeyed")
            await client.close()
    calls = [c for f in fakes for c in sent(f, "x-sticky")]
    hint = hint_value("session:s-1")
    assert sorted(calls, key=str) == sorted([(hint, None)] * 3 + [(None, None)], key=str)


async def test_a_chat_completion_passed_through_carries_the_hint(tmp_path) -> None:
    """``/v1/chat/completions`` on a chat upstream is passed through (the client's body as sent),
    with the hint added: a ``session_id`` header's key, else ``prompt_cache_key``'s; none without."""
    async with replicas(1) as (fake,):
        config = pool_config(tmp_path, [fake.base_url], affinity_header="x-session-id", affinity_field="user")
        async with running_proxy(config) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)
            asks: list[dict] = [
                {"extra_headers": {"session_id": "codex-session-1"}},
                {"extra_body": {"prompt_cache_key": "cache-key-1"}},
                {},
            ]
            for kwargs in asks:
                stream = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True, **kwargs
                )
                assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "from 0"
            await client.close()
    session, cache = hint_value("session:codex-session-1"), hint_value("cache:cache-key-1")
    assert sent(fake) == [(session, session), (cache, cache), (None, None)]
    assert fake.requests[1].body["prompt_cache_key"] == "cache-key-1"  # the client's body, as it sent it


async def test_a_pooled_embeddings_call_carries_the_hint_in_its_body_and_still_fails_over(tmp_path) -> None:
    """``/v1/embeddings`` passed through to a pool: each attempt (the failed one's and the one that
    answers) carries the session's hint in ``affinity_field``."""
    async with replicas(2) as fakes:
        fakes[0].default = error_reply(503)
        fakes[1].default = JSONReply(
            {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [1]}]}
        )
        config = pool_config(tmp_path, [f.base_url for f in fakes], affinity_field="user", failures_before_cooldown=5)
        async with running_proxy(config) as proxy:
            client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-test-client", max_retries=0)
            answers = [
                await client.embeddings.with_raw_response.create(
                    model=MODEL, input="x", extra_headers={"session_id": f"s-{n}"}
                )
                for n in range(3)
            ]
            await client.close()
    assert [a.headers["x-crossfeed-replica"] for a in answers] == ["gpu/1"] * 3
    assert len(fakes[0].requests) >= 1  # asked first at least once (the picks take turns), then left
    assert [r.body["user"] for r in fakes[1].requests] == [hint_value(f"session:s-{n}") for n in range(3)]
    assert {r.body["user"] for r in fakes[0].requests} <= {hint_value(f"session:s-{n}") for n in range(3)}
    assert all(r.path == "/v1/embeddings" and r.body["input"] == "x" for f in fakes for r in f.requests)


async def test_a_responses_chain_passed_through_carries_its_roots_hint(tmp_path) -> None:
    """A Responses upstream (one URL) gets each create as the client sent it, plus the hint: the
    chain's first turn has no key; its next turns carry the root's, read from the answers as they
    pass (as a pool reads them). A stored response's GET begins no turn and carries none."""
    async with replicas(1) as (fake,):

        def reply(recorded: Recorded) -> SSEReply:
            return SSEReply(b"".join(answer(["ok"], resp_id=f"resp_n{len(fake.requests)}")))

        fake.default = reply
        config = pool_config(tmp_path, [fake.base_url], api="responses", affinity_header="x-session-id")
        async with running_proxy(config) as proxy:
            client = sdk_client(proxy.base_url, [])  # the fake's stream is passed through as it is
            first, _ = await ask(client, "turn 1")
            second, _ = await ask(client, "turn 2", previous_response_id=first.id)
            third, _ = await ask(client, "turn 3", previous_response_id=second.id)
            await client.close()
            fake.default = JSONReply({"id": third.id, "object": "response"})
            async with aiohttp.ClientSession() as s, s.get(f"{proxy.base_url}/responses/{third.id}") as r:
                assert r.status == 200
    root = hint_value(f"resp:{first.id}")
    assert [r.headers.get("x-session-id") for r in fake.requests] == [None, root, root, None]
    assert [r.body.get("previous_response_id") for r in fake.requests[:3]] == [None, first.id, second.id]
    assert fake.requests[-1].method == "GET"


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("affinity_header", "Authorization", "a header crossfeed or HTTP sets itself"),
        ("affinity_header", "x session", "is not a header name"),
        ("affinity_field", "model", "is part of every call"),
        ("affinity_field", "user-id", "is not a body field name"),
    ],
)
def test_a_hint_that_would_break_a_call_is_refused(tmp_path, key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        pool_config(tmp_path, ["http://127.0.0.1:9/v1"], **{key: value})
    assert key in str(raised.value)
