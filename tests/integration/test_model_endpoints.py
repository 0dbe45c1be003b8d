"""The rest of an OpenAI-compatible backend's API through crossfeed (issue 35): ``/v1/embeddings``,
``/v1/completions`` and the others of ``PASSED_BY_MODEL`` go to the upstream the body's model
routes to, unchanged but for the model's rename, and come back as the backend answered (a streamed
legacy completion unbuffered); the official SDK is the client. An unknown model is a 404 naming
it; a backend's error keeps its status and message; a client key is required as everywhere."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest

from crossfeed.proxy.runtime.config import load_config
from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.app_server import ProxyHandle, running_proxy

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def second() -> AsyncIterator[FakeUpstream]:
    up = FakeUpstream()
    await up.start()
    yield up
    await up.close()


@pytest.fixture
async def two(upstream: FakeUpstream, second: FakeUpstream, tmp_path: Path) -> AsyncIterator[ProxyHandle]:
    path = tmp_path / "crossfeed.toml"
    path.write_text(
        f"""[server]
inbound_keys_env = "CF_ME_KEYS"

[[upstreams]]
name = "chat"
base_url = "{upstream.base_url}"
models = ["qwen3", "bge-*"]
model_map = {{ "bge-m3" = "BAAI/bge-m3" }}

[[upstreams]]
name = "other"
base_url = "{second.base_url}"
api = "responses"
models = ["gpt-*"]

[store]
backend = "memory"
"""
    )
    async with running_proxy(load_config(path, {}), environ={"CF_ME_KEYS": "sk-me"}) as handle:
        yield handle


def embedding(model: str) -> JSONReply:
    return JSONReply(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1.0]}],
            "model": model,
            "usage": {"prompt_tokens": 2, "total_tokens": 2},
        }
    )


async def test_embeddings_route_by_model_and_rename_it(
    upstream: FakeUpstream, second: FakeUpstream, two: ProxyHandle
) -> None:
    client = openai.AsyncOpenAI(base_url=two.base_url, api_key="sk-me", max_retries=0)
    upstream.reply(embedding("BAAI/bge-m3"))
    second.reply(embedding("gpt-embed"))
    got = await client.embeddings.create(model="bge-m3", input="hello", encoding_format="float")
    assert got.data[0].embedding == [0.25, -0.5, 1.0]
    assert upstream.requests[-1].path == "/v1/embeddings"
    assert upstream.requests[-1].body == {"model": "BAAI/bge-m3", "input": "hello", "encoding_format": "float"}
    assert upstream.requests[-1].headers.get("Authorization") != "Bearer sk-me"  # the client's key stays here
    other = await client.embeddings.create(model="gpt-embed", input=["a", "b"], encoding_format="float")
    assert other.model == "gpt-embed" and second.requests[-1].path == "/v1/embeddings"


async def test_streamed_legacy_completion_passes_unbuffered(upstream: FakeUpstream, two: ProxyHandle) -> None:
    frames = b"".join(
        b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"qwen3","choices":[{"text":"%s","index":0,"logprobs":null,"finish_reason":%s}]}\n\n'
        % (piece.encode(), b"null" if i < 2 else b'"stop"')
        for i, piece in enumerate(["Once", " upon", " a time"])
    )
    upstream.reply(SSEReply(frames + b"data: [DONE]\n\n", max_piece=11))
    client = openai.AsyncOpenAI(base_url=two.base_url, api_key="sk-me", max_retries=0)
    stream = await client.completions.create(model="qwen3", prompt="Tell me", stream=True, max_tokens=5)
    text = "".join([c.choices[0].text async for c in stream])
    assert text == "Once upon a time"
    assert upstream.requests[-1].path == "/v1/completions" and upstream.requests[-1].body["prompt"] == "Tell me"


async def test_errors_keep_their_status_and_unknown_models_are_named(upstream: FakeUpstream, two: ProxyHandle) -> None:
    client = openai.AsyncOpenAI(base_url=two.base_url, api_key="sk-me", max_retries=0)
    upstream.reply(
        JSONReply({"error": {"message": "input too long for bge", "type": "invalid_request_error"}}, status=400)
    )
    with pytest.raises(openai.BadRequestError) as bad:
        await client.embeddings.create(model="bge-m3", input="x" * 10)
    assert "input too long for bge" in str(bad.value)
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.embeddings.create(model="nomic-embed", input="x")
    assert unknown.value.body["code"] == "model_not_found"  # type: ignore[index]
    async with (
        aiohttp.ClientSession() as s,
        s.post(two.base_url + "/embeddings", json={"model": "bge-m3", "input": "x"}) as r,
    ):
        assert r.status == 401
    for path in ("/rerank", "/moderations"):
        upstream.reply(JSONReply({"ok": path}))
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                two.base_url + path, json={"model": "qwen3", "query": "q"}, headers={"Authorization": "Bearer sk-me"}
            ) as r,
        ):
            assert r.status == 200 and (await r.json()) == {"ok": path}
        assert upstream.requests[-1].path == "/v1" + path
