"""Golden transcripts of hosted web search: whole Responses through crossfeed, over real sockets.

For each case under ``cases/web_search/`` (its README says what each shows) crossfeed runs with
stable ids and clock in front of the fake chat backend (one scripted stream per leg) and a fake
SearXNG, and the client's SSE body is parsed, checked by the strict validator and compared with
``expected.jsonl``. The backend's streams are written in pieces of random size (seeded), from one
byte to whole frames: every split gives the same events. ``CROSSFEED_UPDATE_GOLDEN=1`` rewrites
the expected files for review.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from crossfeed.translators.ids import SequentialIds
from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy
from tests.support.golden import check_expected
from tests.support.validators import validate_responses_sse

pytestmark = pytest.mark.timeout(120)

CASES = Path(__file__).parent / "cases" / "web_search"
SPLITS = [(0, 1), (1, 7), (2, 23), (3, 97), (4, 4096)]  # (seed, largest piece)


async def run(case: Path, seed: int, piece: int, tmp: Path) -> tuple[list[dict[str, Any]], FakeUpstream]:
    spec = orjson.loads((case / "search.json").read_bytes())
    search = FakeSearch(
        pages={q: [tuple(p) for p in pages] for q, pages in spec.get("pages", {}).items()}, fail=spec.get("fail")
    )
    upstream = FakeUpstream()
    await search.start()
    await upstream.start()
    legs = sorted(case.glob("upstream_*.sse"))
    upstream.reply(*(SSEReply(p.read_bytes(), seed=seed, max_piece=piece) for p in legs))
    overrides = {
        "upstream.base_url": upstream.base_url,
        "store.data_dir": str(tmp),
        "web_search.backend": "searxng",
        "web_search.url": search.url,
        "web_search.timeout_seconds": 2,
    }
    if (case / "config.json").exists():
        overrides.update(orjson.loads((case / "config.json").read_bytes()))
    try:
        async with running_proxy(overrides, ids=SequentialIds(), clock=lambda: 1_700_000_000) as proxy:
            async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=60) as http:
                r = await http.post(
                    "/responses",
                    content=(case / "request.json").read_bytes(),
                    headers={"Content-Type": "application/json"},
                )
            assert r.status_code == 200, r.text
            events = validate_responses_sse(r.content)
    finally:
        await upstream.close()
        await search.close()
    return events, upstream


def cases() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", cases(), ids=lambda p: p.name)
async def test_golden_web_search(case: Path, tmp_path: Path) -> None:
    whole, upstream = await run(case, *SPLITS[-1], tmp_path / "whole")
    assert len(upstream.requests) == len(list(case.glob("upstream_*.sse")))  # every leg was asked for
    expected_file = case / "expected.jsonl"
    check_expected(expected_file, whole)
    for seed, piece in SPLITS[:-1]:
        split, _ = await run(case, seed, piece, tmp_path / f"split{seed}")
        assert split == whole, f"split seed {seed}, pieces up to {piece} bytes"


def test_the_cases_show_what_they_claim() -> None:
    """Independent of the expected files (the code's own output, reviewed once)."""

    def load(name: str) -> list[dict[str, Any]]:
        return [orjson.loads(x) for x in (CASES / name / "expected.jsonl").read_bytes().splitlines() if x.strip()]

    final = load("one_search")[-1]["response"]
    assert final["status"] == "completed"
    assert [(o["type"], o.get("status")) for o in final["output"]] == [
        ("reasoning", "completed"),
        ("web_search_call", "completed"),
        ("message", "completed"),
    ]
    text = final["output"][2]["content"][0]
    cited = [text["text"][a["start_index"] : a["end_index"]] for a in text["annotations"]]
    assert cited[0].startswith("[announcement](https://blog.rust-lang.org") and cited[1].startswith("https://github")
    two = load("two_parallel_searches")[-1]["response"]
    assert [o["action"]["query"] for o in two["output"][:2]] == ["rust 1.80 release", "LazyCell"]
    assert all(o["action"]["sources"] for o in two["output"][:2])
    assert [a["url"] for a in two["output"][2]["content"][0]["annotations"]] == [
        "https://doc.rust-lang.org/std/cell/struct.LazyCell.html",
        "https://blog.rust-lang.org/2024/07/25/Rust-1.80.0.html",
    ]
    failed = load("failed_search")
    assert "response.web_search_call.completed" not in [e["type"] for e in failed]
    assert failed[-1]["response"]["output"][0]["status"] == "failed" and failed[-1]["type"] == "response.completed"
    bound = load("bound_fires")[-1]
    assert bound["type"] == "response.incomplete"
    assert bound["response"]["incomplete_details"] == {"reason": "max_messages"}
