"""Affinity hints (proxy/state/affinity_hints.py): an upstream's ``affinity_header`` and
``affinity_field`` carry the turn's affinity key, hashed, to a backend or router that routes by
it; on one URL as on a pool, and never the raw key. Validated where the config is loaded."""

from __future__ import annotations

import pytest

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.state.affinity_hints import hint_value
from tests.faults.pool_harness import ask, pool_config, replicas
from tests.support.app_server import running_proxy
from tests.support.clients import sdk_client


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
