"""The recorded provider streams, carried by the repository in ``tests/fixtures/captures``.

They are a byte-for-byte copy of the project's shared captures (``../shared/captures``, whose
README, copied with them, says what each stream shows and where it came from), so a fresh clone
runs every test. The copy is never edited: ``tests/golden/test_captures_copy.py`` compares it with
the shared directory whenever that is beside the repository. A file missing from the directory
is always a failure (a broken reference).

Parametrizing over capture files happens at collection time, where a test cannot fail yet:
``capture_files`` then returns one placeholder path, and the test fails or skips when it reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
RECORDED = CAPTURES.parent / "recorded"  # this project's own recordings of real local servers
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "captures"  # where they came from
HINT = f"the captures belong at {CAPTURES} (a copy of ../shared/captures)"


def captures_dir() -> Path:
    """The captures directory (part of the repository: its absence is a broken checkout)."""
    if not CAPTURES.is_dir():
        pytest.fail(HINT)
    return CAPTURES


def capture_path(relative: str | Path) -> Path:
    """One capture file, e.g. ``capture_path("chat/deepseek-chat-length.sse")``; a path under
    ``recorded/`` is one of the project's own recordings (tests/fixtures/recorded)."""
    if str(relative).startswith("recorded/"):
        path = RECORDED.parent / relative
        if not path.is_file():
            pytest.fail(f"recording {path} is missing")
        return path
    path = captures_dir() / relative
    if not path.is_file():
        pytest.fail(f"capture {path} is missing from {CAPTURES}")
    return path


def read_capture(relative: str | Path) -> bytes:
    return capture_path(relative).read_bytes()


def capture_files(pattern: str) -> list[Path]:
    """Capture files matching a glob, for ``parametrize``. Never an empty list: without the
    directory, or without a match, it is one placeholder that ``capture_path`` rejects at run time."""
    found = sorted(CAPTURES.glob(pattern)) if CAPTURES.is_dir() else []
    return found or [CAPTURES / pattern]


def data_objects(raw: bytes) -> list[Any]:
    """The JSON payloads of an SSE body's ``data:`` lines, ``[DONE]`` left out, read without
    crossfeed's decoder (captures carry one ``data:`` line per frame)."""
    payloads = [line[5:].strip() for line in raw.splitlines() if line.startswith(b"data:")]
    return [orjson.loads(p) for p in payloads if p != b"[DONE]"]
