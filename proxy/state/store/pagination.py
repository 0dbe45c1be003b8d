"""Pure cursor pagination for ``GET /v1/responses/{id}/input_items``.

Semantics follow the OpenAI list endpoints: ``order`` (default ``desc``: last input item first)
fixes the direction; ``after`` starts the page just past that item id and ``before`` ends it just
short of that id, both in that direction; ``limit`` (1..100, default 20) caps the page.
``has_more`` is true when the window (after/before) holds more items than the page returned, so a
client that passes ``after=last_id`` walks the whole list. An ``after``/``before`` id that is not
among the items is a 400 naming the param (``InvalidParam``). Query-string values are accepted
as-is (``limit="5"``); an empty string counts as absent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
ORDERS = ("asc", "desc")
_INT = re.compile(r"[+-]?[0-9]+")


class InvalidParam(ValueError):
    """A bad query parameter; ``param`` names it for OpenAI's error envelope."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


def _limit(value: int | str | None) -> int:
    if value is None or value == "":
        return DEFAULT_LIMIT
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and _INT.fullmatch(value.strip()):
        n = int(value)
    else:
        raise InvalidParam("limit", f"Invalid 'limit': expected an integer, got {value!r}.")
    if not 1 <= n <= MAX_LIMIT:
        raise InvalidParam("limit", f"Invalid 'limit': expected an integer from 1 to {MAX_LIMIT}, got {n}.")
    return n


def _position(ids: list[Any], cursor: str, param: str) -> int:
    try:
        return ids.index(cursor)
    except ValueError:
        raise InvalidParam(param, f"Invalid '{param}': no input item with id '{cursor}' in this response.") from None


def paginate(
    items: Sequence[dict[str, Any]],
    *,
    limit: int | str | None = None,
    order: str | None = None,
    after: str | None = None,
    before: str | None = None,
) -> dict[str, Any]:
    """One page of ``items`` (in conversation order) as ``{object: "list", data, first_id,
    last_id, has_more}``. Raises ``InvalidParam`` for a bad ``limit``/``order``/``after``/``before``."""
    n = _limit(limit)
    order = order or "desc"
    if order not in ORDERS:
        raise InvalidParam("order", f"Invalid 'order': expected 'asc' or 'desc', got {order!r}.")
    for param, value in (("after", after), ("before", before)):
        if value is not None and not isinstance(value, str):
            raise InvalidParam(param, f"Invalid '{param}': expected a string item id.")

    seq = list(items) if order == "asc" else list(reversed(items))
    ids = [item.get("id") for item in seq]
    start = _position(ids, after, "after") + 1 if after else 0
    end = _position(ids, before, "before") if before else len(seq)
    window = seq[start:end] if start < end else []
    page = window[:n]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": len(window) > n,
    }
