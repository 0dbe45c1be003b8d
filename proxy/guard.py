"""Admission: inbound API keys, and the per-upstream limit on concurrent streams.

- Inbound keys are optional. When ``[server] inbound_keys_env`` names an environment variable
  holding comma-separated keys, every request except the health, readiness and metrics probes
  needs ``Authorization: Bearer <key>`` matching one of them, compared in constant time; anything
  else gets a 401 in OpenAI's envelope. Keys are never logged.
- ``max_concurrent_streams`` on an upstream caps its open streams; one more gets a 429 with
  ``Retry-After`` (the OpenAI SDKs honour it and retry), never a queue that hides the overload.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from .config import Config, Upstream
from .errors import ClientRequestError, ConfigError, error_response

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def inbound_keys(config: Config, environ: Mapping[str, str]) -> tuple[bytes, ...]:
    """The accepted keys. Named but unset or empty is a start-up error: never fail open."""
    env = config.server.inbound_keys_env
    if not env:
        return ()
    keys = tuple(k.strip().encode() for k in environ.get(env, "").split(",") if k.strip())
    if not keys:
        raise ConfigError(f"server.inbound_keys_env names ${env}, which is unset or empty: refusing to start "
                          "without inbound keys (unset inbound_keys_env to run without authentication)")
    return keys


def upstream_keys(config: Config, environ: Mapping[str, str]) -> None:
    """An upstream's ``api_key_env`` that names an unset or empty variable is a start-up error:
    otherwise the client's own key would go to that backend in its place."""
    for i, up in enumerate(config.upstreams):
        if up.api_key_env and not environ.get(up.api_key_env):
            raise ConfigError(
                f"upstreams.{i}.api_key_env (upstream {up.name!r}) names ${up.api_key_env}, which is unset or empty: "
                "refusing to start, so that no other key is sent to that backend in its place (set "
                f"${up.api_key_env}, or remove api_key_env to pass each client's own key through)")


def auth_middleware(keys: tuple[bytes, ...]) -> Callable[..., Any]:
    """Installed only when keys are configured (no middleware layer at all otherwise)."""
    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if request.path not in OPEN_PATHS:
            header = request.headers.get("Authorization", "")
            token = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
            ok = False
            for key in keys:  # compare with every key, so timing says nothing about which matched
                ok |= hmac.compare_digest(token, key)
            if not ok:
                return error_response(ClientRequestError(
                    "Incorrect or missing API key. Send Authorization: Bearer <key>.", status=401,
                    code="invalid_api_key"), headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return check


class StreamLimits:
    """Counts open streams per upstream; ``admit`` raises the 429 past the cap."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def admit(self, up: Upstream) -> _Admitted:
        """Count one more open stream to ``up`` (429 past its cap), until the ``with`` block ends."""
        n = self._open.get(up.name, 0)
        if up.max_concurrent_streams and n >= up.max_concurrent_streams:
            raise ClientRequestError(
                f"too many concurrent streams to upstream '{up.name}' (limit {up.max_concurrent_streams}); "
                "retry shortly", status=429, code="rate_limit_exceeded", headers={"Retry-After": "1"})
        self._open[up.name] = n + 1
        return _Admitted(self._open, up.name)

    def counts(self) -> dict[str, int]:
        """Open streams per upstream (every upstream that had one, 0 when none is open now)."""
        return dict(self._open)

    def open_count(self, name: str) -> int:
        return self._open.get(name, 0)


class _Admitted:
    """One admitted stream: leaving the ``with`` block gives its place back. A plain class, not a
    generator context manager: this runs for every stream."""

    __slots__ = ("_open", "_name")

    def __init__(self, open_: dict[str, int], name: str) -> None:
        self._open = open_
        self._name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._open[self._name] -= 1


LIMITS = web.AppKey("limits", StreamLimits)
