"""The expected-file step every golden test shares: compare, or (``CROSSFEED_UPDATE_GOLDEN=1``,
or a case with no expected file yet) write it for review."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

UPDATE = os.environ.get("CROSSFEED_UPDATE_GOLDEN") == "1"


def check_expected(expected_file: Path, events: list[dict[str, Any]]) -> None:
    """``events`` equal the one-per-line JSON of ``expected_file``."""
    if UPDATE or not expected_file.exists():
        expected_file.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
        if not UPDATE:
            pytest.fail(f"wrote a new {expected_file}; review it and run again")
    expected = [orjson.loads(line) for line in expected_file.read_bytes().splitlines() if line.strip()]
    assert events == expected
