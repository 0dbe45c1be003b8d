"""``GET /v1/models``: the usual list for OpenAI clients (``data``) and Codex's catalog
(``models``) in one body (proxy/http/codex_catalog.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from crossfeed.proxy.runtime.config import load_config
from tests.fakes.upstream import FakeUpstream, JSONReply
from tests.support.app_server import running_proxy


@pytest.fixture
async def served(upstream: FakeUpstream, tmp_path: Path) -> Any:
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[codex_models."qwen3-coder"]\ncontext_window = 65536\napply_patch = "function"\n'
        'reasoning_levels = ["low", "high"]\ndefault_reasoning = "high"\n'
    )
    config = load_config(
        toml,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "d"),
            "upstream.context_window": 32768,
        },
    )
    async with running_proxy(config) as handle:
        upstream.default = JSONReply({"object": "list", "data": [{"id": "llama-3-8b", "object": "model"}]})
        yield handle


async def test_openai_clients_see_the_list_and_codex_its_catalog(served: Any) -> None:
    async with openai.AsyncOpenAI(base_url=served.base_url, api_key="k", max_retries=0) as c:
        ids = [m.id async for m in c.models.list()]
    assert ids == ["llama-3-8b"]
    async with aiohttp.ClientSession() as s, s.get(served.base_url + "/models") as r:
        body = await r.json()
    entries = {e["slug"]: e for e in body["models"]}
    assert set(entries) == {"llama-3-8b", "qwen3-coder"}
    listed, configured = entries["llama-3-8b"], entries["qwen3-coder"]
    assert (listed["context_window"], listed["apply_patch_tool_type"]) == (32768, "freeform")  # the upstream's window
    assert (configured["context_window"], configured["apply_patch_tool_type"]) == (65536, "function")
    assert [lv["effort"] for lv in configured["supported_reasoning_levels"]] == ["low", "high"]
    assert configured["default_reasoning_level"] == "high"
    assert configured["model_messages"]["instructions_template"]  # Codex refuses an entry without


def test_a_bad_catalog_key_names_itself(tmp_path: Path) -> None:
    from crossfeed.proxy.errors import ConfigError

    toml = tmp_path / "c.toml"
    toml.write_text('[codex_models."m"]\napply_patch = "sometimes"\n')
    with pytest.raises(ConfigError, match="codex_models"):
        load_config(toml, {}, {})
