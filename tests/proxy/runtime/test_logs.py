"""The log line format: JSON with the request's fields, level, UTC timestamp, redaction, tracebacks."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator

import pytest
import structlog

from crossfeed.proxy.runtime.logs import REQUEST_FIELDS, BatchedLines, configure_logging, flush_logs
from tests.support.waiting import wait_until


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


# -- batched lines (JSON to a file or a pipe) ---------------------------------------------------


class _Sink(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.writes += 1
        self.chunks.append(bytes(data))
        return super().write(data)


def test_batched_lines_without_a_loop_are_written_at_once() -> None:
    sink = _Sink()
    out = BatchedLines(sink)
    out.info(b'{"a":1}')
    out.info(b'{"a":2}')
    assert sink.getvalue() == b'{"a":1}\n{"a":2}\n' and sink.writes == 2


async def test_batched_lines_wait_for_the_timer_or_a_warning() -> None:
    sink = _Sink()
    out = BatchedLines(sink, seconds=0.05)
    out.info(b"one")
    out.info(b"two")
    assert sink.getvalue() == b""  # nothing yet: the batch waits for the timer
    assert await wait_until(lambda: sink.getvalue() == b"one\ntwo\n", 5.0)
    assert sink.writes == 1
    out.info(b"three")
    out.warning(b"four")  # never waits, and takes what was waiting with it, in order
    assert sink.getvalue() == b"one\ntwo\nthree\nfour\n" and sink.writes == 2


async def test_batched_lines_flush_when_full_and_on_request() -> None:
    sink = _Sink()
    out = BatchedLines(sink, seconds=60, limit=12)
    out.info(b"12345")
    assert sink.getvalue() == b""
    out.info(b"67890")  # 12 bytes wait: written now, not in a minute
    assert sink.getvalue() == b"12345\n67890\n" and sink.writes == 1
    out.info(b"last")
    out.flush()  # what shutdown and exit do
    assert sink.getvalue().endswith(b"last\n")


async def test_a_batch_never_grows_past_its_limit() -> None:
    """Workers share one stderr: each write must stay within PIPE_BUF to stay whole on a pipe."""
    sink = _Sink()
    out = BatchedLines(sink, seconds=60, limit=12)
    out.info(b"1234")
    out.info(b"5678")  # 10 bytes wait
    out.info(b"abcd")  # would make 15: the 10 go first
    assert sink.chunks == [b"1234\n5678\n"]
    out.warning(b"wxyz")  # 10 with the waiting line: one write
    assert sink.chunks == [b"1234\n5678\n", b"abcd\nwxyz\n"]
    out.info(b"a-line-longer-than-the-limit")  # alone in its write
    assert sink.chunks[-1] == b"a-line-longer-than-the-limit\n"


def test_batched_lines_to_a_closed_file_are_dropped_quietly() -> None:
    sink = _Sink()
    sink.close()
    BatchedLines(sink).error(b"nobody reads this")  # no exception into the request that logged


async def test_configure_logging_batches_json_to_a_file_not_to_a_terminal() -> None:
    class Terminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    for stream, batched in ((io.TextIOWrapper(_Sink()), True), (Terminal(_Sink()), False)):
        configure_logging("info", "json", stream=stream)
        try:
            structlog.get_logger("crossfeed").info("thing.happened")
            sink = stream.buffer
            assert (sink.getvalue() == b"") is batched
            flush_logs()
            assert json.loads(sink.getvalue())["event"] == "thing.happened"
        finally:
            structlog.reset_defaults()
