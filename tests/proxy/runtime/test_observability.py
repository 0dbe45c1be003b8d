"""The token counts the summary line and ``crossfeed_tokens_total`` take from a usage object, and the
summary line itself."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
import structlog

from crossfeed.proxy.runtime.logs import REQUEST_FIELDS, configure_logging, flush_logs
from crossfeed.proxy.runtime.observability import summary_line, usage_counts, usage_summary

RESPONSES_USAGE = {
    "input_tokens": 11,
    "input_tokens_details": {"cached_tokens": 3},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 5},
    "total_tokens": 18,
}


def test_usage_counts_take_only_whole_non_negative_numbers() -> None:
    assert usage_counts(RESPONSES_USAGE) == {"in": 11, "out": 7}
    assert usage_counts({"prompt_tokens": 4, "completion_tokens": 2}) == {"in": 4, "out": 2}
    assert usage_counts({"input_tokens": "11", "output_tokens": -3}) == {"in": 0, "out": 0}
    assert usage_counts({"input_tokens": True, "output_tokens": 2.5}) == {"in": 0, "out": 0}
    both = {"input_tokens": 0, "prompt_tokens": 5, "output_tokens": None, "completion_tokens": 3}
    assert usage_counts(both) == {"in": 5, "out": 3}  # the Responses name first, the chat one when 0 or none
    assert usage_counts({**both, "input_tokens": 2, "output_tokens": 1}) == {"in": 2, "out": 1}
    assert usage_counts("nonsense") is None and usage_counts(None) is None
    assert usage_summary({"usage": RESPONSES_USAGE}) == {"in": 11, "out": 7} and usage_summary(None) is None


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("bound", [{}, {"tenant": "a"}])
def test_summary_line_writes_what_log_info_writes(fmt: str, bound: dict[str, Any]) -> None:
    """The summary line's shortcut past structlog's wrapper writes the same line, with the same
    keys in the same order, as ``log.info`` on the same logger (the timestamp aside), in both
    formats, with and without bound context and request fields; filtered out below info, neither
    writes anything."""
    fields = {"status": 200, "duration_ms": 1.5, "model": "m", "usage": {"in": 3, "out": 4}, "terminal": "completed"}
    for level, expect_lines in (("info", 2), ("warning", 0)):
        buf = io.StringIO()
        configure_logging(level, fmt, stream=buf, fields={"worker": 1} if bound else None)
        try:
            log = structlog.get_logger("crossfeed").bind(**bound, model="bound-first")
            token = REQUEST_FIELDS.set({"request_id": "req_1", "route": "/v1/responses", "method": "POST"})
            summary_line(log, "request.completed", dict(fields))
            log.info("request.completed", **dict(fields))
            REQUEST_FIELDS.reset(token)
            flush_logs()
        finally:
            structlog.reset_defaults()
        lines = buf.getvalue().splitlines()
        assert len(lines) == expect_lines, lines
        if not lines:
            continue
        if fmt == "json":
            fast, plain = (json.loads(line) for line in lines)
            assert fast.pop("timestamp") and plain.pop("timestamp")
            assert list(fast.items()) == list(plain.items())
            assert fast["request_id"] == "req_1" and fast["status"] == 200
        else:
            strip = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z?")
            assert strip.sub("", lines[0]) == strip.sub("", lines[1])
