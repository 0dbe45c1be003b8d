"""What every user of the response store shares: where the store and its retry queue are on the
application, the 503 of a store that cannot be reached, and whose records a request may see."""

from __future__ import annotations

import structlog
from aiohttp import web

from crossfeed.proxy.errors import ProxyError
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.state.store.base import ResponseStore, StoredResponse, StoreError
from crossfeed.proxy.state.store_health import short_reason
from crossfeed.proxy.state.store_retry import SaveKeeper

log = structlog.get_logger("crossfeed")

STORE = web.AppKey("store", ResponseStore)
KEEPER = web.AppKey("store_keeper", SaveKeeper)


class StoreUnavailable(ProxyError):
    status = 503
    code = "store_unavailable"


def unavailable(app: web.Application, exc: StoreError, op: str, what: str) -> StoreUnavailable:
    """The 503 of a store operation that failed (counted and logged)."""
    count_failure(app, op, exc)
    return StoreUnavailable(
        f"The response store ({app[STORE].backend}) is unavailable ({short_reason(exc)}): {what} could not be "
        "looked up. Try again later."
    )


def count_failure(app: web.Application, op: str, exc: StoreError) -> None:
    app[METRICS].store_failures.labels(op).inc()
    log.warning("store.failed", operation=op, error=str(exc))


def owned(record: StoredResponse | None) -> StoredResponse | None:
    """The record, if the current request's key may see it: with inbound keys, a stored record
    belongs to the key that made it, and to any other key it is as if it did not exist."""
    if record is None or record.owner == KEY_NAME.get():
        return record
    return None
