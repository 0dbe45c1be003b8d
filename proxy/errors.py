"""Proxy-side errors and OpenAI's error envelope.

Tree::

    ProxyError                          base: carries status, OpenAI error type/code, param
    ├── ClientRequestError              the client's request is unusable (400/404/413/...)
    ├── UpstreamError                   anything the upstream did wrong or failed to do
    │   ├── UpstreamUnavailable         connection refused / reset / DNS          -> 502
    │   ├── UpstreamTimeout(which)      connect / first byte / idle / total       -> 504
    │   └── UpstreamHTTPError           non-2xx answer; status and message kept
    └── ConfigError                     start-up only: a bad config file or flag

Translator errors (``translators.errors``) carry the same attributes, so ``error_response``
renders both. Messages never contain exception class names or tracebacks.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from crossfeed.translators.errors import TranslationError


class ProxyError(Exception):
    status = 500
    error_type = "server_error"
    code: str | None = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}


class ClientRequestError(ProxyError):
    status = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class UpstreamError(ProxyError):
    status = 502
    error_type = "upstream_error"
    code = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    code = "upstream_unavailable"


class UpstreamBroken(UpstreamUnavailable):
    """A whole (non-streamed) answer cut short after its 2xx headers: the connection failed in
    the middle of the body, or the body that came is not JSON. Another replica may answer whole
    (proxy/turns/exchange.py ``whole_leg``); to the client it is ``upstream_unavailable``."""


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"

    def __init__(self, which: str, seconds: float) -> None:
        super().__init__(
            f"the upstream did not answer in time ({which} timeout of {seconds:g}s)", code=f"upstream_{which}_timeout"
        )
        self.which = which


class UpstreamHTTPError(UpstreamError):
    """A non-2xx upstream answer. ``body`` is OpenAI's envelope when the upstream sent one."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        err = body.get("error") or {}
        super().__init__(str(err.get("message") or "upstream error"), status=status, headers=headers)
        self.body = body


class ConfigError(Exception):
    """A configuration problem found at start-up; the message names the key."""


def envelope(message: str, error_type: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_parts(exc: ProxyError | TranslationError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, OpenAI envelope and headers an error is answered with, on any transport."""
    if isinstance(exc, UpstreamHTTPError):
        body = exc.body
        status = exc.status
    elif isinstance(exc, TranslationError):
        body = envelope(exc.message, exc.error_type, exc.param, exc.code)
        status = exc.http_status
    else:
        body = envelope(exc.message, exc.error_type, exc.param, exc.code)
        status = exc.status
    return status, body, dict(getattr(exc, "headers", None) or {})


def error_code(status: int, error: dict[str, Any]) -> str:
    """A string ``code`` for an error that may have none (an upstream's error relayed as it came):
    its own code, else its ``type``, else the type its status stands for
    (``invalid_request_error``, ``server_error``...). A WebSocket error frame needs one (the Open
    Responses ``WebSocketErrorEvent``); HTTP bodies keep the upstream's null, as OpenAI sends."""
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
    return _type_for(status)


def error_response(exc: ProxyError | TranslationError, *, headers: dict[str, str] | None = None) -> web.Response:
    status, body, hdrs = error_parts(exc)
    if headers:
        hdrs.update(headers)
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=hdrs)


def upstream_error_body(status: int, raw: bytes, content_type: str, *, secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keep an upstream's OpenAI-shaped error; wrap anything else (HTML, empty, text). Secrets
    (the upstream key) are cut out of the message: some servers quote the key they received.
    They are cut from the raw body too, before a text body is shortened: a key the cut splits
    would otherwise leave its first characters in the message."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            raw = raw.replace(secret.encode(), b"[redacted]")
    body = _error_body(status, raw, content_type)
    err = body["error"]
    message = str(err.get("message") or "")
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in message:
            message = message.replace(secret, "[redacted]")
    err["message"] = message
    return body


def _error_body(status: int, raw: bytes, content_type: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and parsed["error"].get("message"):
        err = parsed["error"]
        return envelope(
            str(err["message"]),
            str(err.get("type") or _type_for(status)),
            err.get("param") if isinstance(err.get("param"), str) else None,
            str(err["code"]) if err.get("code") is not None else None,
        )
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str) and parsed["error"].strip():
        return envelope(parsed["error"], _type_for(status), None, None)
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str) and parsed["message"].strip():
        return envelope(parsed["message"], _type_for(status), None, None)
    text = raw.decode("utf-8", "replace").strip()
    if "html" in content_type or text.startswith("<"):
        text = ""
    detail = f": {text[:500]}" if text else ""
    return envelope(f"the upstream answered HTTP {status}{detail}", _type_for(status), None, None)


def _type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status < 500:
        return "invalid_request_error"
    return "server_error"
