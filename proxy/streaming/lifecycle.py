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
from crossfeed.proxy.runtime.turn_trace import shown_url
from crossfeed.proxy.streaming.relay import OpenStream
from crossfeed.proxy.upstream import base_url_hint, lacks_v1, upstream_failure

log = structlog.get_logger("crossfeed")

OPEN_STREAMS = web.AppKey("open_streams", set)
PROBES = web.AppKey("probes", dict)
PROBE_ERRORS = web.AppKey("probe_errors", dict)
PROBE_NOT_FOUND = web.AppKey("probe_not_found", dict)  # upstream name -> the hint for its 404
PROBE_INTERVAL = 20.0
PROBE_HEADERS = {"User-Agent": "crossfeed-probe"}


def probe_targets(config: Config) -> list[tuple[str, Upstream]]:
    """What the readiness probe asks: each upstream by its name; a pool's replicas each, by their
    labels (``gpu/0``), each as the upstream with that replica's ``base_url``."""
    targets: list[tuple[str, Upstream]] = []
    for up in config.upstreams:
        if len(up.replica_urls) == 1:
            targets.append((up.name, up))
        else:
            targets += [
                (f"{up.name}/{i}", up.model_copy(update={"base_url": url})) for i, url in enumerate(up.replica_urls)
            ]
    return targets


async def probe_loop(app: web.Application, config: Config, session_key: Any) -> None:
    targets = probe_targets(config)
    while True:
        session: aiohttp.ClientSession = app[session_key]
        for name, up in targets:
            try:
                async with session.get(
                    up.base_url + "/models", timeout=aiohttp.ClientTimeout(total=5), headers=PROBE_HEADERS
                ) as r:
                    await r.read()
                    status = r.status
                not_found = app.setdefault(PROBE_NOT_FOUND, {})
                if status == 404:
                    app[PROBES].pop(name, None)
                    app[PROBE_ERRORS].pop(name, None)
                    hint = await _not_found_hint(session, up)
                    if not_found.get(name) != hint:  # once, not every probe
                        log.warning("upstream.probe.not_found", upstream=name, url=up.base_url + "/models", hint=hint)
                    not_found[name] = hint
                    continue
                app[PROBES][name] = time.monotonic()
                app[PROBE_ERRORS].pop(name, None)
                not_found.pop(name, None)
            except (TimeoutError, aiohttp.ClientError) as exc:
                error = (
                    "no answer within 5s"
                    if isinstance(exc, asyncio.TimeoutError)
                    else upstream_failure(exc, up).message
                )
                app[PROBE_ERRORS][name] = error
                log.info("upstream.probe.failed", upstream=name, url=up.base_url + "/models", error=error)
            except Exception as exc:
                app[PROBE_ERRORS][name] = error = f"the probe failed: {type(exc).__name__}"
                log.warning("upstream.probe.failed", upstream=name, url=up.base_url + "/models", error=error)
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
    """The problems that make the process not ready: an upstream that has not answered a probe
    lately (a pool: none of its replicas has), or that answered its model listing with a 404."""
    now = time.monotonic()
    problems: list[str] = []
    by_upstream: dict[str, list[str]] = {}
    for name, up in probe_targets(config):
        problem = _probe_problem(app, name, up, now)
        by_upstream.setdefault(up.name, [])
        if problem is not None:
            by_upstream[up.name].append(problem)
    for up in config.upstreams:
        found = by_upstream.get(up.name, [])
        if len(found) == len(up.replica_urls):  # (a pool is ready while one replica answers)
            problems += found
    return problems


def _probe_problem(app: web.Application, name: str, up: Upstream, now: float) -> str | None:
    where = f"upstream '{name}' at {shown_url(up.base_url)}"
    hint = app.get(PROBE_NOT_FOUND, {}).get(name)
    if hint is not None:
        return f"{where} answered 404 to its model listing (GET {shown_url(up.base_url)}/models): {hint}"
    seen = app[PROBES].get(name)
    if seen is None or now - seen > 3 * PROBE_INTERVAL:
        error = app[PROBE_ERRORS].get(name)
        return f"{where} has not answered a probe (GET /models) in the last {3 * PROBE_INTERVAL:g}s" + (
            f": {error}" if error else " (not probed yet)"
        )
    return None


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
