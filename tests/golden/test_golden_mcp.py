"""Golden transcripts of remote MCP tools: whole Responses through crossfeed, over real sockets,
with the real test MCP server (the ``mcp`` package's MCPServer, the session's ``mcp_urls``).

As for web search (test_golden_web_search.py): stable ids and clock, one scripted backend stream
per leg written in pieces of random size, the strict validator on every body, the events equal
to ``expected.jsonl`` for every split. ``CROSSFEED_UPDATE_GOLDEN=1`` rewrites the expected files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from crossfeed.proxy.runtime.config import load_config
from crossfeed.translators.ids import SequentialIds
from tests.fakes.mcp_server import TEST_TOKEN
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy
from tests.support.golden import check_expected
from tests.support.validators import validate_responses_sse

pytestmark = pytest.mark.timeout(120)

CASES = Path(__file__).parent / "cases" / "mcp"
SPLITS = [(0, 1), (1, 9), (2, 61), (3, 4096)]


async def run(case: Path, url: str, seed: int, piece: int, tmp: Path) -> list[dict[str, Any]]:
    upstream = FakeUpstream()
    await upstream.start()
    upstream.reply(*(SSEReply(p.read_bytes(), seed=seed, max_piece=piece) for p in sorted(case.glob("upstream_*.sse"))))
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp),
            "mcp.allowed_servers": ["http://127.0.0.1:*"],
            "mcp.call_timeout_seconds": 5,
        },
    )
    try:
        async with running_proxy(config, ids=SequentialIds(), clock=lambda: 1_700_000_000) as proxy:
            body = (case / "request.json").read_text().replace("{MCP_URL}", url).replace("{TOKEN}", TEST_TOKEN)
            async with httpx2.AsyncClient(base_url=proxy.base_url, timeout=60) as http:
                r = await http.post("/responses", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            events = validate_responses_sse(r.content)
    finally:
        await upstream.close()
    return events


@pytest.mark.parametrize("case", sorted(p for p in CASES.iterdir() if p.is_dir()), ids=lambda p: p.name)
async def test_golden_mcp(case: Path, mcp_urls: dict[str, str], tmp_path: Path) -> None:
    whole = await run(case, mcp_urls["http"], *SPLITS[-1], tmp_path / "whole")
    for event in whole:  # the server's address differs per run: the expected files hold a placeholder
        event_text = orjson.dumps(event).decode().replace(mcp_urls["http"], "{MCP_URL}")
        event.clear()
        event.update(orjson.loads(event_text))
    expected_file = case / "expected.jsonl"
    check_expected(expected_file, whole)
    assert TEST_TOKEN not in expected_file.read_text()
    for seed, piece in SPLITS[:-1]:
        split = await run(case, mcp_urls["http"], seed, piece, tmp_path / f"split{seed}")
        text = orjson.dumps(split).decode().replace(mcp_urls["http"], "{MCP_URL}")
        assert orjson.loads(text) == whole, f"split seed {seed}, pieces up to {piece} bytes"


def test_the_cases_show_what_they_claim() -> None:
    def final(name: str) -> dict[str, Any]:
        lines = (CASES / name / "expected.jsonl").read_bytes().splitlines()
        return orjson.loads(lines[-1])["response"]  # type: ignore[no-any-return]

    one = final("one_call")
    assert [o["type"] for o in one["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert [t["name"] for t in one["output"][0]["tools"]] == ["add", "echo", "fail"]
    assert one["output"][1]["output"] == "42" and one["status"] == "completed"
    two = final("two_calls_one_fails")
    assert [(o["name"], o["status"]) for o in two["output"] if o["type"] == "mcp_call"] == [
        ("echo", "completed"),
        ("fail", "failed"),
    ]
    asked = final("approval_request")
    assert [o["type"] for o in asked["output"]] == ["mcp_list_tools", "mcp_approval_request"]
