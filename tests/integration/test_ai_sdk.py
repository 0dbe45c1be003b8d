"""The Vercel AI SDK (``ai`` 6 with ``@ai-sdk/openai``, its Responses provider), run by Node.js
as an app runs it (tests/integration/node/ai_sdk.mjs), against crossfeed in front of a fake chat
backend: a multi-step tool run, a two-turn conversation replaying the first turn's messages with
the default ``store`` (its ``item_reference`` path), reasoning shown with ``reasoningSummary``,
and ``generateObject``. Reverse: its chat provider in front of a Responses backend, a tool-only
answer opening no empty text part.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import ProxyHandle
from tests.support.chat_replies import ANSWER, REASONING, reasoning_then
from tests.support.services import require_service

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "node" / "ai_sdk.mjs"


@pytest.fixture
def ai_sdk_dir() -> Path:
    found = Path(os.environ.get("CROSSFEED_AI_SDK_DIR") or ROOT / ".tools" / "ai-sdk")
    if shutil.which("node") is None or not (found / "node_modules" / "ai").is_dir():
        require_service("the Vercel AI SDK", "export CROSSFEED_AI_SDK_DIR=$(bash .ci/install-ai-sdk.sh)")
    return found


async def run(proxy: ProxyHandle, ai_sdk_dir: Path, scenario: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        scenario,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "CROSSFEED_BASE_URL": proxy.base_url, "CROSSFEED_AI_SDK_DIR": str(ai_sdk_dir)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert out, err.decode()[-3000:]
    result = orjson.loads(out.splitlines()[-1])
    assert proc.returncode == 0 and "error" not in result, (result, err.decode()[-2000:])
    return result  # type: ignore[no-any-return]


def text(answer: str) -> SSEReply:
    return reasoning_then(answer)


async def test_multi_step_tool_run(proxy: ProxyHandle, upstream: FakeUpstream, ai_sdk_dir: Path) -> None:
    upstream.reply(reasoning_then(call=("weather", {"city": "Paris"})), text(ANSWER))
    got = await run(proxy, ai_sdk_dir, "tools")
    assert got["calls"] == [["weather", {"city": "Paris"}]] and got["results"] == ["sunny in Paris"]
    assert got["text"].strip() == ANSWER and got["steps"] == 2
    sent = upstream.requests[1].body["messages"]
    assert sent[-1]["role"] == "tool" and "sunny in Paris" in sent[-1]["content"]


async def test_two_turns_replay_the_first_by_reference(
    proxy: ProxyHandle, upstream: FakeUpstream, ai_sdk_dir: Path
) -> None:
    upstream.reply(text("Hello there."), text("Hello again."))
    got = await run(proxy, ai_sdk_dir, "two_turns")
    assert (got["first"].strip(), got["second"].strip()) == ("Hello there.", "Hello again.")
    sent = upstream.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"].strip() == "Hello there."  # the referenced item, resolved from the store


async def test_reasoning_is_shown_with_reasoning_summary(
    proxy: ProxyHandle, upstream: FakeUpstream, ai_sdk_dir: Path
) -> None:
    upstream.reply(text(ANSWER))
    got = await run(proxy, ai_sdk_dir, "reasoning")
    assert got["reasoning"].strip() == REASONING and (got["reasoningText"] or "").strip() == REASONING
    assert got["text"].strip() == ANSWER
    assert upstream.requests[0].body["reasoning_effort"] == "medium"


async def test_generate_object(proxy: ProxyHandle, upstream: FakeUpstream, ai_sdk_dir: Path) -> None:
    from tests.fakes.upstream import JSONReply

    upstream.reply(
        JSONReply(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": '{"city": "Paris", "sunny": true}'},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
            }
        )
    )
    got = await run(proxy, ai_sdk_dir, "object")
    assert got["object"] == {"city": "Paris", "sunny": True}
    fmt = upstream.requests[0].body["response_format"]
    assert fmt["type"] == "json_schema" and set(fmt["json_schema"]["schema"]["properties"]) == {"city", "sunny"}


@pytest.mark.parametrize("proxy_overrides", [{"upstream.api": "responses"}])
async def test_reverse_tool_only_answer_opens_no_text_part(
    proxy: ProxyHandle, upstream: FakeUpstream, ai_sdk_dir: Path
) -> None:
    """The chat provider on a Responses backend: the tool-only step's stream starts with
    ``content: null`` (as OpenAI's chat stream of a tool call), so the AI SDK opens no text part
    for it; the text step after the tool result opens one."""
    from tests.support.captures import read_capture

    upstream.reply(
        SSEReply(read_capture("responses/openai-gpt4o-function-call-no-seq.sse"), max_piece=29),
        SSEReply(read_capture("responses/openai-gpt4o-text-no-seq.sse"), max_piece=29),
    )
    got = await run(proxy, ai_sdk_dir, "chat_tools")
    types = [p[0] for p in got["parts"]]
    first_step = types[: types.index("finish-step") + 1]
    assert "tool-call" in first_step and not any(t.startswith("text-") for t in first_step), got["parts"]
    assert types.count("text-start") == 1
    assert "" not in [p[1] for p in got["parts"] if p[0] == "text-delta"]
    assert got["text"] == "The capital of France is Paris."
    assert [r.path for r in upstream.requests] == ["/v1/responses", "/v1/responses"]
    assert upstream.requests[1].body["input"][-1]["type"] == "function_call_output"
