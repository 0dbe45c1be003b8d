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

import openai
import pytest

from tests.fakes import llama_servers as ls
from tests.fakes.tiny_model import write_model
from tests.real.backends import Direct, proxy_for
from tests.support.app_server import ProxyHandle
from tests.support.clients import Captured, sdk_client
from tests.support.services import require_service

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
