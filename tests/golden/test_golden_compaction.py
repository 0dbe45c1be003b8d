"""Golden transcripts of compaction: the chat request crossfeed sends and the events it streams.

Each case under ``cases/compaction/`` (see its README for where the requests come from) is
mapped as the proxy maps it (default upstream options: system messages merged) and checked
against ``expected_chat.json``: the summary request of a ``compaction_trigger``, the replayed
request of a compaction item, or both legs of a ``context_management`` compaction. Where the case
has the backend's stream, the summary leg (translators/compaction.SummaryLeg) and, after it, the
answer leg run through the pump in wire mode, as in the proxy: fed whole, byte by byte and at 20
seeded split points the events are identical, match ``expected.jsonl`` and pass the strict
validator. The sealer here writes ``sealed:`` + the summary, so the expected files show what the
real seal hides. ``CROSSFEED_UPDATE_GOLDEN=1`` rewrites the expected files for review.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from crossfeed.translators.forward.compaction import (
    COMPACTION_PROMPT,
    SummaryLeg,
    summary_message,
    summary_request,
    window,
)
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest, responses_request_to_chat
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.sse import render_responses
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import sse_frames, validate_responses_events

CASES = Path(__file__).parent / "cases" / "compaction"
UPDATE = os.environ.get("CROSSFEED_UPDATE_GOLDEN") == "1"
REPLAYED = "The user asked for two shell steps; step1 ran and printed step1; step2 is next."


def open_summary(token: str) -> str | None:
    return REPLAYED if token == "SEALED-SUMMARY" else None


def plan(case: Path) -> tuple[dict[str, Any], MappedRequest]:
    request = orjson.loads((case / "request.json").read_bytes())
    return request, responses_request_to_chat(request, BackendProfile(), open_summary=open_summary)


def chat_requests(case: Path, summary_text: str | None) -> list[dict[str, Any]]:
    _, mapped = plan(case)
    if mapped.threshold is None:
        return [mapped.chat]
    first = summary_request(mapped.chat, COMPACTION_PROMPT)
    answer = {
        **mapped.chat,
        "messages": [*window(mapped.chat["messages"], "system"), summary_message(summary_text or "")],
    }
    return [first, answer]


def run(case: Path, pieces: list[bytes], answer: list[bytes]) -> tuple[list[dict], str | None]:
    request, mapped = plan(case)
    main = ChatToResponsesStream(
        request,
        ids=SequentialIds(),
        now=lambda: 1_700_000_000,
        tools=mapped.tools,
        profile=BackendProfile(think_tags=(case / "think_tags").exists()),
        wire=True,
    )
    leg = SummaryLeg(
        main,
        lambda text: "sealed:" + text,
        "cmp_test",
        last=mapped.threshold is None,
        profile=BackendProfile(think_tags=(case / "think_tags").exists()),
    )
    pump = Pump(leg)
    out = leg.start()
    for piece in pieces:
        out += pump.feed(piece)
    out += pump.finish()
    if answer and not main.done:
        pump = Pump(main)
        for piece in answer:
            out += pump.feed(piece)
        out += pump.finish()
    events = []
    for name, data in sse_frames(render_responses(out)):
        event = orjson.loads(data)
        assert name == event["type"]
        events.append(event)
    return events, leg.summary


def check(path: Path, value: Any) -> None:
    if UPDATE or not path.exists():
        path.write_bytes(
            orjson.dumps(value, option=orjson.OPT_INDENT_2) + b"\n"
            if path.suffix == ".json"
            else b"".join(orjson.dumps(e) + b"\n" for e in value)
        )
        if not UPDATE:
            pytest.fail(f"wrote a new {path}; review it and run again")
    raw = path.read_bytes()
    expected = orjson.loads(raw) if path.suffix == ".json" else [orjson.loads(x) for x in raw.splitlines() if x.strip()]
    assert value == expected


def cases() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", cases(), ids=lambda p: p.name)
def test_golden_compaction(case: Path) -> None:
    sse = case / "upstream.sse"
    if not sse.exists():
        check(case / "expected_chat.json", chat_requests(case, None))
        return
    data = sse.read_bytes()
    answer = (case / "answer.sse").read_bytes() if (case / "answer.sse").exists() else b""
    whole, summary = run(case, [data], [answer] if answer else [])
    validate_responses_events(whole)
    check(case / "expected.jsonl", whole)
    check(case / "expected_chat.json", chat_requests(case, summary))
    assert run(case, byte_by_byte(data), byte_by_byte(answer))[0] == whole
    for seed in range(20):
        split = run(case, split_points(data, seed, 1 + seed * 3), split_points(answer, seed, 1 + seed * 2))
        assert split[0] == whole, f"split seed {seed}"


def test_the_cases_cover_what_they_claim() -> None:
    """Each kind of case exists and says what it should (the expected files are the code's own
    output, so the properties that matter are also asserted here, independently)."""
    events, summary = run(CASES / "codex_trigger", [(CASES / "codex_trigger" / "upstream.sse").read_bytes()], [])
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and [i["type"] for i in final["output"]] == ["compaction"]
    assert final["output"][0]["encrypted_content"] == "sealed:" + (summary or "") and summary.startswith("## Goal")
    think, _ = run(
        CASES / "codex_trigger_think_tags", [(CASES / "codex_trigger_think_tags" / "upstream.sse").read_bytes()], []
    )
    assert "Summarise" not in think[-1]["response"]["output"][0]["encrypted_content"]
    for name in ("codex_trigger_cut", "codex_trigger_backend_error"):
        failed, _ = run(CASES / name, [(CASES / name / "upstream.sse").read_bytes()], [])
        assert failed[-1]["type"] == "response.failed" and failed[-1]["response"]["output"] == []
    replayed = chat_requests(CASES / "codex_after_compaction", None)[0]["messages"]
    assert replayed[-1] == summary_message(REPLAYED) and next(m["role"] for m in replayed) == "system"
    assert sum(m["role"] == "system" for m in replayed) == 1
    asked = chat_requests(CASES / "codex_trigger", None)[0]
    assert asked["messages"][-1] == {"role": "user", "content": COMPACTION_PROMPT} and "tools" not in asked
