"""Golden cases saved from the inspector (``cases/inspector/*.json``, see its README): each replays
to the events it recorded, ids and timestamps aside, fed whole, byte by byte and at 20 seeded
random split points, and every replay passes the strict validator."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from crossfeed.proxy.cli.replay_case import differences, events_of, load_case, normalized
from crossfeed.proxy.cli.translate import translate_stream
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import validate_responses_events

CASES = sorted((Path(__file__).parent / "cases" / "inspector").glob("*.json"))


class Pieces(io.BytesIO):
    """A stream whose reads return the given pieces, one a read."""

    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__()
        self.pieces = list(pieces)

    def read1(self, size: int | None = -1, /) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""

    def read(self, size: int | None = -1, /) -> bytes:
        return self.read1(size)


def replayed(case: dict[str, Any], pieces: list[bytes]) -> list[Any]:
    out = io.BytesIO()
    translate_stream(
        Pieces(pieces),
        out,
        source=case["from"],
        request=case["request"],
        jsonl=case["jsonl"],
        reasoning_field=case["reasoning_field"],
    )
    return events_of(out.getvalue(), case["jsonl"])


def test_there_are_cases() -> None:
    assert len(CASES) >= 3


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case_replays_to_its_events(path: Path) -> None:
    case = load_case(path)
    assert case["complete"], case["notes"]
    recorded = events_of(case["events"].encode(), case["jsonl"])
    validate_responses_events(recorded)
    data = case["upstream"].encode()
    expected = normalized(recorded)
    for pieces in ([data], byte_by_byte(data), *(split_points(data, seed, 2 + seed * 7) for seed in range(20))):
        events = replayed(case, pieces)
        validate_responses_events(events)
        assert differences(expected, normalized(events)) == []
