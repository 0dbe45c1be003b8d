"""The real Codex CLI through crossfeed, in front of a fake chat-only backend that streams.

Codex (pinned in .ci/install-codex.sh) runs non-interactively (``codex exec``) with a throwaway
CODEX_HOME whose provider points at crossfeed (``wire_api = "responses"``); everything it could
reach outside is switched off (tests/e2e/codex_support.py). The fake backend plays the model:
replies are scripted, and the ones after a tool call are computed from the tool output crossfeed
delivered, so a passing test proves the whole round trip.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.conftest import require_service
from tests.e2e import codex_support as cx
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def codex_bin() -> Path:
    exe = cx.codex_binary()
    if exe is None:
        require_service("codex", "export CROSSFEED_CODEX_BIN=$(bash .ci/install-codex.sh)")
    return exe  # type: ignore[return-value]


def chunk(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + b"\n\n"


USAGE = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],' \
        b'"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}\n\n'
DONE = b"data: [DONE]\n\n"


def text(answer: str, reasoning: str = "") -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    if reasoning:
        body += chunk({"reasoning_content": reasoning})
    words = answer.split(" ")
    for i, w in enumerate(words):
        body += chunk({"content": w + (" " if i < len(words) - 1 else "")})
    return SSEReply(body + chunk({}, "stop") + USAGE + DONE, max_piece=23)


def calls(*specs: tuple[str, str, dict], reasoning: str = "") -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    if reasoning:
        for piece in reasoning.split(" "):
            body += chunk({"reasoning_content": piece + " "})
    for index, (call_id, name, args) in enumerate(specs):
        raw = orjson.dumps(args).decode()
        body += chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": raw[:7]}}]})
        for k in range(7, len(raw), 9):
            body += chunk({"tool_calls": [{"index": index, "function": {"arguments": raw[k:k + 9]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + USAGE + DONE, max_piece=31)


def tool_outputs(req: Recorded) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in req.body["messages"] if m.get("role") == "tool"}


async def run_codex(proxy, tmp_path: Path, prompt: str, *, model: str = cx.FALLBACK_MODEL):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = cx.write_codex_home(home, base_url=proxy.base_url, model=model)
    proc = await asyncio.to_thread(cx.run_codex_exec, prompt, cwd=work, env=env, timeout=180)
    return proc, cx.parse_events(proc.stdout), work


async def test_plain_answer(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(text("Hello from a chat-only backend.", reasoning="The user greets me."))
    proc, events, _ = await run_codex(proxy, tmp_path, "say hi")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Hello from a chat-only backend."
    sent = upstream.requests[0].body
    assert sent["stream"] is True and sent["messages"][0]["role"] == "system"
    assert all(m["role"] != "developer" for m in sent["messages"])


async def test_shell_command_and_answer_using_its_output(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(calls(("call_sh", "exec_command", {"cmd": "echo crossfeed-$((6*7))"})),
                   lambda req: text(f"The command printed {tool_outputs(req)['call_sh'].split('crossfeed-')[1][:2]}."))
    proc, events, _ = await run_codex(proxy, tmp_path, "run the command")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any("crossfeed-42" in c.get("aggregated_output", "") for c in cx.command_executions(events))
    assert cx.agent_messages(events)[-1] == "The command printed 42."


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


async def test_apply_patch_through_the_custom_tool(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello world\n")
    patch = ("*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello world\n+hello \"crossfeed\" \u00e9\n"
             "*** Add File: new.txt\n+created through a chat backend\n*** End Patch\n")
    upstream.reply(calls(("call_p", "apply_patch", {"input": patch})), text("Patched."))
    proc, events, _ = await run_codex(proxy, tmp_path, "edit hello.txt", model=cx.APPLY_PATCH_MODEL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / "hello.txt").read_text() == "hello \"crossfeed\" \u00e9\n"
    assert (work / "new.txt").read_text() == "created through a chat backend\n"
    tool = next(t for t in upstream.requests[0].body["tools"] if t["function"]["name"] == "apply_patch")
    assert tool["function"]["parameters"]["required"] == ["input"]
    assert "Begin Patch" in tool["function"]["description"]  # the grammar travels in the description
    assert tool_outputs(upstream.requests[1])["call_p"]


async def test_upstream_error_is_shown(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    upstream.reply(JSONReply({"error": {"message": "context too long for model qwen-test", "type": "invalid_request_error",
                                        "param": "messages", "code": None}}, status=400))
    proc, events, _ = await run_codex(proxy, tmp_path, "hello")
    assert proc.returncode != 0
    assert any("context too long for model qwen-test" in m for m in cx.error_messages(proc))
