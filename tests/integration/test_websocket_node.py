"""The official Node SDK's Responses WebSocket client (``ResponsesWS`` from
``openai/resources/responses/ws``, npm ``openai`` pinned in .ci/install-node-sdk.sh) against
crossfeed.

A node script (tests/integration/node/responses_ws.cjs) runs a plan of ``response.create`` turns
and prints every raw frame its socket received; each one goes through the ``ws_frames``
validator (tests/support/ws.py) like every other WebSocket frame. This test installs nothing:
without the pinned SDK it is skipped locally and fails in CI (``require_service``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import ProxyHandle
from tests.support.node_sdk import NODE_OPENAI_VERSION
from tests.support.ws import FrameRecorder
from tests.support.ws_replies import TOOLS, plain, text_reply, tool_reply, user

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("node") / "responses_ws.cjs"
GUARD = 60.0  # seconds: hang guard of one node run (node starts in under a second; each turn takes ms)
MODEL = "gpt-4o"


async def run_plan(
    node_sdk: Path, proxy: ProxyHandle, tmp_path: Path, ws_frames: FrameRecorder, turns: list[dict[str, Any]]
) -> dict[str, Any]:
    """Run the node script; its frames go into the recorder (validated at teardown)."""
    plan = tmp_path / "plan.json"
    plan.write_bytes(
        orjson.dumps({"sdk_dir": str(node_sdk), "base_url": proxy.base_url, "api_key": "sk-test-node", "turns": turns})
    )
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        str(plan),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(tmp_path),
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), GUARD)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the node script did not finish within {GUARD:g}s") from None
    assert proc.returncode == 0, f"node exited {proc.returncode}: {stdout[-2000:]!r} {stderr[-2000:]!r}"
    out = orjson.loads(stdout)
    assert out["version"] == NODE_OPENAI_VERSION
    log = ws_frames.log("node")
    if out["binary"]:
        log.add_binary(b"")  # raises: the server sent binary frames
    for frame in out["frames"]:
        log.add(frame)
    # the SDK parsed every frame: one emitted event per text frame, nothing it could not decode
    assert out["events"] == [f["type"] for f in log.frames]
    assert out["close"] is not None and out["close"]["code"] == 1000, out["close"]
    out["log"] = log
    return out


async def test_text_and_store_false_continuation(
    node_sdk: Path, proxy: ProxyHandle, upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("Hi Grace", ", nice to meet you."), text_reply("You are Grace."))
    out = await run_plan(
        node_sdk,
        proxy,
        tmp_path,
        ws_frames,
        [
            {"model": MODEL, "input": "I am Grace.", "store": False},
            {"model": MODEL, "input": "Who am I?", "store": False, "previous_response_id": "$RESPONSE_ID_0"},
        ],
    )
    assert [r.get("status") for r in out["results"]] == ["completed", "completed"]
    assert out["errors"] == []
    responses, _, _ = out["log"].split()
    texts = ["".join(e["delta"] for e in r if e["type"] == "response.output_text.delta") for r in responses]
    assert texts == ["Hi Grace, nice to meet you.", "You are Grace."]
    assert upstream.requests[0].body["messages"] == [user("I am Grace.")]
    assert plain(upstream.requests[1].body["messages"]) == [
        ("user", "I am Grace."),
        ("assistant", "Hi Grace, nice to meet you."),
        ("user", "Who am I?"),
    ]
    assert ws_frames.validate() == (2, 0)


async def test_tool_call_round_trip(
    node_sdk: Path, proxy: ProxyHandle, upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    upstream.reply(tool_reply("call_n1", "get_weather", {"city": "Kyōto"}), text_reply("Rainy in Kyōto."))
    out = await run_plan(
        node_sdk,
        proxy,
        tmp_path,
        ws_frames,
        [
            {"model": MODEL, "input": "Weather in Kyōto?", "tools": TOOLS},
            {
                "model": MODEL,
                "tools": TOOLS,
                "previous_response_id": "$RESPONSE_ID_0",
                "input": [{"type": "function_call_output", "call_id": "call_n1", "output": "rain, 14 C"}],
            },
        ],
    )
    responses, _, _ = out["log"].split()
    calls = [
        e["item"]
        for e in responses[0]
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]
    assert [(c["call_id"], c["name"], orjson.loads(c["arguments"])) for c in calls] == [
        ("call_n1", "get_weather", {"city": "Kyōto"})
    ]
    assert "response.function_call_arguments.delta" in out["events"]
    msgs = upstream.requests[1].body["messages"]
    assert msgs[0] == user("Weather in Kyōto?") and msgs[1]["tool_calls"][0]["id"] == "call_n1"
    assert msgs[2:] == [{"role": "tool", "tool_call_id": "call_n1", "content": "rain, 14 C"}]
    assert ws_frames.validate() == (2, 0)


async def test_error_frames_reach_the_sdk_and_the_socket_stays_usable(
    node_sdk: Path, proxy: ProxyHandle, upstream: FakeUpstream, tmp_path: Path, ws_frames: FrameRecorder
) -> None:
    upstream.reply(text_reply("Fine."))
    out = await run_plan(
        node_sdk,
        proxy,
        tmp_path,
        ws_frames,
        [
            {"model": MODEL, "input": "a", "previous_response_id": "resp_nobody_knows"},
            {"model": MODEL, "input": "b", "stream": False},
            {"model": MODEL, "input": "c", "generate": False, "instructions": "Be brief."},
            {"model": MODEL, "input": "d", "previous_response_id": "$RESPONSE_ID_2"},
        ],
    )
    codes = [r.get("error", {}).get("code") for r in out["results"][:2]]
    assert codes == ["previous_response_not_found", "unsupported_parameter"]
    assert [e["code"] for e in out["errors"]] == codes  # the SDK reported both on its `error` listener
    assert [r.get("status") for r in out["results"][2:]] == ["completed", "completed"]
    (request,) = upstream.requests  # only the last turn reached the backend
    assert plain(request.body["messages"]) == [("system", "Be brief."), ("user", "c"), ("user", "d")]
    assert ws_frames.validate() == (2, 2)
