"""Command line: ``crossfeed serve`` (also ``python -m proxy serve``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from .app import create_app
from .config import Config, load_config
from .errors import ConfigError
from .logs import configure_logging, log


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crossfeed", description="Streaming translation proxy between the "
                                     "OpenAI Responses API and Chat Completions API.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", type=Path, help="TOML config file (see config.example.toml)")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080; 0 picks a free port)")
    serve.add_argument("--upstream", help="backend base URL including /v1 (default http://127.0.0.1:8000/v1)")
    serve.add_argument("--upstream-api", choices=["chat", "responses"], help="the API the backend speaks")
    serve.add_argument("--upstream-api-key-env", metavar="NAME",
                       help="environment variable holding the backend's API key (default: pass the client's key)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--log-format", choices=["auto", "json", "console"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


def config_from_args(args: argparse.Namespace) -> Config:
    overrides = {
        "server.host": args.host,
        "server.port": args.port,
        "upstream.base_url": args.upstream,
        "upstream.api": args.upstream_api,
        "upstream.api_key_env": args.upstream_api_key_env,
        "logging.level": getattr(args, "log_level", None),
        "logging.format": getattr(args, "log_format", None),
    }
    return load_config(args.config, os.environ, overrides)


def serve(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"crossfeed: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logging.level, config.logging.format)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(_serve(config))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"crossfeed: cannot listen on {config.server.host}:{config.server.port}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


async def _serve(config: Config) -> None:
    app = create_app(config, environ=os.environ)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.server.host, config.server.port, shutdown_timeout=config.server.drain_seconds)
    await site.start()
    sockets = site._server.sockets if site._server else []  # noqa: SLF001 - the bound port when port=0
    port = sockets[0].getsockname()[1] if sockets else config.server.port
    ups = ", ".join(f"{u.name}={u.base_url} ({u.api})" for u in config.upstreams)
    print(f"crossfeed listening on http://{config.server.host}:{port} -> {ups}", flush=True)
    log.info("server.started", host=config.server.host, port=port, upstreams=ups)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("server.stopping")
    await runner.cleanup()
    log.info("server.stopped")
