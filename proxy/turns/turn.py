"""One client turn, as every plan sees it, whatever its transport.

A transport (the HTTP handlers in ``proxy/app.py``, a WebSocket frame in
``proxy/http/websocket.py``) picks the upstream (``route``) and builds one ``Turn``: the services
a plan uses, the chosen upstream, the owner key and the turn's log record. The plans take it and
never see an aiohttp request: how the frames reach the client is the sink opener the transport
hands them. A Responses create on a chat upstream is then decided once, for both transports, by
``proxy.turns.forward.respond``, and the plans it picks get a ``Create`` (the body, its chat
request, the conversation before it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CLOCK, CONFIG, IDS, SEAL, SESSION
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import TurnLog
from crossfeed.proxy.state import affinity
from crossfeed.proxy.state.reasoning_seal import ReasoningSeal
from crossfeed.translators.forward.request import MappedRequest
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.records import quick_init


@quick_init
@dataclass(frozen=True)
class Turn:
    """What a plan needs of its turn. Frozen: a plan that needs another log record (one choice of
    n) makes a copy (``dataclasses.replace``)."""

    # The application itself, beside the typed services below: the store's functions
    # (proxy/state/history.py), the stream limits, metrics and open-stream registry, and the
    # hosted tools' runners take it.
    app: web.Application
    config: Config
    session: aiohttp.ClientSession
    ids: IdFactory
    clock: Callable[[], int]
    seal: ReasoningSeal
    upstream: Upstream  # the backend the body's model routes to
    # The client's request headers (for a WebSocket, the handshake's): the routing headers passed
    # to the backend (proxy/turns/common.py outbound_headers) and the client's own key, which a
    # traced turn cuts out.
    headers: Mapping[str, str]
    owner: str  # the inbound key's name ("" without inbound keys): sealed summaries are bound to it
    log: TurnLog  # the turn's fields on its summary line (request.completed)


def new_turn(
    app: web.Application,
    headers: Mapping[str, str],
    upstream: Upstream,
    log: TurnLog,
    body: Mapping[str, Any] | None = None,
) -> Turn:
    """The turn of a request (or of a WebSocket frame) whose body routes to ``upstream``; on a
    pool, ``body`` and ``headers`` give its affinity (proxy/state/affinity.py)."""
    if upstream.pooled or upstream.forwards_affinity or affinity.CURRENT.get() is not None:
        affinity.begin(upstream, body, headers, app)
    return Turn(
        app, app[CONFIG], app[SESSION], app[IDS], app[CLOCK], app[SEAL], upstream, headers, KEY_NAME.get() or "", log
    )


def route(config: Config, body: dict[str, Any], log: TurnLog) -> Upstream:
    """The upstream serving the body's model; the turn's log gets the model and the upstream's name."""
    model = body.get("model")
    if model is None or not isinstance(model, str) or not model:
        raise ClientRequestError(
            "you must provide a model parameter (a string)",
            param="model",
            code="missing_required_parameter" if model is None else "invalid_type",
        )
    upstream = config.route(model)
    log.update({"model": model, "upstream": upstream.name if upstream else None})
    if upstream is None:
        raise ClientRequestError(
            f"the model `{model}` does not exist or is not served here",
            param="model",
            status=404,
            code="model_not_found",
        )
    return upstream


@quick_init
@dataclass(frozen=True)
class Create:
    """A Responses create on a chat upstream as the create decision made it: the client's body,
    its chat request (the plan maps it again only when an MCP approval changes the input), and
    the conversation before this input (None: it continues no response)."""

    body: dict[str, Any]
    mapped: MappedRequest
    history: list[dict[str, Any]] | None
