"""Web search pieces: citation spans, hidden hosted calls in the forward machine, the search
client against fake services (shapes, caps, faults), replayed items, and the standalone
endpoint Codex calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import pytest

from crossfeed.proxy.runtime.config import WebSearch, load_config
from crossfeed.proxy.turns.hosted.search_backends import MAX_SNIPPET, SearchFailed, results_text, search
from crossfeed.translators.forward.citations import citations
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.web_search_items import replayed, search_function_name
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import ToolContext
from tests.fakes.search import FakeSearch
from tests.support.app_server import ProxyHandle, running_proxy

A, B = "https://a.example/x", "https://b.example/"


def spans(text: str, sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(c["url"], text[c["start_index"] : c["end_index"]]) for c in citations(text, sources)]


def test_citation_spans_cover_exactly_the_citing_text() -> None:
    src = [(A, "A"), (B, "B")]
    assert spans(f"see [the A page]({A}), then {B}.", src) == [(A, f"[the A page]({A})"), (B, B)]
    assert spans("first [2], then [1][1]; not [3] nor [0]", src) == [(B, "[2]"), (A, "[1]"), (A, "[1]")]
    assert spans(f"[x](https://other.example/) and {A}", src) == [(A, A)]
    assert spans(f"{B[:-1]} without the slash, [b]({B[:-1]})", src) == [(B, f"[b]({B[:-1]})")]
    assert citations("nothing here", src) == [] and citations(A, []) == []
    text = f"é{A}"
    (c,) = citations(text, src)
    assert (c["start_index"], c["end_index"]) == (1, 1 + len(A))  # characters, not bytes


def _machine(hosted: frozenset[str]) -> ChatToResponsesStream:
    m = ChatToResponsesStream({"model": "m"}, ids=SequentialIds(), now=lambda: 1, tools=ToolContext(hosted=hosted))
    m.start()
    return m


def _call(i: int, name: str | None, args: str, call_id: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name:
        fn["name"] = name
    tc: dict[str, Any] = {"index": i, "function": fn}
    if call_id:
        tc["id"] = call_id
    return {"choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}


def test_a_call_to_a_hosted_tool_streams_nothing_and_takes_no_index() -> None:
    m = _machine(frozenset({"web_search"}))
    m.feed({"choices": [{"index": 0, "delta": {"content": "Let me look."}}]})
    out = [e for e in m.feed(_call(0, "web_search", '{"que', "c1")) if isinstance(e, dict)]
    assert [e["type"] for e in out] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]  # the message closes; the call shows nothing
    assert m.feed(_call(0, None, 'ry":"x"}')) == []
    added = next(e for e in m.feed(_call(1, "lookup", "{}", "c2")) if isinstance(e, dict))
    assert added["type"] == "response.output_item.added" and added["output_index"] == 1
    m.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    m.end_leg()
    assert m.leg is not None and m.leg.hosted == [{"call_id": "c1", "name": "web_search", "arguments": '{"query":"x"}'}]
    assert [c["name"] for c in m.leg.calls] == ["lookup"]
    assert [o["type"] for o in m.output_since(0)] == ["message", "function_call"]


def test_replayed_web_search_items() -> None:
    call, tool = replayed(
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": A}]},
        },
        "web_search",
        "ws_1",
    )
    assert call == {"id": "ws_1", "type": "function", "function": {"name": "web_search", "arguments": '{"query":"q"}'}}
    assert tool["tool_call_id"] == "ws_1" and f"[1] {A}" in tool["content"]
    assert "failed" in replayed({"status": "failed", "action": {}}, "f", "x")[1]["content"]
    assert "not kept" in replayed({"action": {"query": "q"}}, "f", "x")[1]["content"]
    assert search_function_name([{"type": "function", "name": "web_search"}]) == "crossfeed_web_search"
    assert search_function_name([{"type": "web_search"}]) == "web_search" and search_function_name(None) == "web_search"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSearch]:
    f = FakeSearch(
        pages={
            "*": [
                (A, "  A   title\n", "x" * 5000),
                ("javascript:alert(1)", "bad", ""),
                ("ftp://c.example/", "ftp", ""),
                (B, "", "b"),
                (A, "dup", "dup"),
            ]
        }
    )
    await f.start()
    yield f
    await f.close()


async def _search(fake: FakeSearch, backend: str = "searxng", **kw: Any) -> Any:
    path = {"searxng": "", "brave": "/res/v1/web/search", "tavily": "/search"}[backend]
    cfg = WebSearch(
        backend=backend,
        url=fake.url + path,
        api_key_env=None if backend == "searxng" else "K",
        timeout_seconds=kw.pop("timeout", 2),
    )
    async with aiohttp.ClientSession() as session:
        return await search(session, cfg, {"K": "key"}, "q", count=kw.pop("count", 5), **kw)


@pytest.mark.parametrize("backend", ["searxng", "brave", "tavily"])
async def test_results_are_cleaned_and_capped(fake: FakeSearch, backend: str) -> None:
    results = await _search(fake, backend)
    assert [r.url for r in results] == [A, B]  # non-http dropped, duplicates dropped
    assert results[0].title == "A title" and len(results[0].snippet) == MAX_SNIPPET
    assert results[1].title == B  # no title: the URL stands in
    assert [r.url for r in await _search(fake, backend, count=1)] == [A]
    assert [r.url for r in await _search(fake, backend, domains=("b.example",))] == [B]


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
async def test_faults_are_one_readable_line(fake: FakeSearch, fault: str, says: str) -> None:
    fake.fail = fault
    with pytest.raises(SearchFailed) as info:
        await _search(fake, timeout=0.5)
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


@pytest.fixture
async def standalone(fake: FakeSearch, tmp_path: Any) -> AsyncIterator[ProxyHandle]:
    config = load_config(
        None, {}, {"store.data_dir": str(tmp_path), "web_search.backend": "searxng", "web_search.url": fake.url}
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
