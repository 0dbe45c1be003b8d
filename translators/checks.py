"""The type checks of a request's fields, shared by both request mappings (pure).

Each raises ``InvalidRequest`` naming the ``param`` in OpenAI's style (``tools[1].name``), with
OpenAI's wording and code (``invalid_type``, ``invalid_value``, ``missing_required_parameter``).
"""

from __future__ import annotations

from typing import Any

from crossfeed.translators.errors import InvalidRequest, json_kind


def type_error(param: str, expected: str, value: Any) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}, but got {json_kind(value, decimal='a decimal')} instead.",
        param=param,
        code="invalid_type",
    )


def value_error(param: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid '{param}': {message}", param=param, code="invalid_value")


def missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def expect_dict(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise type_error(param, "an object", value)
    return value


def expect_list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise type_error(param, "an array", value)
    return value


def req_str(obj: dict[str, Any], key: str, param: str) -> str:
    """``obj[key]`` must be present and a string."""
    value = obj.get(key)
    if value is None:
        raise missing(f"{param}.{key}")
    if not isinstance(value, str):
        raise type_error(f"{param}.{key}", "a string", value)
    return value


def opt_str(obj: dict[str, Any], key: str, param: str) -> str | None:
    """``obj[key]`` may be absent or null; otherwise it must be a string."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise type_error(f"{param}.{key}" if param else key, "a string", value)
    return value


def opt_bool(obj: dict[str, Any], key: str, param: str) -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise type_error(f"{param}.{key}" if param else key, "a boolean", value)
    return value


def opt_number(
    obj: dict[str, Any], key: str, *, integer: bool = False, low: float | None = None, high: float | None = None
) -> Any:
    """Top-level ``obj[key]``: absent/null, or a number (an integer if asked) within bounds."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise type_error(key, "an integer" if integer else "a decimal", value)
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        raise value_error(key, f"expected a value {bounds}, but got {value} instead.")
    return value
