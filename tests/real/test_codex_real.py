"""The real Codex CLI -> crossfeed -> the real llama-server, in both of Codex's configurations
(a provider block over HTTP, and only ``openai_base_url``: WebSocket mode).

The tiny model answers "hello" prompts in text and otherwise runs ``echo crossfeed-$((6*7))``
through Codex's ``exec_command`` tool, then answers once the output is back: the whole tool
round trip goes through llama-server's Qwen3-Coder parser, its chat template and crossfeed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e import codex_support as cx
from tests.fakes.tiny_model import AFTER_TOOL_ANSWER, TEXT_ANSWER
from tests.real.backends import proxy_for
from tests.support.app_server import ProxyHandle

pytestmark = [pytest.mark.codex, pytest.mark.timeout(400)]


codex_bin = pytest.fixture(autouse=True)(cx.codex_binary_or_skip)


@pytest.fixture(params=["provider", "openai_base_url"])
def setup(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def proxy(llama_server_url: str, tmp_path: Path) -> AsyncIterator[ProxyHandle]:
    handle = await proxy_for(llama_server_url, tmp_path)
    yield handle
    await handle.stop()


async def run_codex(proxy: ProxyHandle, tmp_path: Path, prompt: str, setup: str) -> tuple[object, list[dict]]:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(exist_ok=True)
    write = cx.write_codex_home if setup == "provider" else cx.write_codex_home_builtin
    env = write(home, base_url=proxy.base_url, model=cx.FALLBACK_MODEL)
    proc = await asyncio.to_thread(cx.run_codex_exec, prompt, cwd=work, env=env, timeout=300)
    return proc, cx.parse_events(proc.stdout)


async def test_codex_plain_answer(proxy: ProxyHandle, tmp_path: Path, setup: str) -> None:
    proc, events = await run_codex(proxy, tmp_path, "say hello", setup)
    assert proc.returncode == 0, proc.stderr[-3000:]  # type: ignore[attr-defined]
    assert cx.agent_messages(events)[-1] == TEXT_ANSWER


async def test_codex_runs_a_shell_command(proxy: ProxyHandle, tmp_path: Path, setup: str) -> None:
    proc, events = await run_codex(proxy, tmp_path, "run the command", setup)
    assert proc.returncode == 0, proc.stderr[-3000:]  # type: ignore[attr-defined]
    runs = cx.command_executions(events)
    assert any("crossfeed-42" in c.get("aggregated_output", "") for c in runs), runs
    assert cx.agent_messages(events)[-1] == AFTER_TOOL_ANSWER
