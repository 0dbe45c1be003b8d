"""Errors raised by the pure translation layer.

Tree::

    TranslationError                  base; carries an HTTP status hint and an OpenAI error code
    ├── InvalidRequest(param)         the client's request is malformed or has no equivalent -> 400
    │   └── UnsupportedFeature(param) a valid field that the target API cannot express     -> 400
    ├── UpstreamProtocolError         the upstream broke its own protocol (bad SSE / JSON)   -> 502
    └── StreamStateError              crossfeed misused a state machine (a bug)              -> 500

Every error names who was at fault through its class, and ``param`` names the request field
for client errors, so the proxy can build OpenAI's error envelope in one place.
"""

from __future__ import annotations


class TranslationError(Exception):
    http_status: int = 500
    error_type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequest(TranslationError):
    http_status = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class UnsupportedFeature(InvalidRequest):
    code = "unsupported_parameter"


class UpstreamProtocolError(TranslationError):
    http_status = 502
    error_type = "upstream_error"
    code = "upstream_protocol_error"


class StreamStateError(TranslationError):
    http_status = 500
    code = "internal_error"


def json_kind(value: object, *, decimal: str = "a number") -> str:
    """The JSON type of ``value`` as error messages name it (``decimal``: the word for floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return decimal
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
