"""Golden transcripts, forward direction: recorded chat streams -> Responses events.

Each case directory under ``cases/chat_to_responses/`` holds ``request.json`` (the client's
Responses request), either ``source.txt`` (a capture under ../shared/captures) or ``upstream.sse``
(a hand-made stream for a case no capture covers), optional ``tools.json`` (the ToolContext the
request mapping would produce), an empty ``think_tags`` file (the upstream option is on),
and ``expected.jsonl`` (one event per line). Each case is fed whole,
byte by byte, and at 20 seeded random split points: the outputs must be identical, match the
expected file, and pass the strict validator. ``CROSSFEED_UPDATE_GOLDEN=1`` rewrites the
expected files for review in the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import validate_responses_events
from translators.chat_to_responses import ChatToResponsesStream
from translators.ids import SequentialIds
from translators.options import ToolContext
from translators.pump import Pump

CASES = Path(__file__).parent / "cases" / "chat_to_responses"
CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures"
UPDATE = os.environ.get("CROSSFEED_UPDATE_GOLDEN") == "1"


def upstream_bytes(case: Path) -> bytes:
    if (case / "upstream.sse").exists():
        return (case / "upstream.sse").read_bytes()
    return (CAPTURES / (case / "source.txt").read_text().strip()).read_bytes()


def translate(case: Path, pieces: list[bytes]) -> list[dict]:
    request = orjson.loads((case / "request.json").read_bytes())
    tools = ToolContext()
    if (case / "tools.json").exists():
        t = orjson.loads((case / "tools.json").read_bytes())
        tools = ToolContext(custom_tools=frozenset(t.get("custom_tools", ())),
                            namespaced={k: tuple(v) for k, v in t.get("namespaced", {}).items()})
    sealer = (lambda text: f"sealed:{len(text)}") if (case / "seal").exists() else None
    machine = ChatToResponsesStream(request, ids=SequentialIds(), now=lambda: 1_700_000_000, tools=tools,
                                    seal_reasoning=sealer, think_tags=(case / "think_tags").exists())
    pump = Pump(machine)
    out = machine.start()
    for piece in pieces:
        out += pump.feed(piece)
    out += pump.finish()
    # Render and parse back, exactly as the client receives them.
    return [orjson.loads(orjson.dumps(e)) for e in out]


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_golden(case: Path) -> None:
    data = upstream_bytes(case)
    whole = translate(case, [data])
    validate_responses_events(whole)
    expected_file = case / "expected.jsonl"
    if UPDATE or not expected_file.exists():
        expected_file.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in whole))
        if not UPDATE:
            pytest.fail(f"wrote a new {expected_file}; review it and run again")
    expected = [orjson.loads(line) for line in expected_file.read_bytes().splitlines() if line.strip()]
    assert whole == expected
    assert translate(case, byte_by_byte(data)) == whole
    for seed in range(20):
        assert translate(case, split_points(data, seed, 1 + seed * 3)) == whole, f"split seed {seed}"
