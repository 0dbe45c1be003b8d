"""Admission: inbound API keys, and the per-upstream limit on concurrent streams.

- Inbound keys are optional. When ``[server] inbound_keys_env`` names an environment variable
  holding comma-separated keys, every request except the health, readiness and metrics probes
  needs ``Authorization: Bearer <key>`` matching one of them, compared in constant time; anything
  else gets a 401 in OpenAI's envelope. Keys are never logged.
- ``max_concurrent_streams`` on an upstream caps its open streams, and ``max_streams_per_key``
  (or a named key's own ``max_concurrent_streams``) those of one inbound key; one more gets a 429
  with ``Retry-After`` (the OpenAI SDKs honour it and retry), never a queue that hides the overload.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, ConfigError, error_response
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.observability import SUMMARY

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # and /inspector..., which checks its own key


def inbound_keys(config: Config, environ: Mapping[str, str]) -> tuple[tuple[bytes, str], ...]:
    """The accepted keys with their names: ``[[server.inbound_keys]]`` by their own names, the
    comma-separated keys of ``inbound_keys_env`` as ``key-1``, ``key-2``... Named but unset or
    empty is a start-up error: never fail open."""
    server = config.server
    keys: list[tuple[bytes, str]] = []
    for i, entry in enumerate(server.inbound_keys):
        value = environ.get(entry.key_env, "").strip()
        if not value:
            raise ConfigError(
                f"server.inbound_keys.{i}.key_env (key {entry.name!r}) names ${entry.key_env}, which "
                "is unset or empty: refusing to start without that key"
            )
        keys.append((value.encode(), entry.name))
    env = server.inbound_keys_env
    if env:
        found = [k.strip().encode() for k in environ.get(env, "").split(",") if k.strip()]
        if not found:
            raise ConfigError(
                f"server.inbound_keys_env names ${env}, which is unset or empty: refusing to start "
                "without inbound keys (unset inbound_keys_env to run without authentication)"
            )
        keys += [(k, f"key-{n}") for n, k in enumerate(found, 1)]
    names = [name for _, name in keys]
    if len(set(names)) != len(names):
        raise ConfigError(f"server.inbound_keys: key names must be unique: {names}")
    return tuple(keys)


def metrics_key(config: Config, environ: Mapping[str, str]) -> bytes | None:
    """The key ``GET /metrics`` requires (``[server] metrics_key_env``), or None. Named but unset
    or empty is a start-up error, as for the inbound keys: never fail open."""
    env = config.server.metrics_key_env
    if not env:
        return None
    value = environ.get(env, "").strip()
    if not value:
        raise ConfigError(
            f"server.metrics_key_env names ${env}, which is unset or empty: refusing to start with "
            "GET /metrics open (set it, or unset metrics_key_env)"
        )
    return value.encode()


def upstream_keys(config: Config, environ: Mapping[str, str]) -> None:
    """An upstream's ``api_key_env`` that names an unset or empty variable is a start-up error:
    otherwise the client's own key would go to that backend in its place."""
    for i, up in enumerate(config.upstreams):
        if up.api_key_env and not environ.get(up.api_key_env):
            raise ConfigError(
                f"upstreams.{i}.api_key_env (upstream {up.name!r}) names ${up.api_key_env}, which is unset or empty: "
                "refusing to start, so that no other key is sent to that backend in its place (set "
                f"${up.api_key_env}, or remove api_key_env to pass each client's own key through)"
            )


# The name of the key the current request came with (None without inbound keys). Set by the auth
# middleware; the tasks a request starts (its relay, a WebSocket's turns) see it too.
KEY_NAME: ContextVar[str | None] = ContextVar("crossfeed_key_name", default=None)


def auth_middleware(keys: tuple[tuple[bytes, str], ...]) -> Callable[..., Any]:
    """Installed only when keys are configured (no middleware layer at all otherwise)."""

    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        path = request.path
        if path not in OPEN_PATHS and not (path.startswith("/inspector") and path[10:11] in ("", "/")):
            header = request.headers.get("Authorization", "")
            token = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
            name = None
            for key, key_name in keys:  # compare with every key, so timing says nothing about which matched
                if hmac.compare_digest(token, key) and name is None:
                    name = key_name
            if name is None:
                return error_response(
                    ClientRequestError(
                        "Incorrect or missing API key. Send Authorization: Bearer <key>.",
                        status=401,
                        code="invalid_api_key",
                    ),
                    headers={"WWW-Authenticate": "Bearer"},
                )
            KEY_NAME.set(name)
            request[SUMMARY]["key"] = name
        return await handler(request)

    return check


class StreamLimits:
    """Counts open streams per upstream and per inbound key; ``admit`` raises the 429 past a cap.

    ``key_caps``: the most open streams each key name may have (absent or 0: no cap).
    ``on_change(upstream, open)``: told each upstream's new count (the metric of several workers).
    The counts are this process's: with several workers each enforces the caps on its own."""

    def __init__(
        self, key_caps: Mapping[str, int] | None = None, on_change: Callable[[str, int], None] | None = None
    ) -> None:
        self._open: dict[str, int] = {}
        self._keys: dict[str, int] = {}
        self._key_caps = {name: cap for name, cap in (key_caps or {}).items() if cap}
        self._on_change = on_change

    def admit(self, up: Upstream) -> _Admitted:
        """Count one more open stream to ``up`` and for the request's key (429 past either cap),
        until the ``with`` block ends."""
        n = self._open.get(up.name, 0)
        cap = up.stream_cap
        if cap and n >= cap:
            raise ClientRequestError(
                f"too many concurrent streams to upstream '{up.name}' (limit {cap}); retry shortly",
                status=429,
                code="rate_limit_exceeded",
                headers={"Retry-After": "1"},
            )
        key = KEY_NAME.get() if self._key_caps else None
        capped: str | None = None
        if key is not None and (cap := self._key_caps.get(key, 0)):
            held = self._keys.get(key, 0)
            if held >= cap:
                raise ClientRequestError(
                    f"too many concurrent streams for this API key ('{key}', limit {cap}); retry shortly",
                    status=429,
                    code="rate_limit_exceeded",
                    headers={"Retry-After": "1"},
                )
            self._keys[key] = held + 1
            capped = key
        self._open[up.name] = n + 1
        if self._on_change is not None:
            self._on_change(up.name, n + 1)
        return _Admitted(self, up.name, capped)

    def release(self, name: str, key: str | None) -> None:
        n = self._open[name] = self._open[name] - 1
        if key is not None:
            self._keys[key] -= 1
        if self._on_change is not None:
            self._on_change(name, n)

    def counts(self) -> dict[str, int]:
        """Open streams per upstream (every upstream that had one, 0 when none is open now)."""
        return dict(self._open)

    def open_count(self, name: str) -> int:
        return self._open.get(name, 0)

    def key_count(self, key: str) -> int:
        return self._keys.get(key, 0)


class _Admitted:
    """One admitted stream: leaving the ``with`` block gives its places back. A plain class, not a
    generator context manager: this runs for every stream."""

    __slots__ = ("_limits", "_name", "_key")

    def __init__(self, limits: StreamLimits, name: str, key: str | None) -> None:
        self._limits = limits
        self._name = name
        self._key = key

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._limits.release(self._name, self._key)


def key_stream_caps(config: Config, names: tuple[str, ...]) -> dict[str, int]:
    """Each key name's cap on open streams: its own ``max_concurrent_streams``, else the server's
    ``max_streams_per_key`` (0: none)."""
    own = {k.name: k.max_concurrent_streams for k in config.server.inbound_keys}
    default = config.server.max_streams_per_key
    return {name: (default if own.get(name) is None else own[name]) or 0 for name in names}


LIMITS = web.AppKey("limits", StreamLimits)
