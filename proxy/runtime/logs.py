"""structlog set-up: JSON when not on a terminal, readable on one; ``noun.verb`` event names."""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import EventDict

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_REDACT = ("authorization", "Authorization", "api_key", "x-api-key", "proxy-authorization", "headers")


# The fields of the request being handled (request id, route, method), added to every log line
# written while handling it. One variable set once per request: structlog's per-key context
# variables cost a context copy and a scan on every bind, clear and log call.
REQUEST_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("crossfeed_request_fields", default=None)
# When the request (or WebSocket frame) being served arrived (time.monotonic()): the inspector's
# timings count from it.
ARRIVED: ContextVar[float] = ContextVar("crossfeed_arrived", default=0.0)


_LEVEL_NAMES = {"warn": "warning", "exception": "error"}


class TraceSwitch:
    """Whether streamed turns are traced in this process (proxy/runtime/turn_trace.py): ``debug``, the
    level is debug (set by ``configure_logging``); ``recording``, an application of this process
    records its turns (``[logging] record_dir``); ``on``, either. A turn reads ``on`` once, when
    its stream opens, and nothing more when it is false: the per-chunk path never checks a level.
    ``max_chars``: debug lines cut longer strings to this (``[logging] debug_max_chars``).
    ``inspecting``: an application of this process keeps its turns for ``/inspector``."""

    __slots__ = ("debug", "recording", "inspecting", "on", "max_chars")

    def __init__(self) -> None:
        self.debug = self.recording = self.inspecting = self.on = False
        self.max_chars = 2000

    def set(self, *, debug: bool | None = None, recording: bool | None = None, inspecting: bool | None = None) -> None:
        if debug is not None:
            self.debug = debug
        if recording is not None:
            self.recording = recording
        if inspecting is not None:
            self.inspecting = inspecting
        self.on = self.debug or self.recording or self.inspecting


TRACE = TraceSwitch()


class _Enrich:
    """One processor for what every line gets (a line is written per request, so each processor
    call counts): the request's fields, the level, an ISO-8601 UTC timestamp
    (``2026-11-30T12:30:23.146554Z``, the date part formatted once a second), and a safety net
    that keeps fields which could carry credentials out of every line. ``log.exception`` lines
    carry the traceback (operators need it; clients never see it)."""

    __slots__ = ("_prefix", "_second", "_static")

    def __init__(self, static: dict[str, object] | None = None) -> None:
        self._second = -1
        self._prefix = ""
        self._static = static or None  # fields of every line of this process (a worker's index)

    def __call__(self, _: object, method_name: str, event: EventDict) -> EventDict:
        fields = REQUEST_FIELDS.get()
        if fields:
            for key, value in fields.items():
                event.setdefault(key, value)
        if self._static is not None:
            for key, value in self._static.items():
                event.setdefault(key, value)
        event["level"] = _LEVEL_NAMES.get(method_name, method_name)
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        event["timestamp"] = f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"
        for key in _REDACT:  # a few lookups, not a pass over every field
            if key in event:
                event[key] = "[redacted]"
        if "exc_info" in event:  # log.exception(): the traceback as text, for the operator
            event = structlog.processors.format_exc_info(_, method_name, event)
        return event


def _json_bytes(_: object, __: str, event: EventDict) -> bytes:
    return orjson.dumps(event, default=str)


def _json_text(_: object, __: str, event: EventDict) -> str:
    return orjson.dumps(event, default=str).decode()


# JSON lines to a file or a pipe wait at most this long, or until this much is waiting.
FLUSH_SECONDS = 0.1
FLUSH_BYTES = 16 * 1024


class BatchedLines:
    """The structlog logger for JSON lines going to a file or a pipe (not a terminal).

    Info and debug lines are collected and written together. A batch goes out at the latest
    ``FLUSH_SECONDS`` after its first line, as soon as ``FLUSH_BYTES`` wait, with the next warning or error
    line (which never waits), and at exit. Outside a running event loop every line is written
    at once. One write per batch instead of one per line: the summary line is written for every
    request, and with the log on a file its own write was a noticeable share of a short request's
    CPU (measured in docs/DESIGN.md). Batches stay small: at 64 KiB the allocator handed the
    batch's memory back to the kernel and took it again, which cost more than the writes saved. The
    access logs of nginx (``buffer=``/``flush=``) make the same trade. A batch never grows past
    ``limit`` (but for one longer line): the workers of ``serve --workers`` share one stderr, and a
    write of at most ``PIPE_BUF`` bytes to a pipe is never interleaved with another's."""

    __slots__ = ("_out", "_lines", "_size", "_armed", "_seconds", "_limit")

    def __init__(self, out: Any, seconds: float = FLUSH_SECONDS, limit: int = FLUSH_BYTES) -> None:
        self._out = out  # a binary file
        self._lines: list[bytes] = []
        self._size = 0
        self._armed = False
        self._seconds = seconds
        self._limit = limit

    def msg(self, line: bytes) -> None:
        if self._lines and self._size + len(line) + 1 > self._limit:
            self.flush()
        self._lines.append(line)
        self._size += len(line) + 1
        if self._size >= self._limit:
            self.flush()
        elif not self._armed:
            try:
                asyncio.get_running_loop().call_later(self._seconds, self.flush)
            except RuntimeError:  # no event loop here (start-up, the command-line tools)
                self.flush()
                return
            self._armed = True

    debug = info = msg

    def urgent(self, line: bytes) -> None:
        if self._lines and self._size + len(line) + 1 > self._limit:
            self.flush()
        self._lines.append(line)
        self.flush()

    warning = warn = error = err = critical = fatal = exception = failure = urgent

    def flush(self) -> None:
        self._armed = False
        if not self._lines:
            return
        lines, self._lines, self._size = self._lines, [], 0
        lines.append(b"")
        try:
            self._out.write(b"\n".join(lines))
            self._out.flush()
        except (OSError, ValueError):  # the log file or pipe is gone: nothing left to tell
            pass


_batched: BatchedLines | None = None


def flush_logs() -> None:
    """Write out the lines still waiting (shutdown; also registered to run at exit)."""
    if _batched is not None:
        _batched.flush()


atexit.register(flush_logs)


def configure_logging(
    level: str = "info",
    fmt: str = "auto",
    stream: TextIO | None = None,
    *,
    fields: dict[str, object] | None = None,
    batch_bytes: int = FLUSH_BYTES,
) -> None:
    """``fields``: added to every line (a worker's index); ``batch_bytes``: the largest write of
    batched lines (``PIPE_BUF`` where several processes share the stream)."""
    global _batched
    TRACE.set(debug=level == "debug")
    out = stream or sys.stderr
    tty = getattr(out, "isatty", lambda: False)()
    use_json = fmt == "json" or (fmt == "auto" and not tty)
    # orjson renders a line several times faster than json; the summary line is written for
    # every request, so this is on the per-request path.
    binary = getattr(out, "buffer", None)
    flush_logs()  # lines of an earlier configuration go first
    _batched = None
    if use_json and binary is not None:  # bytes straight to the file: no decode, no print()
        renderer: structlog.types.Processor = _json_bytes
        if tty:
            factory: Callable[..., Any] = structlog.BytesLoggerFactory(file=binary)
        else:
            batched = _batched = BatchedLines(binary, limit=batch_bytes)
            factory = lambda *_: batched  # noqa: E731 (one logger for every bound logger)
    else:
        renderer = _json_text if use_json else structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory(file=out)
    structlog.configure(
        processors=[_Enrich(fields), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )


log = structlog.get_logger("crossfeed")
