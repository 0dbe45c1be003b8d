"""Where configuration values come from, before validation: the keys a TOML file sets, the
``CROSSFEED_*`` environment variables (short aliases, and any key as
``CROSSFEED_<SECTION>__<KEY>``), the short form of the inbound keys, and the dotted setting of a
value in the raw tree. proxy/runtime/config.py validates what these build."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.config_errors import Sources


def key_paths(raw: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value a parsed file sets (tables and arrays of tables walked into; a
    table itself is no value, so its unset keys stay built-in defaults)."""
    out: list[tuple[Any, ...]] = []
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for key, value in items:
        if isinstance(value, dict) or (isinstance(value, list) and value and isinstance(value[0], dict)):
            out += key_paths(value, (*prefix, key))
        else:
            out.append((*prefix, key))
    return out


def json_object(value: str, label: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigError(
            f'{label}: must be a JSON object of model names, e.g. \'{{"gpt-5.5": "qwen3-coder"}}\', got {value!r}'
        )
    return parsed


INBOUND_KEYS_VAR = "CROSSFEED_INBOUND_KEYS"


def short_inbound_keys(raw: dict[str, Any], environ: Mapping[str, str], sources: Sources, path: Path | None) -> None:
    """``$CROSSFEED_INBOUND_KEYS`` is the short form of the key list (comma-separated), as
    ``$CROSSFEED_UPSTREAM`` is of the upstream: set, it turns inbound auth on by itself. It is
    never ignored: set while ``inbound_keys_env`` names another variable, or set but empty, serve
    refuses to start, since whoever set it believes the proxy is protected by it."""
    if INBOUND_KEYS_VAR not in environ:
        return
    server = raw.setdefault("server", {})
    if not isinstance(server, dict):
        return  # the validation that follows names the bad section
    named = server.get("inbound_keys_env")
    if named not in (None, INBOUND_KEYS_VAR):
        where = sources.get(("server", "inbound_keys_env")) or (str(path) if path else "the configuration")
        raise ConfigError(
            f"${INBOUND_KEYS_VAR} is set, but server.inbound_keys_env (from {where}) names ${named}: the keys "
            f"in ${INBOUND_KEYS_VAR} would be ignored. Put the keys in ${named}, or unset one of the two"
        )
    if not environ[INBOUND_KEYS_VAR].strip(" ,"):
        raise ConfigError(
            f"${INBOUND_KEYS_VAR} is set but holds no key: refusing to start without inbound keys "
            f"(put the comma-separated client keys in it, or unset it to run without authentication)"
        )
    if named is None:
        server["inbound_keys_env"] = INBOUND_KEYS_VAR
        sources[("server", "inbound_keys_env")] = f"${INBOUND_KEYS_VAR}"


def named_variables(raw: Any) -> set[str]:
    """Variable names the configuration itself names (``*_env`` keys): never misspellings."""
    out: set[str] = set()
    if isinstance(raw, dict):
        for key, value in raw.items():
            if isinstance(value, str) and key.endswith("_env"):
                out.add(value)
            else:
                out |= named_variables(value)
    elif isinstance(raw, list):
        for value in raw:
            out |= named_variables(value)
    return out


ENV_KEYS = {
    "CROSSFEED_HOST": "server.host",
    "CROSSFEED_PORT": "server.port",
    "CROSSFEED_WORKERS": "server.workers",
    "CROSSFEED_UPSTREAM": "upstream.base_url",
    "CROSSFEED_UPSTREAM_API": "upstream.api",
    "CROSSFEED_UPSTREAM_API_KEY_ENV": "upstream.api_key_env",
    "CROSSFEED_MODEL_MAP": "upstream.model_map",
    "CROSSFEED_LOG_LEVEL": "logging.level",
    "CROSSFEED_LOG_FORMAT": "logging.format",
    "CROSSFEED_RECORD_DIR": "logging.record_dir",
    "CROSSFEED_EVENT_DIALECT": "server.event_dialect",
}


def apply_env(raw: dict[str, Any], environ: Mapping[str, str], sources: Sources) -> None:
    """Short aliases above, and any key as ``CROSSFEED_<SECTION>__<KEY>[__<KEY>]`` (``__`` = a dot);
    ``CROSSFEED_UPSTREAM__...`` sets a key on the single (or default) upstream. JSON values
    (``[...]``, ``{...}``) are parsed, so lists and maps can be given too."""
    for env, dotted in ENV_KEYS.items():
        if environ.get(env):
            value: Any = environ[env]
            if dotted == "upstream.model_map":
                value = json_object(value, f"${env}")
            sources[set_key(raw, dotted, value)] = f"${env}"
    for env, value in environ.items():
        if env.startswith("CROSSFEED_") and "__" in env and value != "":
            dotted = ".".join(part.lower() for part in env[len("CROSSFEED_") :].split("__"))
            if value[:1] in "[{":
                try:
                    value = json.loads(value)
                except ValueError:
                    raise ConfigError(f"${env}: not valid JSON") from None
            sources[set_key(raw, dotted, value)] = f"${env}"


def set_key(raw: dict[str, Any], dotted: str, value: Any) -> tuple[Any, ...]:
    """Set a dotted key; returns its resolved path. ``upstream.X`` means: on the single (or
    default, or first) upstream."""
    head, _, rest = dotted.partition(".")
    if head == "upstream":
        ups = raw.setdefault("upstreams", [{"default": True}])
        if not isinstance(ups, list) or not ups or not all(isinstance(u, dict) for u in ups):
            raise ConfigError(
                "upstreams: must be an array of tables: write [[upstreams]] (two brackets) above each "
                "backend's keys, not [upstreams]"
            )
        index = next((i for i, u in enumerate(ups) if u.get("default")), 0)
        node: dict[str, Any] = ups[index]
        path: tuple[Any, ...] = ("upstreams", index)
    else:
        node = raw.setdefault(head, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{head}: expected a table")
        path = (head,)
    *parents, last = rest.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return (*path, *rest.split("."))
