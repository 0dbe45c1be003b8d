"""structlog set-up: JSON when not on a terminal, readable on one; ``noun.verb`` event names."""

from __future__ import annotations

import logging
import sys

import orjson
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_REDACT = ("authorization", "api_key", "x-api-key", "proxy-authorization")


def _redact(_: object, __: str, event: dict[str, object]) -> dict[str, object]:
    for key in list(event):
        if key.lower() in _REDACT:
            event[key] = "[redacted]"
    return event


def _dumps(obj: object, **_: object) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(level: str = "info", fmt: str = "auto", stream: object | None = None) -> None:
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not getattr(out, "isatty", lambda: False)())
    # orjson renders a line several times faster than json; the summary line is written for
    # every request, so this is on the per-request path.
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(serializer=_dumps) if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=out),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


log = structlog.get_logger("crossfeed")
