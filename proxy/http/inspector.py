"""The inspector's routes (``[inspector] enabled``): a page, and the turns it shows.

  GET /inspector                        the page (static files of the package: no data in them)
  GET /inspector/static/{file}          its script and style
  GET /inspector/api/turns              the recent turns, a summary each
  GET /inspector/api/turns/{id}         one turn whole: both requests, chunks, events, quirks
  GET /inspector/api/turns/{id}/case    the turn as a test case (``crossfeed translate --case``)
  GET /inspector/api/live               what happens, as it happens (SSE)

Every ``/inspector/api`` route requires the inspector's own key (``admin_key_env``) as a Bearer
token, and no other: a client key never opens it, and the admin key is refused as a client key
(start-up fails when the two are the same). The ring is proxy/runtime/inspector.py.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Mapping
from pathlib import Path

import orjson
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, ConfigError, error_response
from crossfeed.proxy.runtime.config import Config
from crossfeed.proxy.runtime.inspector import INSPECTOR, Ring, Watched

PAGE = Path(__file__).parent / "inspector_page"
FILES = {"app.js": "text/javascript", "style.css": "text/css"}
ADMIN_KEY = web.AppKey("inspector_admin_key", bytes)
KEEPALIVE = 15.0  # seconds between comments on a quiet live feed
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


def install(app: web.Application, config: Config, environ: Mapping[str, str], client_keys: tuple[bytes, ...]) -> None:
    """The routes, when the inspector is on. Its key is read here: named but unset or empty, or
    the same as a client key, is a start-up error (never open, never opened by a client's key)."""
    settings = config.inspector
    if not settings.enabled:
        return
    env = settings.admin_key_env or ""
    key = environ.get(env, "").strip().encode()
    where = config.origin_note("inspector", "admin_key_env")
    if not key:
        raise ConfigError(
            f"inspector.admin_key_env{where} names ${env}, which is unset or empty: refusing to start with "
            "the inspector open (set it, or turn the inspector off)"
        )
    if any(hmac.compare_digest(key, k) for k in client_keys):
        raise ConfigError(
            f"inspector.admin_key_env{where}: ${env} holds a client key (an inbound key); the inspector "
            "needs a key of its own, which no client has"
        )
    app[ADMIN_KEY] = key
    app.router.add_get("/inspector", page)
    app.router.add_get("/inspector/", page)
    app.router.add_get("/inspector/static/{file}", static)
    app.router.add_get("/inspector/api/turns", turns)
    app.router.add_get("/inspector/api/turns/{turn}", turn)
    app.router.add_get("/inspector/api/turns/{turn}/case", case)
    app.router.add_get("/inspector/api/live", live)
    app.on_shutdown.append(_stop)


async def _stop(app: web.Application) -> None:
    app[INSPECTOR].close()


def _refused(request: web.Request) -> web.Response | None:
    """The 401 of a request without the inspector's key (None: it has it)."""
    header = request.headers.get("Authorization", "")
    token = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
    if token and hmac.compare_digest(token, request.app[ADMIN_KEY]):
        return None
    return error_response(
        ClientRequestError(
            "the inspector needs its admin key: send Authorization: Bearer <the key in inspector.admin_key_env>",
            status=401,
            code="invalid_api_key",
        ),
        headers={"WWW-Authenticate": "Bearer"},
    )


def _json(value: object) -> web.Response:
    return web.Response(
        body=orjson.dumps(value), content_type="application/json", headers={"Cache-Control": "no-store"}
    )


async def page(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(PAGE / "index.html", headers={"Content-Type": "text/html; charset=utf-8"})


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["file"]
    if name not in FILES:
        raise web.HTTPNotFound()
    return web.FileResponse(PAGE / name, headers={"Content-Type": f"{FILES[name]}; charset=utf-8"})


async def turns(request: web.Request) -> web.StreamResponse:
    if (refused := _refused(request)) is not None:
        return refused
    ring: Ring = request.app[INSPECTOR]
    return _json(
        {
            "turns": [t.summary() for t in ring.turns.values()],
            "held_bytes": ring.held(),
            "bound_bytes": ring.config.memory_bound,
            "max_turns": ring.config.turns,
        }
    )


def _find(request: web.Request) -> Watched | web.Response:
    found = request.app[INSPECTOR].turns.get(request.match_info["turn"])
    if found is None:
        return error_response(
            ClientRequestError(
                "no such turn in the inspector (it may have been forgotten: the ring keeps the recent ones)",
                status=404,
                param="turn",
                code="not_found",
            )
        )
    return found


async def turn(request: web.Request) -> web.StreamResponse:
    if (refused := _refused(request)) is not None:
        return refused
    found = _find(request)
    return found if isinstance(found, web.Response) else _json(found.detail())


async def case(request: web.Request) -> web.StreamResponse:
    if (refused := _refused(request)) is not None:
        return refused
    found = _find(request)
    if isinstance(found, web.Response):
        return found
    body = found.case()
    name = _UNSAFE_NAME.sub("_", str(body["request_id"]))[:100]
    return web.Response(
        body=orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n",
        content_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="crossfeed-case-{name}.json"'},
    )


async def live(request: web.Request) -> web.StreamResponse:
    """Server-sent events: first every kept turn's summary, then each change as it happens."""
    if (refused := _refused(request)) is not None:
        return refused
    ring: Ring = request.app[INSPECTOR]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    queue = ring.listen()
    try:
        hello = {"kind": "hello", "turns": [t.summary() for t in ring.turns.values()]}
        await response.write(b"data: " + orjson.dumps(hello) + b"\n\n")
        while True:
            try:
                message = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            batch: list[bytes] = []
            while message is not None:
                batch.append(message)
                message = queue.get_nowait() if not queue.empty() and len(batch) < 200 else b""
                if message == b"":
                    break
            if batch:
                await response.write(b"".join(b"data: " + m + b"\n\n" for m in batch))
            if message is None:  # fell behind, or the server stops: the page reconnects and reloads
                break
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        ring.unlisten(queue)
    return response
