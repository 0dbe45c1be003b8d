"""structlog set-up: JSON when not on a terminal, readable on one; ``noun.verb`` event names."""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_REDACT = ("authorization", "Authorization", "api_key", "x-api-key", "proxy-authorization", "headers")


# The fields of the request being handled (request id, route, method), added to every log line
# written while handling it. One variable set once per request: structlog's per-key context
# variables cost a context copy and a scan on every bind, clear and log call.
REQUEST_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("crossfeed_request_fields", default=None)


_LEVEL_NAMES = {"warn": "warning", "exception": "error"}


class _Enrich:
    """One processor for what every line gets (a line is written per request, so each processor
    call counts): the request's fields, the level, an ISO-8601 UTC timestamp
    (``2026-11-30T12:30:23.146554Z``, the date part formatted once a second), and a safety net
    that keeps fields which could carry credentials out of every line. ``log.exception`` lines
    carry the traceback (operators need it; clients never see it)."""

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, _: object, method_name: str, event: dict[str, object]) -> dict[str, object]:
        fields = REQUEST_FIELDS.get()
        if fields:
            for key, value in fields.items():
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


def _json_bytes(_: object, __: str, event: dict[str, object]) -> bytes:
    return orjson.dumps(event, default=str)


def _json_text(_: object, __: str, event: dict[str, object]) -> str:
    return orjson.dumps(event, default=str).decode()


def configure_logging(level: str = "info", fmt: str = "auto", stream: object | None = None) -> None:
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not getattr(out, "isatty", lambda: False)())
    # orjson renders a line several times faster than json; the summary line is written for
    # every request, so this is on the per-request path.
    binary = getattr(out, "buffer", None)
    if use_json and binary is not None:  # bytes straight to the file: no decode, no print()
        renderer: structlog.types.Processor = _json_bytes
        factory: object = structlog.BytesLoggerFactory(file=binary)
    else:
        renderer = _json_text if use_json else structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory(file=out)  # type: ignore[arg-type]
    structlog.configure(
        processors=[_Enrich(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


log = structlog.get_logger("crossfeed")
