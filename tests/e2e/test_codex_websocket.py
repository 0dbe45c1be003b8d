"""The real Codex CLI with only ``openai_base_url`` set: its built-in provider, WebSocket mode.

This is the drop-in setup most users have (no ``[model_providers]`` block). Codex opens
``GET /v1/responses`` as a WebSocket, primes it with a ``generate: false`` frame, then sends each
request of the turn as a ``response.create`` frame on the same socket, chained with
``previous_response_id`` (docs/codex.md). The scenarios are those of test_codex.py; each must
run over the socket from start to end: no "Reconnecting" line, no "Falling back" line, and no
``POST /v1/responses`` at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from proxy.observability import METRICS
from proxy.websocket import ROUTE
from tests.e2e import codex_support as cx
from tests.e2e.test_codex import calls, codex_bin, text, tool_outputs  # noqa: F401 (codex_bin: fixture)
from tests.fakes.upstream import FakeUpstream, JSONReply

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]


def requests_on(proxy, route: str) -> int:
    """Requests (WebSocket turns, for the WebSocket route) the proxy counted on ``route``."""
    total = 0.0
    for metric in proxy.app[METRICS].registry.collect():
        if metric.name == "crossfeed_requests":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total") and s.labels["route"] == route)
    return int(total)


async def run_codex(proxy, tmp_path: Path, prompt: str, *, model: str = cx.FALLBACK_MODEL):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = cx.write_codex_home_builtin(home, base_url=proxy.base_url, model=model)
    proc = await asyncio.to_thread(cx.run_codex_exec, prompt, cwd=work, env=env, timeout=180)
    return proc, cx.parse_events(proc.stdout), work


def assert_websocket_only(proxy, proc, upstream_calls: int) -> None:
    out = proc.stdout + proc.stderr
    assert "Reconnecting" not in out and "Falling back" not in out, out[-3000:]
    assert requests_on(proxy, "/v1/responses") == 0  # no HTTP fallback
    # every backend call was a WebSocket turn, plus Codex's generate:false prewarm
    assert requests_on(proxy, ROUTE) == upstream_calls + 1


async def test_plain_answer(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(text("Hello over a WebSocket.", reasoning="The user greets me."))
    proc, events, _ = await run_codex(proxy, tmp_path, "say hi")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Hello over a WebSocket."
    sent = upstream.requests[0].body
    assert sent["stream"] is True and sent["messages"][0]["role"] == "system"
    assert "generate" not in sent
    assert [m["role"] for m in sent["messages"]].count("user") >= 1  # the prewarm's input carried on
    assert_websocket_only(proxy, proc, 1)


async def test_shell_command_and_answer_using_its_output(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(calls(("call_sh", "exec_command", {"cmd": "echo crossfeed-$((6*7))"})),
                   lambda req: text(f"The command printed {tool_outputs(req)['call_sh'].split('crossfeed-')[1][:2]}."))
    proc, events, _ = await run_codex(proxy, tmp_path, "run the command")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any("crossfeed-42" in c.get("aggregated_output", "") for c in cx.command_executions(events))
    assert cx.agent_messages(events)[-1] == "The command printed 42."
    # the second turn came as previous_response_id + the call's output: the connection's memory
    # gave the backend the whole conversation (system prompt, user message, the call, its output)
    second = upstream.requests[1].body["messages"]
    assert second[0]["role"] == "system" and any(m.get("tool_calls") for m in second)
    assert_websocket_only(proxy, proc, 2)


async def test_reasoning_then_tool_call_is_replayed(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(calls(("call_r", "exec_command", {"cmd": "echo ok"}), reasoning="I should run echo first."),
                   text("Done."))
    proc, events, _ = await run_codex(proxy, tmp_path, "think, then run echo")
    assert proc.returncode == 0, proc.stderr[-2000:]
    second = upstream.requests[1].body["messages"]
    assistant = next(m for m in second if m.get("tool_calls"))
    assert assistant["reasoning_content"].strip() == "I should run echo first."
    assert assistant["tool_calls"][0]["id"] == "call_r"
    assert tool_outputs(upstream.requests[1])["call_r"]
    assert_websocket_only(proxy, proc, 2)


async def test_two_parallel_tool_calls(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(calls(("call_a", "exec_command", {"cmd": "echo alpha"}),
                         ("call_b", "exec_command", {"cmd": "echo beta"})),
                   lambda req: text("Got " + " and ".join(
                       "alpha" if "alpha" in out else "beta" for out in tool_outputs(req).values()) + "."))
    proc, events, _ = await run_codex(proxy, tmp_path, "run both")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Got alpha and beta."
    second = upstream.requests[1].body["messages"]
    assistant = next(m for m in second if m.get("tool_calls"))
    assert [tc["id"] for tc in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert_websocket_only(proxy, proc, 2)


async def test_apply_patch_through_the_custom_tool(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello world\n")
    patch = ("*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello world\n+hello over a socket\n"
             "*** Add File: new.txt\n+created through a WebSocket turn\n*** End Patch\n")
    upstream.reply(calls(("call_p", "apply_patch", {"input": patch})), text("Patched."))
    proc, events, _ = await run_codex(proxy, tmp_path, "edit hello.txt", model=cx.APPLY_PATCH_MODEL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / "hello.txt").read_text() == "hello over a socket\n"
    assert (work / "new.txt").read_text() == "created through a WebSocket turn\n"
    assert tool_outputs(upstream.requests[1])["call_p"]
    assert_websocket_only(proxy, proc, 2)


async def test_upstream_error_is_shown(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(JSONReply({"error": {"message": "context too long for model qwen-test", "type": "invalid_request_error",
                                        "param": "messages", "code": None}}, status=400))
    proc, events, _ = await run_codex(proxy, tmp_path, "hello")
    assert proc.returncode != 0
    assert any("context too long for model qwen-test" in m for m in cx.error_messages(proc))
    assert_websocket_only(proxy, proc, 1)
    assert len(upstream.requests) == 1  # an in-band 400 is not retried


@pytest.mark.parametrize("proxy_overrides", [{"server.websocket": False}])
async def test_websocket_off_falls_back_to_http_at_once(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    """``[server] websocket = false``: the upgrade gets 426 and Codex uses HTTP from the start,
    with no "Reconnecting" lines."""
    assert proxy.config.server.websocket is False
    upstream.reply(text("Hello over HTTP."))
    proc, events, _ = await run_codex(proxy, tmp_path, "say hi")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Hello over HTTP."
    out = proc.stdout + proc.stderr
    assert "Reconnecting" not in out and "Falling back" not in out, out[-3000:]
    assert requests_on(proxy, "/v1/responses") >= 1 and requests_on(proxy, ROUTE) == 0
