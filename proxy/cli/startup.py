"""What crossfeed says about itself when it starts (and ``check-config`` about a file): the
listening line, where the store lives, and the warnings an operator must not miss.

Every setting that came from no file, variable or flag is called a ``built-in default`` here, so
that a proxy running on defaults nobody chose (an upstream on 127.0.0.1:8000, a store in the home
directory) says so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import structlog

from crossfeed.proxy.runtime.config import Config
from crossfeed.proxy.runtime.config_sources import INBOUND_KEYS_VAR
from crossfeed.proxy.runtime.turn_trace import shown_url

log = structlog.get_logger("crossfeed")

DEFAULTED = "built-in default"


def store_location(config: Config, environ: Mapping[str, str]) -> str:
    """Where stored responses live, with where that choice came from. Never a credential: a Redis
    URL is shown without its user and password."""
    store = config.store
    backend = store.backend + config.origin_note("store", "backend")
    if store.backend == "sqlite":
        from crossfeed.proxy.state.store.sqlite import FILENAME

        where = store.resolved_data_dir(environ) / FILENAME
        if store.data_dir is not None:
            source = config.origin_note("store", "data_dir")
        elif environ.get("CROSSFEED_DATA_DIR"):
            source = " (from $CROSSFEED_DATA_DIR)"
        else:
            source = f" ({DEFAULTED}: shared by every crossfeed this user runs without [store] data_dir)"
        return f"{backend} at {where}{source}"
    if store.backend == "redis":
        url = store.resolved_redis_url(environ)
        if not url:
            return f"{backend}, no URL (${store.redis_url_env} is not set)"
        parts = urlsplit(url)
        shown = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"
        source = "[store] redis_url" if store.redis_url else f"${store.redis_url_env}"
        return f"{backend} at {shown} (from {source}), key prefix {store.key_prefix!r}"
    return f"{backend}: this process only, lost on restart"


def upstream_summary(config: Config) -> str:
    ups = ", ".join(
        f"{u.name}={shown_url(u.base_url)}"
        + (f" +{len(u.base_urls) - 1} replica{'s' if len(u.base_urls) > 2 else ''}" if len(u.base_urls) > 1 else "")
        + f" ({u.api})"
        + (f" [{DEFAULTED}]" if config.base_url_defaulted(i) else "")
        for i, u in enumerate(config.upstreams)
    )
    return ups + (" (no upstream configured)" if config.upstreams_defaulted else "")


def listening_line(config: Config, port: int, environ: Mapping[str, str], workers: int = 1) -> str:
    """The one line serve prints once it listens (the tests and scripts read the URL from it)."""
    count = f" ({workers} workers)" if workers > 1 else ""
    return (
        f"crossfeed listening on http://{config.server.host}:{port} -> {upstream_summary(config)}; "
        f"store: {store_location(config, environ)}{count}"
    )


def announce(config: Config, port: int, environ: Mapping[str, str], workers: int = 1, **fields: Any) -> None:
    """Once serve listens: each warning on stderr (and in the log), then the listening line."""
    for warning in startup_warnings(config, port):
        print(f"crossfeed: warning: {warning}", file=sys.stderr, flush=True)
        log.warning("server.warning", message=warning)
    print(listening_line(config, port, environ, workers), flush=True)
    log.info(
        "server.started",
        host=config.server.host,
        port=port,
        upstreams=upstream_summary(config),
        store=store_location(config, environ),
        workers=workers,
        **fields,
    )


def startup_warnings(config: Config, port: int | None = None) -> list[str]:
    """What start-up warns about: a port open to the network with no inbound keys, metrics any
    client can read, and an upstream nobody configured. ``port``: the one listening (port 0 resolved)."""
    server = config.server
    where = f"{server.host}:{server.port if port is None else port}"
    keys = bool(server.inbound_keys_env or server.inbound_keys)
    out = []
    if not keys and not server.loopback_only and not server.allow_unauthenticated:
        out.append(
            f"listening on {where} with no inbound keys: anyone who can reach this port can use "
            f"your backends (and the keys crossfeed sends them). Set ${INBOUND_KEYS_VAR} (comma-separated client "
            "keys) or [[server.inbound_keys]], listen on 127.0.0.1, or set [server] allow_unauthenticated = true "
            "if something in front of crossfeed checks the clients"
        )
    if keys and not server.loopback_only and server.metrics_port is None and not server.metrics_key_env:
        out.append(
            f"GET /metrics answers without a key on {where} (model names, key names, "
            "traffic): set [server] metrics_key_env to require one, or metrics_port to serve it on a port "
            "of its own"
        )
    if config.upstreams_defaulted:
        up = config.upstreams[0]
        out.append(
            f"no upstream is configured: using the {DEFAULTED} {up.base_url} ({up.api}); set --upstream, "
            "$CROSSFEED_UPSTREAM or [[upstreams]] base_url"
        )
    else:
        out += [
            f"upstream {up.name!r} has no base_url: using the {DEFAULTED} {up.base_url}"
            for i, up in enumerate(config.upstreams)
            if config.base_url_defaulted(i)
        ]
    return out
