"""Background mode through the official Node SDK (npm ``openai``, pinned in
.ci/install-node-sdk.sh): ``responses.create({background: true})``, ``retrieve`` until done,
``cancel`` twice, and ``retrieve(id, {stream: true, starting_after: N})`` mid-run and after the
end. The node script (tests/integration/node/background.cjs) prints every event the SDK parsed;
each whole stream goes through the strict validator here, and each resumed one must be exactly
the whole stream's events after N. Without the pinned SDK: skipped locally, a failure in CI."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.app_server import ProxyHandle
from tests.support.background import WORDS, held
from tests.support.node_sdk import NODE_OPENAI_VERSION
from tests.support.validators import validate_responses_events

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).with_name("node") / "background.cjs"
GUARD = 60.0  # seconds: hang guard of the node run


async def run_node(sdk_dir: Path, proxy: ProxyHandle, tmp_path: Path, go: asyncio.Event) -> dict[str, Any]:
    """Run the script; let the held backend go when it says its resumed stream has begun."""
    plan = tmp_path / "plan.json"
    plan.write_bytes(
        orjson.dumps({"sdk_dir": str(sdk_dir), "base_url": proxy.base_url, "api_key": "sk-test", "model": "m"})
    )
    proc = await asyncio.create_subprocess_exec(
        "node", str(SCRIPT), str(plan), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=2**24
    )
    assert proc.stdout is not None and proc.stderr is not None
    docs: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(GUARD):
            async for line in proc.stdout:
                docs.append(orjson.loads(line))
                if docs[-1]["step"] == "mid":
                    go.set()
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the node script did not finish within {GUARD:g}s: {docs}") from None
    stderr = await proc.stderr.read()
    assert proc.returncode == 0, f"node exited {proc.returncode}: {docs[-1:]!r} {stderr[-2000:]!r}"
    assert [d["step"] for d in docs] == ["mid", "done"]
    return docs[-1]


async def test_the_node_sdk_creates_polls_resumes_and_cancels_background_responses(
    node_sdk: Path, proxy: ProxyHandle, upstream: FakeUpstream, tmp_path: Path
) -> None:
    first, go = held()
    second, _ = held()  # never let go: only the cancel ends it
    upstream.reply(first, second)
    out = await run_node(node_sdk, proxy, tmp_path, go)
    assert out["version"] == NODE_OPENAI_VERSION

    created, whole = out["created"], out["whole"]
    assert created["background"] is True and created["status"] in ("queued", "in_progress")
    assert out["polled"]["status"] == "in_progress"
    validate_responses_events(whole)
    assert [e["sequence_number"] for e in whole] == list(range(len(whole)))
    assert out["mid"] == whole[4:]  # resumed mid-run: exactly the events after 3, to the end
    assert out["after_end"] == whole[8:]
    assert whole[-1]["type"] == "response.completed" and whole[-1]["response"]["id"] == created["id"]
    final = out["final"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "".join(WORDS)

    cancelled = out["cancelled"]
    assert cancelled["status"] == "cancelled" and cancelled["id"] == out["second"]["id"]
    assert out["cancelled_again"] == cancelled and out["second_final"]["status"] == "cancelled"
    validate_responses_events(out["second_whole"])
    assert out["second_whole"][-1]["type"] == "response.failed"
    assert out["second_whole"][-1]["response"]["status"] == "cancelled"
    assert upstream.cancelled == 1 and len(upstream.requests) == 2
