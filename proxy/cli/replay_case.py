"""A test case saved from the inspector (``crossfeed-case-*.json``): the backend's stream and the events
crossfeed made of it, with the client's request. ``crossfeed translate --case FILE`` replays the
stream; with ``--check`` it compares the replay with the recorded events, ids and timestamps aside
(a live turn's ids are random and its clock the server's; a replay's are sequential)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

CASE_VERSION = 1
_ID = re.compile(r"^(?:resp|msg|fc|rs|ws|mcp|mcpl|mcpr|call|ctc|cmp|chatcmpl|item|ig|ts)[_-][A-Za-z0-9_.:-]*$")
_CLOCK = frozenset({"created_at", "created", "completed_at"})
_SSE_DATA = re.compile(rb"^data: ?(.*)$", re.MULTILINE)


class CaseError(Exception):
    """A file that is not a readable case (exit 2)."""


def load_case(path: Path) -> dict[str, Any]:
    try:
        case = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise CaseError(f"cannot read the case file {path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise CaseError(f"the case file {path} is not valid JSON: {exc}") from None
    if not isinstance(case, dict) or case.get("crossfeed_case") != CASE_VERSION:
        raise CaseError(f"{path} is not a crossfeed case (saved with the inspector's 'Save as test case')")
    for key, kind in (("from", str), ("to", str), ("upstream", str), ("events", str)):
        if not isinstance(case.get(key), kind):
            raise CaseError(f"{path}: the case's {key!r} is missing or not a {kind.__name__}")
    if case["from"] == case["to"]:
        raise CaseError(f"{path}: a {case['from']} stream relayed unchanged: there is nothing to replay")
    return case


def events_of(raw: bytes, jsonl: bool) -> list[Any]:
    """The events of an SSE body (``[DONE]`` and comments aside) or of JSON lines."""
    lines = raw.splitlines() if jsonl else [m.group(1) for m in _SSE_DATA.finditer(raw)]
    out = []
    for line in lines:
        line = line.strip()
        if line and line != b"[DONE]":
            out.append(orjson.loads(line))
    return out


def normalized(events: list[Any]) -> list[Any]:
    """The events with each id replaced by its order of first appearance, and clock fields 0."""
    names: dict[str, str] = {}

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if key in _CLOCK and isinstance(value, (int, float)):
            return 0
        if isinstance(value, str) and _ID.match(value):
            return names.setdefault(value, f"<id {len(names) + 1}>")
        return value

    return [walk(e) for e in events]


def differences(recorded: list[Any], replayed: list[Any], limit: int = 5) -> list[str]:
    """What differs between two event lists, already normalized (at most ``limit`` lines)."""
    out = []
    if len(recorded) != len(replayed):
        out.append(f"{len(recorded)} events recorded, {len(replayed)} replayed")
    for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
        if a != b:
            kind = a.get("type", a.get("object", "?")) if isinstance(a, dict) else "?"
            out.append(f"event {i} ({kind}): recorded {_short(a)}, replayed {_short(b)}")
            if len(out) >= limit:
                break
    return out


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 300 else f"{text[:297]}..."
