"""The HTTP side of background responses: the create (``background: true`` on ``POST
/v1/responses``) and ``POST /v1/responses/{id}/cancel``. The run itself is
proxy/turns/background.py's; reading it (``GET``, resumed streams) is proxy/state/runs.py's.

- A background create answers at once: ``stream`` false, the Response as it began (``background``
  true, not yet ended); ``stream`` true, an SSE stream that reads the run's log from its first
  event, as ``GET ...?stream=true`` does: the client leaving ends the reading, not the run.
- Cancel: a run not ended gets its cancel flag (the process running it, wherever it is, ends it
  ``cancelled`` within ``[runs] cancel_poll_seconds``); the answer waits for the run's end and is
  its Response. A run already ended is answered unchanged. A response that was not created in
  background (a detached streamed turn, proxy/turns/detach.py, included): 400 naming it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.state.history import visible
from crossfeed.proxy.state.runs import ended_status, find_run, is_terminal, run_events, stream_run
from crossfeed.proxy.state.store.base import StoreError
from crossfeed.proxy.state.store_access import KEEPER, STORE, unavailable
from crossfeed.proxy.turns import background
from crossfeed.proxy.turns.exchange import stream_flag
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.checks import opt_bool
from crossfeed.translators.errors import TranslationError


def is_background(body: dict[str, Any]) -> bool:
    """``background`` is true (a non-boolean is the mapping's 400, naming it)."""
    try:
        return bool(opt_bool(body, "background", ""))
    except TranslationError:
        return False


async def create(request: web.Request, body: dict[str, Any], turn: Turn) -> web.StreamResponse:
    """A background create on a chat upstream."""
    response = await background.start(turn, body)
    if stream_flag(body):
        return await stream_run(request, response["id"], -1)
    return web.Response(body=orjson.dumps(response), content_type="application/json")


async def cancel_response(request: web.Request) -> web.Response:
    rid = request.match_info["response_id"]
    app = request.app
    state = await find_run(app, rid)
    if state is not None and state.get("response", {}).get("background") is False:
        state = None  # a detached streamed turn (proxy/turns/detach.py): not a background response
    if state is None:
        try:
            record = visible(await app[KEEPER].get(rid))
        except StoreError as exc:
            raise unavailable(app, exc, "get", f"response with id '{rid}'") from None
        if record is not None:
            raise ClientRequestError(
                f"Only responses created with background=true can be cancelled: '{rid}' was not.",
                param="response_id",
                code="invalid_value",
            )
        raise ClientRequestError(
            f"Response with id '{rid}' not found.", param="response_id", status=404, code="not_found"
        )
    if not ended_status(state):
        try:
            await app[STORE].request_cancel(rid)
        except StoreError as exc:
            raise unavailable(app, exc, "cancel", f"response with id '{rid}'") from None
        final = await _ended(app, rid, int(state.get("last", -1)))
        if final is not None:
            return web.Response(body=orjson.dumps(final), content_type="application/json")
        state = await find_run(app, rid) or state
    return web.Response(body=orjson.dumps(state["response"]), content_type="application/json")


async def _ended(app: web.Application, rid: str, after: int) -> dict[str, Any] | None:
    """The run's final Response, from its terminal event once that is in the log (a run whose
    process stopped is ended by the reading), or None after the lease's bound and a little more.
    (The event, not the state record: the record is written just after it.)"""
    runs = app[CONFIG].runs
    last: bytes | None = None
    try:
        async with asyncio.timeout(runs.lease_seconds + runs.renew_seconds + 5):
            async for docs in run_events(app, rid, after):
                last = docs[-1] if docs else last
    except TimeoutError:
        return None
    if last is None or not is_terminal(last):
        return None
    response: dict[str, Any] = orjson.loads(last)["response"]
    return response
