"""crossfeed's aiohttp app in-process on a real port (127.0.0.1, a free port), for the tests.

``running_proxy`` is the one way a test starts it: an async context manager that yields a
``ProxyHandle`` (its URL, the app, the config, the runner) and stops the app cleanly when the
block ends. ``start_proxy`` starts it without the block, for fixtures and tests that stop it at
a moment of their own (``await handle.stop()``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from crossfeed.proxy.app import create_app
from crossfeed.proxy.http.server import make_runner
from crossfeed.proxy.runtime.config import Config, load_config


@dataclass
class ProxyHandle:
    url: str
    app: web.Application
    config: Config
    runner: web.AppRunner

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    async def stop(self) -> None:
        """Stops the app: the server's own shutdown (the drain included), then cleanup."""
        await self.runner.cleanup()


def proxy_config(config: Config | Mapping[str, Any]) -> Config:
    """``config`` itself, or a Config from dotted settings (``{"upstream.base_url": ...}``)."""
    return config if isinstance(config, Config) else load_config(None, {}, dict(config))


async def start_proxy(
    config: Config | Mapping[str, Any],
    environ: dict[str, str] | None = None,
    *,
    before_start: Callable[[web.Application], None] | None = None,
    **app_kwargs: Any,
) -> ProxyHandle:
    """The app of ``config`` (or of dotted settings) serving on 127.0.0.1 on a free port;
    ``environ`` is the environment it reads keys from (none by default), ``app_kwargs`` go to
    ``create_app`` (ids, clock, ...); ``before_start`` may add to the app before it is frozen (a
    signal handler that watches requests)."""
    config = proxy_config(config)
    app = create_app(config, environ=environ or {}, **app_kwargs)
    if before_start is not None:
        before_start(app)
    runner = make_runner(app, config)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return ProxyHandle(f"http://127.0.0.1:{port}", app, config, runner)


@contextlib.asynccontextmanager
async def running_proxy(
    config: Config | Mapping[str, Any],
    environ: dict[str, str] | None = None,
    *,
    before_start: Callable[[web.Application], None] | None = None,
    **app_kwargs: Any,
) -> AsyncIterator[ProxyHandle]:
    """``start_proxy`` for the length of an ``async with`` block; stopped when it ends."""
    handle = await start_proxy(config, environ, before_start=before_start, **app_kwargs)
    try:
        yield handle
    finally:
        await handle.stop()
