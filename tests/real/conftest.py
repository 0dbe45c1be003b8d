"""Real llama.cpp servers for the whole session, and crossfeed in front of them.

The servers are built by ``.ci/build-llama.sh`` (CI always builds them: their absence fails
there; locally the tests skip with the command to run). The model is written once per session
by tests/fakes/tiny_model.py.

``direct`` is a plain HTTP client to the server itself: the reference every comparison uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from crossfeed.proxy.runtime.config import load_config
from tests.conftest import Captured, require_service, sdk_client
from tests.fakes import llama_servers as ls
from tests.fakes.tiny_model import write_model
from tests.support.app_server import ProxyHandle, start_proxy

SERVERS = ("llama-server", "llama-cpp-python")


@pytest.fixture(scope="session")
def llama_bins() -> ls.Binaries:
    bins = ls.binaries()
    if bins is None:
        require_service("the llama.cpp servers", ls.BUILD_HINT)
    assert bins is not None
    return bins


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("model") / "tiny.gguf")


@pytest.fixture(scope="session")
def llama_server_url(
    llama_bins: ls.Binaries, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with ls.llama_server(llama_bins, tiny_gguf, tmp_path_factory.mktemp("llama-server")) as s:
        yield s.url


@pytest.fixture(scope="session")
def llama_cpp_python_url(
    llama_bins: ls.Binaries, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with ls.llama_cpp_python(llama_bins, tiny_gguf, tmp_path_factory.mktemp("llama-cpp-python")) as s:
        yield s.url


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(name, base URL) of each real server in turn."""
    name = request.param
    url = request.getfixturevalue("llama_server_url" if name == "llama-server" else "llama_cpp_python_url")
    return name, url


class Direct:
    """The server itself, asked the same question: the reference."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as s, s.post(self.base_url + path, json=body) as r:
            return r.status, await r.read()

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        status, raw = await self.post("/chat/completions", {**body, "stream": False})
        assert status == 200, raw[:500]
        return orjson.loads(raw)  # type: ignore[no-any-return]


async def proxy_for(url: str, tmp_path: Path, **overrides: Any) -> ProxyHandle:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": url,
            "store.data_dir": str(tmp_path / "data"),
            "upstream.tokenizer": "estimate",
            **overrides,
        },
    )
    return await start_proxy(config)


@pytest.fixture
def proxy_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
async def proxy(server: tuple[str, str], tmp_path: Path, proxy_overrides: dict[str, Any]) -> AsyncIterator[ProxyHandle]:
    handle = await proxy_for(server[1], tmp_path, **proxy_overrides)
    yield handle
    await handle.stop()


@pytest.fixture
def direct(server: tuple[str, str]) -> Direct:
    return Direct(server[1])


@pytest.fixture
async def client(proxy: ProxyHandle, captured: list[Captured]) -> AsyncIterator[openai.AsyncOpenAI]:
    c = sdk_client(proxy.base_url, captured, timeout=120)
    yield c
    await c.close()
