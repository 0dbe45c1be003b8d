"""Typed application keys shared by the handlers (aiohttp ``AppKey``s: no string keys)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web

from translators.ids import IdFactory

from .config import Config
from .reasoning_seal import ReasoningSeal

CONFIG = web.AppKey("config", Config)
SESSION = web.AppKey("session", aiohttp.ClientSession)
IDS = web.AppKey("ids", IdFactory)  # type: ignore[type-abstract]
CLOCK = web.AppKey("clock", Callable[[], int])  # type: ignore[arg-type]
SEAL = web.AppKey("seal", ReasoningSeal)
ENV = web.AppKey("environ", Mapping[str, str])  # type: ignore[arg-type]

MAX_NONSTREAM_BODY = 64 * 1024 * 1024
