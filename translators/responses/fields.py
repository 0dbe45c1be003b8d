"""Reading a Responses upstream's output (pure): typed field readers and the failure envelope.

Shared by the reverse direction (translators/reverse/body.py and machine.py) and the normalizing
relay (translators/responses/normalize.py), so each answers a bad field or a failed Response the
same way.

Upstream field readers (``up_str``, ``up_list``, ``up_dict``, ``up_int``, ``up_number``,
``up_items``): absent or ``null`` gives the default, any other wrong type raises
``UpstreamProtocolError`` naming ``where`` and the field (``bad_field``).

Failure contract: a failed Response is answered with ``ResponseFailed``, a ``TranslationError``
whose ``http_status`` comes from the upstream error code (``error_status``: 429 for rate limits
and quota, 400 for ``invalid_*``/``image_*`` codes, 502 for everything else) and whose ``body``
is the OpenAI error envelope ``{"error": {message, type, param, code}}`` (``error_body``).
"""

from __future__ import annotations

import math
from typing import Any

from crossfeed.translators.errors import TranslationError, UpstreamProtocolError, json_kind

_QUOTA_CODES = frozenset({"rate_limit_exceeded", "insufficient_quota"})


def bad_field(where: str, key: str, value: Any, expected: str) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"{where}: {key} is {json_kind(value)}, expected {expected}")


def up_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    raise bad_field(where, key, value, "a string")


def up_list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if type(value) is list:
        return value
    raise bad_field(where, key, value, "an array")


def up_dict(obj: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None or type(value) is dict:
        return value
    raise bad_field(where, key, value, "an object")


def up_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    """A non-negative integer (token counts, indexes), or None when absent/null."""
    value = obj.get(key)
    if value is None or (type(value) is int and value >= 0):
        return value
    raise bad_field(where, key, value, "a non-negative integer")


def up_number(obj: dict[str, Any], key: str, where: str) -> int | float | None:
    value = obj.get(key)
    if value is None or (type(value) in (int, float) and math.isfinite(value)):
        return value
    raise bad_field(where, key, value, "a number")


def up_items(values: list[Any], where: str) -> list[dict[str, Any]]:
    """``values`` (an array read with ``up_list``) must hold objects only."""
    for i, value in enumerate(values):
        if type(value) is not dict:
            raise UpstreamProtocolError(f"{where}[{i}] is {json_kind(value)}, expected an object")
    return values


class ResponseFailed(TranslationError):
    """The upstream Response ended ``failed`` (or never finished): answer the chat client with
    ``http_status`` and ``body`` (an OpenAI error envelope)."""

    def __init__(self, body: dict[str, Any], http_status: int) -> None:
        err = body["error"]
        super().__init__(err["message"], param=err["param"], code=err["code"])
        self.error_type = err["type"]
        self.http_status = http_status
        self.body = body


def error_status(code: str | None) -> int:
    """HTTP status for an upstream Response error code.

    Rules:
    - ``rate_limit_exceeded`` / ``insufficient_quota`` -> 429 (clients back off and retry);
    - codes starting ``invalid_`` or ``image_`` (bad prompt or image) -> 400;
    - anything else (``server_error``, timeouts, unknown) -> 502: the backend failed.
    """
    if code in _QUOTA_CODES:
        return 429
    if code and (code.startswith("invalid_") or code.startswith("image_")):
        return 400
    return 502


def error_body(err: Any, *, code: str = "server_error", message: str = "upstream response failed") -> dict[str, Any]:
    """An upstream error object (nested ``error`` of an ``error`` event, a flat ``error`` event,
    or ``Response.error``) -> OpenAI's envelope ``{"error": {message, type, param, code}}``.

    Rules:
    - ``message``, ``code`` and ``param`` are copied when present (``code`` and ``message`` fall
      back to the arguments);
    - ``type`` is copied when the upstream gave one, else derived from the status class of the code
      (``invalid_request_error`` for 400, ``insufficient_quota``/``rate_limit_error`` for 429,
      ``server_error`` otherwise).
    """
    e = err if isinstance(err, dict) else {}
    c = e.get("code") or code
    c = c if isinstance(c, str) else str(c)
    t = e.get("type")
    if not isinstance(t, str) or not t or t == "error":
        status = error_status(c)
        if status == 400:
            t = "invalid_request_error"
        elif status == 429:
            t = "insufficient_quota" if c == "insufficient_quota" else "rate_limit_error"
        else:
            t = "server_error"
    m = e.get("message")
    param = e.get("param")
    return {
        "error": {
            "message": m if isinstance(m, str) and m else message,
            "type": t,
            "param": param if isinstance(param, str) else None,
            "code": c,
        }
    }
