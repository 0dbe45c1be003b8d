"""The search client against fake services (proxy/turns/hosted/search_backends.py): results cleaned and
capped for each backend, faults as one readable line, the results text, and the [web_search]
configuration failing fast and reported by check-config."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from crossfeed.proxy.runtime.config import WebSearch, load_config
from crossfeed.proxy.turns.hosted.search_backends import MAX_SNIPPET, SearchFailed, results_text, search
from tests.fakes.search import PAGE_A as A
from tests.fakes.search import PAGE_B as B
from tests.fakes.search import FakeSearch


async def _search(fake_search: FakeSearch, backend: str = "searxng", **kw: Any) -> Any:
    path = {"searxng": "", "brave": "/res/v1/web/search", "tavily": "/search"}[backend]
    cfg = WebSearch(
        backend=backend,
        url=fake_search.url + path,
        api_key_env=None if backend == "searxng" else "K",
        timeout_seconds=kw.pop("timeout", 2),
    )
    async with aiohttp.ClientSession() as session:
        return await search(session, cfg, {"K": "key"}, "q", count=kw.pop("count", 5), **kw)


@pytest.mark.parametrize("backend", ["searxng", "brave", "tavily"])
async def test_results_are_cleaned_and_capped(fake_search: FakeSearch, backend: str) -> None:
    results = await _search(fake_search, backend)
    assert [r.url for r in results] == [A, B]  # non-http dropped, duplicates dropped
    assert results[0].title == "A title" and len(results[0].snippet) == MAX_SNIPPET
    assert results[1].title == B  # no title: the URL stands in
    assert [r.url for r in await _search(fake_search, backend, count=1)] == [A]
    assert [r.url for r in await _search(fake_search, backend, domains=("b.example",))] == [B]


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("500", "HTTP 500"),
        ("garbage", "not JSON"),
        ("shape", "unexpected shape"),
        ("huge", "larger than"),
        ("slow", "did not answer within"),
    ],
)
async def test_faults_are_one_readable_line(fake_search: FakeSearch, fault: str, says: str) -> None:
    fake_search.fail = fault
    with pytest.raises(SearchFailed) as info:
        await _search(fake_search, timeout=0.5)
    assert says in info.value.message and "Traceback" not in info.value.message


async def test_unreachable_and_unkeyed() -> None:
    cfg = WebSearch(backend="searxng", url="http://127.0.0.1:9")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(SearchFailed, match="could not be reached"):
            await search(session, cfg, {}, "q", count=3)
        with pytest.raises(SearchFailed, match=r"\$BRAVE, is not set"):
            await search(session, WebSearch(backend="brave", api_key_env="BRAVE"), {}, "q", count=3)


def test_results_text_numbers_run_on() -> None:
    from crossfeed.proxy.turns.hosted.search_backends import Result

    text = results_text("q", [Result(A, "A", "s")], start=4)
    assert text == f'Search results for "q":\n\n[5] A\nURL: {A}\ns'
    assert results_text("q", []) == 'No results for "q".'


def test_config_fails_fast_naming_the_key() -> None:
    from crossfeed.proxy.errors import ConfigError

    with pytest.raises(ConfigError, match=r"web_search \(from \$CROSSFEED_WEB_SEARCH__BACKEND\): .*needs url"):
        load_config(None, {"CROSSFEED_WEB_SEARCH__BACKEND": "searxng"})
    with pytest.raises(ConfigError, match=r"web_search\.backend"):
        load_config(None, {"CROSSFEED_WEB_SEARCH__BACKEND": "google"})
    with pytest.raises(ConfigError, match=r"web_search\.max_results"):
        load_config(None, {"CROSSFEED_WEB_SEARCH__MAX_RESULTS": "0"})


def test_check_config_reports_the_search_backend(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from crossfeed.proxy.cli.check_config import check_config

    f = Path(tmp_path) / "c.toml"
    f.write_text('[web_search]\nbackend = "tavily"\napi_key_env = "TAVILY_KEY"\n')
    assert check_config(f, {}) == 1
    assert "$TAVILY_KEY, which is not set" in capsys.readouterr().err
    f.write_text('[web_search]\nbackend = "searxng"\nurl = "http://127.0.0.1:9"\n')
    assert check_config(f, {}) == 1
    assert "could not be reached" in capsys.readouterr().err
