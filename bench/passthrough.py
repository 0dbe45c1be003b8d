"""The baseline: a minimal aiohttp reverse proxy that forwards bytes untouched.

Every figure in the benchmark is quoted as a ratio against this process. It does what any
plain reverse proxy does and nothing more: read the request body, POST it upstream, copy the
status and the content headers back, then write each chunk it reads from the upstream as soon
as it has it (``iter_any``), without parsing it.

    python bench/passthrough.py --port 8102 --upstream http://127.0.0.1:8101/v1

A request to ``/v1/X`` goes to ``<upstream>/X``. Prints one line when listening; GET /healthz
answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "upgrade",
    "proxy-connection",
    "te",
    "trailer",
    "content-encoding",
    "accept-encoding",
}
SESSION = web.AppKey("session", ClientSession)


def make_app(upstream: str) -> web.Application:
    base = upstream.rstrip("/")
    strip_v1 = base.endswith("/v1")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        sess = ClientSession(
            connector=TCPConnector(limit=0, force_close=False),
            timeout=ClientTimeout(total=None, sock_connect=10, sock_read=300),
            auto_decompress=False,
        )
        app[SESSION] = sess
        yield
        await sess.close()

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def forward(request: web.Request) -> web.StreamResponse:
        path = request.rel_url.path_qs
        if strip_v1 and path.startswith("/v1/"):
            path = path[3:]
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with request.app[SESSION].request(request.method, base + path, data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in HOP:
                    resp.headers[k] = v
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8102)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--uvloop", action="store_true", help="run on uvloop (default: asyncio's loop)")
    ap.add_argument("--cpu", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(
        make_app(args.upstream),
        host=args.host,
        port=args.port,
        access_log=None,
        print=lambda *_: print(f"passthrough listening on http://{args.host}:{args.port}", flush=True),
        backlog=1024,
    )


if __name__ == "__main__":
    main()
