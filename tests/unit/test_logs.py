"""The log line format: JSON with the request's fields, level, UTC timestamp, redaction, tracebacks."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator

import pytest
import structlog

from proxy.logs import REQUEST_FIELDS, configure_logging


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    yield buf
    structlog.reset_defaults()


def parsed(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_request_fields_level_and_timestamp(lines: io.StringIO) -> None:
    log = structlog.get_logger("crossfeed")
    token = REQUEST_FIELDS.set({"request_id": "req_1", "route": "/v1/responses", "method": "POST"})
    try:
        log.info("thing.happened", n=3, route="explicit wins")
        log.warning("thing.odd")
        log.debug("not.shown")
    finally:
        REQUEST_FIELDS.reset(token)
    log.error("outside.request")
    first, second, third = parsed(lines)
    assert first["event"] == "thing.happened" and first["n"] == 3 and first["request_id"] == "req_1"
    assert first["route"] == "explicit wins" and first["method"] == "POST" and first["level"] == "info"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", first["timestamp"])
    assert second["level"] == "warning" and second["request_id"] == "req_1"
    assert third["level"] == "error" and "request_id" not in third


def test_credentials_are_redacted(lines: io.StringIO) -> None:
    structlog.get_logger().info("x", authorization="Bearer sk-1", headers={"a": "b"}, api_key="sk-2")
    (line,) = parsed(lines)
    assert line["authorization"] == line["headers"] == line["api_key"] == "[redacted]"
    assert "sk-1" not in lines.getvalue() and "sk-2" not in lines.getvalue()


def test_exception_lines_carry_the_traceback(lines: io.StringIO) -> None:
    try:
        {}["missing"]
    except KeyError:
        structlog.get_logger().exception("request.failed", path="/v1/responses")
    (line,) = parsed(lines)
    assert line["level"] == "error" and "exc_info" not in line
    assert "Traceback" in line["exception"] and "KeyError: 'missing'" in line["exception"]

