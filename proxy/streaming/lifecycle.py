"""Readiness and graceful shutdown.

Readiness (``GET /readyz``): ready once the configuration is loaded, the response store has
answered since start, and every upstream answered a probe (``GET <base_url>/models``; any HTTP
answer but a 404 counts: the backend is up) within the last ``3 x probe interval``. A 404 there
is a base URL the backend does not serve its API at (most often one without ``/v1``): not ready,
with that hint (and, when ``<base_url>/v1/models`` answers, the URL that would do). Not ready ->
503 with the reasons. A store that fails after start (saves or reads) leaves the process ready but
``degraded``, its state in the answer's ``store`` (proxy/state/store_retry.py ``readiness``).

Shutdown (SIGTERM): the listener closes first (no new connections); open streams get
``[server] drain_seconds`` to finish on their own; those still open are then ended with a proper
terminal event (``response.failed`` / a chat error frame) rather than a cut connection, upstream
connections are closed, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from crossfeed.proxy.keys import CONFIG
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.streaming.relay import OpenStream
from crossfeed.proxy.upstream import base_url_hint, lacks_v1, upstream_failure

log = structlog.get_logger("crossfeed")

OPEN_STREAMS = web.AppKey("open_streams", set)
PROBES = web.AppKey("probes", dict)
PROBE_ERRORS = web.AppKey("probe_errors", dict)
PROBE_NOT_FOUND = web.AppKey("probe_not_found", dict)  # upstream name -> the hint for its 404
PROBE_INTERVAL = 20.0
PROBE_HEADERS = {"User-Agent": "crossfeed-probe"}


async def probe_loop(app: web.Application, config: Config, session_key: Any) -> None:
    while True:
        session: aiohttp.ClientSession = app[session_key]
        for up in config.upstreams:
            try:
                async with session.get(
                    up.base_url + "/models", timeout=aiohttp.ClientTimeout(total=5), headers=PROBE_HEADERS
                ) as r:
                    await r.read()
                    status = r.status
                not_found = app.setdefault(PROBE_NOT_FOUND, {})
                if status == 404:
                    app[PROBES].pop(up.name, None)
                    app[PROBE_ERRORS].pop(up.name, None)
                    hint = await _not_found_hint(session, up)
                    if not_found.get(up.name) != hint:  # once, not every probe
                        log.warning(
                            "upstream.probe.not_found", upstream=up.name, url=up.base_url + "/models", hint=hint
                        )
                    not_found[up.name] = hint
                    continue
                app[PROBES][up.name] = time.monotonic()
                app[PROBE_ERRORS].pop(up.name, None)
                not_found.pop(up.name, None)
            except (TimeoutError, aiohttp.ClientError) as exc:
                error = (
                    "no answer within 5s"
                    if isinstance(exc, asyncio.TimeoutError)
                    else upstream_failure(exc, up).message
                )
                app[PROBE_ERRORS][up.name] = error
                log.info("upstream.probe.failed", upstream=up.name, url=up.base_url + "/models", error=error)
            except Exception as exc:
                app[PROBE_ERRORS][up.name] = error = f"the probe failed: {type(exc).__name__}"
                log.warning("upstream.probe.failed", upstream=up.name, url=up.base_url + "/models", error=error)
        await asyncio.sleep(PROBE_INTERVAL)


async def _not_found_hint(session: aiohttp.ClientSession, up: Upstream) -> str:
    """The hint for a model listing that answered 404: ``base_url_hint``, and the URL to use when
    ``<base_url>/v1/models`` answers."""
    hint = base_url_hint(up)
    if lacks_v1(up):
        url = up.base_url.rstrip("/") + "/v1"
        try:
            async with session.get(url + "/models", timeout=aiohttp.ClientTimeout(total=5), headers=PROBE_HEADERS) as r:
                await r.read()
                if r.status < 400:
                    hint += f" ({url}/models answers: set base_url to {url})"
        except (TimeoutError, aiohttp.ClientError):
            pass
    return hint


def probe_ctx(config: Config, session_key: Any) -> Any:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        app[PROBES] = {}
        app[PROBE_ERRORS] = {}
        app[PROBE_NOT_FOUND] = {}
        task = asyncio.get_running_loop().create_task(probe_loop(app, config, session_key))
        yield
        task.cancel()

    return ctx


def readiness(app: web.Application, config: Config) -> list[str]:
    now = time.monotonic()
    problems = []
    for up in config.upstreams:
        hint = app.get(PROBE_NOT_FOUND, {}).get(up.name)
        if hint is not None:
            problems.append(
                f"upstream '{up.name}' at {up.base_url} answered 404 to its model listing (GET {up.base_url}/models): "
                f"{hint}"
            )
            continue
        seen = app[PROBES].get(up.name)
        if seen is None or now - seen > 3 * PROBE_INTERVAL:
            error = app[PROBE_ERRORS].get(up.name)
            problems.append(
                f"upstream '{up.name}' at {up.base_url} has not answered a probe (GET /models) in the "
                f"last {3 * PROBE_INTERVAL:g}s" + (f": {error}" if error else " (not probed yet)")
            )
    return problems


async def drain(app: web.Application) -> None:
    """on_shutdown: wait for open streams, then end the rest properly."""
    streams: set[OpenStream] = app[OPEN_STREAMS]
    seconds = app[CONFIG].server.drain_seconds
    if streams:
        log.info("server.draining", open_streams=len(streams), seconds=seconds)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while streams and loop.time() < deadline:
        await asyncio.sleep(0.05)
    if streams:
        log.info("server.ending_streams", open_streams=len(streams))
        for handle in list(streams):
            handle.end()
        end_by = loop.time() + 5
        while streams and loop.time() < end_by:
            await asyncio.sleep(0.02)
