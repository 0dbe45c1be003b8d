"""Typed application keys shared by the handlers (aiohttp ``AppKey``s: no string keys)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web

from crossfeed.proxy.runtime.config import Config
from crossfeed.proxy.runtime.pool import Pool
from crossfeed.proxy.runtime.tracing import Tracer
from crossfeed.proxy.state.reasoning_seal import ReasoningSeal
from crossfeed.translators.ids import IdFactory

CONFIG = web.AppKey("config", Config)
SESSION = web.AppKey("session", aiohttp.ClientSession)
IDS = web.AppKey("ids", IdFactory)
# Not classes: the type is given as the key's type argument (aiohttp reads it from there).
CLOCK = web.AppKey[Callable[[], int]]("clock")
SEAL = web.AppKey("seal", ReasoningSeal)
ENV = web.AppKey[Mapping[str, str]]("environ")
POOLS = web.AppKey[Mapping[str, Pool]]("pools")  # pooled upstreams' replicas, by name (proxy/runtime/pool.py)
TRACER = web.AppKey("tracer", Tracer)  # OpenTelemetry: untraced unless OTEL_* ask (proxy/runtime/tracing.py)

MAX_NONSTREAM_BODY = 64 * 1024 * 1024
