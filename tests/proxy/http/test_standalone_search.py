"""The standalone search endpoint Codex calls (proxy/http/standalone_search.py): search, open, find and
time over one session's results, and a 404 saying how when no backend is configured."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from crossfeed.proxy.runtime.config import load_config
from tests.fakes.search import PAGE_A as A
from tests.fakes.search import PAGE_B as B
from tests.fakes.search import FakeSearch
from tests.support.app_server import ProxyHandle, running_proxy


@pytest.fixture
async def standalone(fake_search: FakeSearch, tmp_path: Any) -> AsyncIterator[ProxyHandle]:
    config = load_config(
        None, {}, {"store.data_dir": str(tmp_path), "web_search.backend": "searxng", "web_search.url": fake_search.url}
    )
    async with running_proxy(config) as handle:
        yield handle


async def test_standalone_search_open_find_and_time(standalone: ProxyHandle) -> None:
    async with httpx2.AsyncClient(base_url=standalone.base_url, timeout=10) as http:
        first = (
            await http.post(
                "/alpha/search",
                json={"id": "s1", "commands": {"search_query": [{"q": "rust"}], "image_query": [{"q": "x"}]}},
            )
        ).json()["output"]
        assert f"【turn0search0】 A title\n{A}" in first and "turn0search1" in first
        assert "Not available on this server: image_query" in first
        second = (
            await http.post(
                "/alpha/search",
                json={
                    "id": "s1",
                    "commands": {
                        "open": [{"ref_id": "turn0search1"}, {"ref_id": "https://elsewhere.example"}],
                        "find": [
                            {"ref_id": "turn0search0", "pattern": "XXX"},
                            {"ref_id": "turn0search1", "pattern": "zz"},
                        ],
                        "time": [{"utc_offset": "+02:00"}],
                    },
                },
            )
        ).json()["output"]
        assert f"【turn0search1】 {B}\n{B}\nb" in second and "crossfeed does not fetch pages" in second
        assert '"XXX" in 【turn0search0】' in second and '"zz" is not in' in second and "UTC+02:00" in second
        other = await http.post("/alpha/search", json={"id": "s2", "commands": {"open": [{"ref_id": "turn0search0"}]}})
        assert "not a result of this session" in other.json()["output"]
        bad = await http.post("/alpha/search", json={"commands": {"search_query": "rust"}})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "commands.search_query"


async def test_standalone_search_without_a_backend_is_a_404_saying_how(tmp_path: Any) -> None:
    async with running_proxy({"store.data_dir": str(tmp_path)}) as handle:
        async with httpx2.AsyncClient(base_url=handle.base_url, timeout=10) as http:
            r = await http.post("/alpha/search", json={"commands": {"search_query": [{"q": "x"}]}})
    assert r.status_code == 404 and "[web_search] backend" in r.json()["error"]["message"]
