"""The inspector's page in a real headless Chromium (Debian's ``chromium``, driven by Playwright from
PyPI; ``.ci/run`` installs the browser and sets ``CROSSFEED_CHROMIUM``).

The page is opened, a wrong key is refused and shows nothing; with the admin key it lists a
streamed tool call (the official SDK), a WebSocket turn, a web-search turn and a turn on a backend
with a quirk, grouped by session; a turn shows the backend's chunks beside the events and the quirk
marker; a slow stream appears and grows while it runs; "Save as test case" downloads a file that
``crossfeed translate --case --check`` replays to the same events. ``CROSSFEED_UPDATE_SCREENSHOTS=1``
writes the screenshots to docs/ (they are taken in every run, into the test's directory).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import running_proxy
from tests.support.inspector_turns import (
    ADMIN_KEY,
    ENVIRON,
    PAGES,
    quirk_turn,
    replay_case,
    search_turn,
    settings,
    slow_turn,
    streamed_tool_call,
    websocket_turn,
)
from tests.support.paths import ROOT
from tests.support.services import require_service

pytestmark = pytest.mark.timeout(120)
WAIT = 20_000  # ms: the hang guard of each wait in the page; what is awaited takes milliseconds
FLAGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = os.environ.get("CROSSFEED_CHROMIUM") or shutil.which("chromium")
    if not found:
        require_service("chromium", "export CROSSFEED_CHROMIUM=$(bash .ci/install-chromium.sh)")
    assert found
    return found


@pytest.fixture
async def search() -> AsyncIterator[FakeSearch]:
    fake = FakeSearch(pages=dict(PAGES))
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    path = chromium()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        context = await browser.new_context(accept_downloads=True, viewport={"width": 1500, "height": 950})
        try:
            yield await context.new_page()
        finally:
            await context.close()
            await browser.close()


def keep_screenshot(shot: Path, name: str) -> None:
    if os.environ.get("CROSSFEED_UPDATE_SCREENSHOTS"):
        shutil.copyfile(shot, ROOT / "docs" / name)


async def test_inspector_page_in_chromium(
    page: Any, upstream: FakeUpstream, search: FakeSearch, tmp_path: Path
) -> None:
    async with running_proxy(settings(upstream, search), environ=ENVIRON) as handle:
        await page.goto(handle.url + "/inspector")
        # a wrong key: refused, nothing listed
        await page.fill("#key", "not-the-key")
        await page.click("#connect")
        await page.wait_for_function("document.getElementById('status').textContent.includes('401')", timeout=WAIT)
        assert await page.locator(".turn").count() == 0

        await page.fill("#key", ADMIN_KEY)
        await page.click("#connect")
        await page.wait_for_function("document.getElementById('status').textContent === 'live'", timeout=WAIT)

        first = await streamed_tool_call(upstream, handle.base_url)
        await quirk_turn(upstream, handle.base_url, previous=first)
        await websocket_turn(upstream, handle.url)
        await search_turn(upstream, handle.base_url)
        await page.wait_for_function("document.querySelectorAll('.turn[data-ending=ok]').length === 4", timeout=WAIT)
        # the tool call and the turn that continues it share their session
        chain = page.locator(f'details.session[data-session="chain {first}"] .turn')
        assert await chain.count() == 2

        # the quirk turn: chunks beside events, the repair marked, both requests
        await chain.nth(0).click()  # newest first: the continuation
        await page.wait_for_selector(".row-quirk", timeout=WAIT)
        assert "legacy_function_call_dropped" in await page.locator(".row-quirk").first.inner_text()
        assert await page.locator(".row-chunk td.chunk").count() >= 1
        assert await page.locator(".row-event td.event").count() >= 1
        assert "messages" in await page.locator(".upstream-body").inner_text()
        assert "previous_response_id" in await page.locator("table.changes").inner_text()
        shot = tmp_path / "inspector.png"
        await page.screenshot(path=str(shot), full_page=False)
        keep_screenshot(shot, "inspector.png")

        # the WebSocket turn: decoded frames
        await page.locator(".turn", has_text="websocket").first.click()
        await page.wait_for_function(
            "document.querySelector('h2') && document.querySelector('h2').textContent.startsWith('websocket')",
            timeout=WAIT,
        )
        assert '"type":"response.completed"' in await page.locator("#stream").inner_text()

        # the web-search turn: two backend calls
        searched = page.locator(".turn").filter(has_text="http").first
        await searched.click()
        await page.wait_for_function("document.querySelectorAll('.legs li').length === 2", timeout=WAIT)
        assert "web_search_call" in await page.locator("#stream").inner_text()
        assert "hosted tool ran: web_search" in await page.locator(".row-tool").first.inner_text()

        # live: a slow stream appears, and its chunks show while the backend holds the rest
        hold = asyncio.Event()
        turn = asyncio.create_task(slow_turn(upstream, handle.base_url, hold))
        try:
            await page.wait_for_selector(".turn[data-ending=streaming]", timeout=WAIT)
            await page.locator(".turn[data-ending=streaming]").click()
            await page.wait_for_selector(".row-chunk", timeout=WAIT)
            before = await page.locator(".row-chunk").count()
            assert not turn.done()
            shot = tmp_path / "inspector-live.png"
            await page.screenshot(path=str(shot))
            keep_screenshot(shot, "inspector-live.png")
            hold.set()
            await asyncio.wait_for(turn, 30)
            await page.wait_for_selector(".turn.selected[data-ending=ok]", timeout=WAIT)
            await page.wait_for_function(f"document.querySelectorAll('.row-chunk').length > {before}", timeout=WAIT)
        finally:
            hold.set()

        # save as test case: the download replays to the same events
        await page.locator(f'details.session[data-session="chain {first}"] .turn').nth(1).click()
        await page.wait_for_function(
            "document.querySelector('#stream') && document.querySelector('#stream').textContent.includes('function_call_arguments')",
            timeout=WAIT,
        )
        async with page.expect_download(timeout=WAIT) as info:
            await page.click("#save-case")
        download = await info.value
        assert download.suggested_filename.startswith("crossfeed-case-")
        case = tmp_path / download.suggested_filename
        await download.save_as(str(case))
    done = replay_case(case)
    assert done.returncode == 0, done.stderr
    assert "the replay matches the" in done.stderr
