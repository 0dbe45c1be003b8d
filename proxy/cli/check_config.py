"""``crossfeed check-config FILE``: what ``serve`` would do with a file, in words.

Loads the file as serve does (the environment applied), reports a bad key by its path (exit 2),
else prints the resolved routing table: where it listens, who may call it, where the store
lives, each upstream and what serve would warn about; every setting that came from no file,
variable or flag is marked ``(built-in default)``. Exit 1 when this environment lacks what the
file names (keys, a Redis URL, a writable data directory). Never prints a secret, only the names
of the variables that hold them.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.config import Config, Upstream, load_config
from crossfeed.proxy.state.store.base import StoreError


def check_config(path: Path, environ: Mapping[str, str], out: Any = None) -> int:
    out = out or sys.stdout
    if not path.is_file():
        print(f"crossfeed check-config: {path}: no such file", file=sys.stderr)
        return 2
    try:
        config = load_config(path, environ)
    except ConfigError as exc:
        print(f"crossfeed check-config: {exc}", file=sys.stderr)
        return 2
    for line in routing_table(config, path, environ):
        print(line, file=out)
    from crossfeed.proxy.cli.install_check import warning

    clash = warning()
    if clash:
        print(f"crossfeed check-config: warning: {clash}", file=sys.stderr)
    problems = environment_problems(config, environ)
    if problems:
        print(
            f"crossfeed check-config: {path} is valid, but `crossfeed serve` would refuse to start "
            "in this environment:",
            file=sys.stderr,
        )
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    search = search_problem(config, environ)
    if search:
        print(
            f"crossfeed check-config: {path} is valid and `crossfeed serve` would start, but web search "
            f"would not work: {search}",
            file=sys.stderr,
        )
        return 1
    return 0


def search_problem(config: Config, environ: Mapping[str, str]) -> str | None:
    """What stops the configured search backend from answering (its key unset, or one test
    query that fails), or None; nothing is asked when no backend is configured."""
    import asyncio

    import aiohttp

    from crossfeed.proxy.turns.hosted.search_backends import probe

    if config.web_search.backend is None:
        return None

    async def ask() -> str | None:
        async with aiohttp.ClientSession() as session:
            return await probe(session, config.web_search, environ)

    return asyncio.run(ask())


def environment_problems(config: Config, environ: Mapping[str, str]) -> list[str]:
    """What in this environment stops ``serve`` with this config (the checks it makes at start)."""
    from crossfeed.proxy.runtime.guard import inbound_keys, metrics_key, upstream_keys
    from crossfeed.proxy.state.store import open_store

    problems = []
    for check in (inbound_keys, upstream_keys, metrics_key):
        try:
            check(config, environ)
        except ConfigError as exc:
            problems.append(str(exc))
    try:
        store = open_store(config.store, env=environ)  # builds the backend object only: opens nothing
    except StoreError as exc:
        problems.append(str(exc))
    else:
        from crossfeed.proxy.state.store.sqlite import SQLiteStore

        if isinstance(store, SQLiteStore) and (message := store.unwritable_message()):  # as serve would find
            problems.append(message)
    return problems


def _secs(value: Any) -> str:
    return f"{value:g}s" if isinstance(value, int | float) else str(value)


def _env_state(name: str, environ: Mapping[str, str]) -> str:
    return f"${name} ({'set' if environ.get(name) else 'NOT SET in this environment'})"


def routing_table(config: Config, path: Path | None, environ: Mapping[str, str]) -> list[str]:
    """Human-readable summary of a resolved config. Never prints a secret, only variable names.
    A setting from no file, variable or flag is marked ``(built-in default)``, one from a variable
    or flag names it; the rest came from the file."""
    from crossfeed.proxy.cli.startup import store_location
    from crossfeed.proxy.runtime.config_sources import ENV_KEYS, INBOUND_KEYS_VAR

    src = config.origin_note
    lines = [f"{path}: valid" if path else "configuration: valid"]
    applied = sorted(k for k in [*ENV_KEYS, INBOUND_KEYS_VAR] if environ.get(k))
    if applied:
        lines.append("environment overrides applied: " + ", ".join(applied))
    lines.append("")
    lines += _server_lines(config, environ)
    lg = config.logging
    lines.append(f"logging: level {lg.level}{src('logging', 'level')}, format {lg.format}{src('logging', 'format')}")
    if lg.record_dir:
        lines.append(
            f"  recording every streamed turn to {lg.record_dir}{src('logging', 'record_dir')} "
            "(a debugging switch: every turn is written, not for production)"
        )
    lines.append(f"response store: {store_location(config, environ)}")
    lines.append("")
    lines += _upstream_lines(config, environ)
    lines.append("")
    lines += _hosted_tool_lines(config, environ)
    from crossfeed.proxy.cli.startup import startup_warnings

    warnings = startup_warnings(config)
    if warnings:
        lines.append("")
        lines.append("serve would warn:")
        lines += [f"  - {w}" for w in warnings]
    default = next((u for u in config.upstreams if u.default), None)
    star = next((u for u in config.upstreams if "*" in u.models), None)
    lines.append("")
    lines.append(
        "unknown models: "
        + (
            f"-> {default.name} (default)"
            if default
            else f"-> {star.name} (lists *)"
            if star
            else "404 model_not_found (no upstream is marked default or lists *)"
        )
    )
    return lines


def _server_lines(config: Config, environ: Mapping[str, str]) -> list[str]:
    """The listening line, then the server's limits, its inbound auth and where /metrics is."""
    src = config.origin_note
    s = config.server
    workers = getattr(s, "workers", 1)
    count = f", {s.worker_count} worker processes" + (" (auto: one per core)" if workers == "auto" else "")
    listen = f"server: listen {s.host}:{s.port}"
    said = [f"{name} {src('server', name).strip(' ()')}" for name in ("host", "port") if src("server", name)]
    listen += f" ({'; '.join(said)})" if said else ""
    lines = [listen + (count if workers != 1 else "")]
    details = [
        f"max body {getattr(s, 'max_body_bytes', '?')} bytes",
        f"drain {_secs(getattr(s, 'drain_seconds', '?'))}",
    ]
    if getattr(s, "keepalive_seconds", None) is not None:
        details.append(f"SSE keepalive every {_secs(s.keepalive_seconds)}")
    if getattr(s, "websocket", True):
        details.append(f"WebSocket mode on GET /v1/responses (connections live {_secs(s.websocket_max_seconds)})")
    else:
        details.append("WebSocket mode off (the upgrade gets 426)")
    lines.append("  " + ", ".join(details))
    lines.append(f"  inbound auth: {_inbound_auth(config, environ)}")
    if s.metrics_port is not None:
        metrics = f"on its own port {s.metrics_host or s.host}:{s.metrics_port} (not on the main port)"
    else:
        metrics = f"on the main port{src('server', 'metrics_port')}"
    if s.metrics_key_env:
        metrics += f", key from {_env_state(s.metrics_key_env, environ)}"
    else:
        metrics += ", no key"
    lines.append(f"  GET /metrics: {metrics}")
    return lines


def _inbound_auth(config: Config, environ: Mapping[str, str]) -> str:
    """Who may call: no keys (and what that means on this port), or each key's variable and caps."""
    s = config.server
    keys_env = getattr(s, "inbound_keys_env", None)
    named = getattr(s, "inbound_keys", ())
    if not keys_env and not named:
        auth = f"off (every request is accepted){config.origin_note('server', 'inbound_keys_env')}"
        if not s.loopback_only:
            auth += (
                "; this port is not loopback: allowed by [server] allow_unauthenticated"
                if s.allow_unauthenticated
                else "; this port is not loopback: serve warns"
            )
        return auth
    parts = [f"{k.name} from {_env_state(k.key_env, environ)}" for k in named]
    if keys_env:
        parts.append(
            f"key-1, key-2... from ${keys_env} (set)"
            if environ.get(keys_env)
            else f"keys from ${keys_env}, NOT SET in this environment: serve refuses to start without them"
        )
    auth = "; ".join(parts) + "; stored responses belong to the key that made them"
    caps = {k.name: k.max_concurrent_streams for k in named if k.max_concurrent_streams is not None}
    per_key = getattr(s, "max_streams_per_key", 0)
    if per_key or any(caps.values()):
        auth += "; open streams per key at most " + ", ".join(
            [*(f"{n} {c or 'unlimited'}" for n, c in caps.items()), f"others {per_key or 'unlimited'}"]
        )
    return auth


def _upstream_lines(config: Config, environ: Mapping[str, str]) -> list[str]:
    """How a model finds its upstream, then each upstream: api, URL, models, key, timeouts, the rest."""
    from crossfeed.proxy.cli.startup import DEFAULTED

    src = config.origin_note
    keys_env = getattr(config.server, "inbound_keys_env", None)
    lines = [
        "upstreams (a model goes to the first upstream listing its exact name, else the first with a "
        "matching pattern, else the default, else the first listing *):"
    ]
    if config.upstreams_defaulted:
        lines.append(
            f"  none configured: the {DEFAULTED} below is used (set [[upstreams]] base_url, --upstream or "
            "$CROSSFEED_UPSTREAM)"
        )
    for n, u in enumerate(config.upstreams, 1):
        mark = "  [default]" if u.default else ""
        at = ("upstreams", n - 1)
        lines.append(f"  {n}. {u.name}{mark}")
        lines.append(f"       api       {u.api}{src(*at, 'api')}")
        if u.pooled:
            lines += _pool_lines(u)
        else:
            lines.append(f"       base_url  {u.base_url}{src(*at, 'base_url')}")
        lines.append(f"       models    {', '.join(u.models) if u.models else '(none)'}")
        if u.model_map:
            renames = ", ".join(f"{k} -> {v}" for k, v in u.model_map.items())
            lines.append(f"       renames   {renames}")
        if u.api_key_env:
            key = f"from {_env_state(u.api_key_env, environ)}"
        elif keys_env and u.pass_client_key:
            key = "none (clients send crossfeed's inbound keys, which are never passed on)"
        elif u.pass_client_key:
            key = "the client's key is passed through"
        else:
            key = "none"
        lines.append(f"       api key   {key}")
        t = u.timeouts
        lines.append(
            f"       timeouts  connect {_secs(t.connect)}, first byte {_secs(t.first_byte)}, "
            f"idle {_secs(t.idle)}, total {_secs(t.total)}"
        )
        extras = []
        if getattr(u, "reasoning_field", None):
            extras.append(f"reasoning field {u.reasoning_field}")
        limit = getattr(u, "max_concurrent_streams", 0)
        extras.append(f"max streams {limit or 'unlimited'}" + (" on each replica" if limit and u.pooled else ""))
        if u.api == "chat":
            extras.append(f"system messages {u.system_messages}")
            extras.append(
                "tokens " + (u.tokenizer if u.tokenizer == "estimate" else f"{u.tokenizer} at {u.tokenize_endpoint}")
            )
        if getattr(u, "headers", None):
            extras.append("extra headers " + ", ".join(sorted(u.headers)))  # names only: values may be secret
        lines.append(f"       other     {'; '.join(extras)}")
    return lines


def _pool_lines(u: Upstream) -> list[str]:
    """A pool's replicas (their labels, as /readyz, metrics and x-crossfeed-replica name them;
    URLs without credentials) and how it fails over."""
    from crossfeed.proxy.runtime.turn_trace import shown_url

    retries = u.retries if u.retries is not None else len(u.replica_urls) - 1
    lines = [f"       replica   {u.name}/{i} {shown_url(url)}" for i, url in enumerate(u.replica_urls)]
    lines.append(
        f"       pool      least busy first, a conversation kept on its replica for {_secs(u.affinity_ttl_seconds)}; "
        f"before the first byte {retries} other replica{'s' if retries != 1 else ''} tried within "
        f"{_secs(u.retry_deadline_seconds)}; {u.failures_before_cooldown} failure"
        f"{'s' if u.failures_before_cooldown != 1 else ''} in a row: left alone {_secs(u.cooldown_seconds)}"
        + (f"; then the fallback upstream {u.fallback!r}" if u.fallback else "")
    )
    if u.continue_on_failure:
        times = "once" if u.max_continuations == 1 else f"up to {u.max_continuations} times"
        lines.append(
            f"       continue  an answer whose replica dies mid-text or mid-reasoning goes on on another replica "
            f"(a whole answer is asked again), {times} a turn; "
            f"prefill: {u.prefill}, reasoning prefill: {u.reasoning_prefill}"
        )
    return lines


def _hosted_tool_lines(config: Config, environ: Mapping[str, str]) -> list[str]:
    """Web search's backend and remote MCP's allowed servers, or that they are off."""
    ws = config.web_search
    mcp = config.mcp
    return [
        "web search: "
        + (
            "off (hosted web_search tools are dropped and logged)"
            if ws.backend is None
            else f"{ws.backend} at {ws.endpoint}"
            + (f", key {_env_state(ws.api_key_env, environ)}" if ws.api_key_env else "")
            + f"; {ws.max_results} results, {ws.max_searches} searches a response"
        ),
        "remote MCP: "
        + (
            "off (no allowed_servers: an mcp tool in a request is a 400)"
            if not mcp.allowed_servers
            else "servers matching "
            + ", ".join(mcp.allowed_servers)
            + f"; calls time out after {_secs(mcp.call_timeout_seconds)}, {mcp.max_calls} a response"
        ),
    ]
