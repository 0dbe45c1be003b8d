"""Configuration: one validated, frozen object built once at start-up.

Sources, later ones winning: the TOML file (``--config``), ``CROSSFEED_*`` environment variables,
then command-line flags. Every model forbids unknown keys, so a misspelt key fails at start-up
with its dotted path. Secrets are never written inline: the file names environment variables
(``api_key_env``), read once here.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from crossfeed.proxy.errors import ConfigError
from crossfeed.proxy.runtime.allocator import DEFAULT_RETAIN_MB
from crossfeed.proxy.runtime.collector import DEFAULT_GC_YOUNG
from crossfeed.proxy.runtime.config_errors import Sources, explain, misspelt_variables, source_of
from crossfeed.proxy.runtime.config_sources import (
    ENV_KEYS,
    apply_env,
    json_object,
    key_paths,
    named_variables,
    set_key,
    short_inbound_keys,
)
from crossfeed.proxy.runtime.images_config import ImagesConfig
from crossfeed.proxy.runtime.inspector_config import InspectorConfig
from crossfeed.proxy.runtime.pool_config import PoolKeys
from crossfeed.proxy.runtime.runs_config import Runs
from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.translators.options import EVENT_NAMES, BackendProfile, EventDialect, EventNames

MAX_WORKERS = 256


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Model):
    connect: float = Field(10.0, gt=0, description="seconds to open the upstream connection")
    first_byte: float = Field(600.0, gt=0, description="seconds until the upstream's response headers")
    idle: float = Field(300.0, gt=0, description="seconds allowed between two upstream chunks")
    total: float = Field(3600.0, gt=0, description="seconds for the whole upstream request")


class Upstream(PoolKeys):
    """One backend; its pool keys (``base_urls``, failover, continuation) and affinity hints are ``PoolKeys``'."""

    name: str = "default"
    base_url: str = "http://127.0.0.1:8000/v1"
    api: Literal["chat", "responses"] = "chat"
    api_key_env: str | None = None
    pass_client_key: bool = True
    models: tuple[str, ...] = ("*",)
    default: bool = False
    model_map: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    reasoning_field: str = "reasoning_content"
    max_tokens_field: Literal["max_tokens", "max_completion_tokens", "both"] = "both"
    system_role: Literal["system", "developer"] = "system"
    max_concurrent_streams: int = Field(0, ge=0, description="0 = unlimited")
    think_tags: bool = Field(False, description="content may open with <think>...</think> reasoning")
    tool_markup: Literal["hermes", "qwen3_coder", "mistral"] | None = Field(
        None, description="tool calls the server writes as markup in content (no tool parser): their dialect"
    )
    min_output_tokens: int = Field(
        16, ge=1, description="api = responses: the smallest max_output_tokens the server accepts (OpenAI: 16)"
    )
    normalize_stream: bool = Field(
        False, description="api = responses: re-emit the server's stream as a strict one (numbering, ids, done events)"
    )
    system_messages: Literal["merge", "keep", "user"] = Field(
        "merge",
        description="system/developer messages after the first: merged into one leading system message, "
        "kept in place, or sent as user messages",
    )
    compaction_prompt: str | None = Field(None, min_length=1, description="the prompt asking for a compaction summary")
    tokenizer: Literal["estimate", "vllm", "llama.cpp"] = Field(
        "estimate", description="how input tokens are counted: the documented estimate, or the server's /tokenize"
    )
    tokenize_url: str | None = Field(
        None, description="the tokenizer's URL (default: base_url without /v1 + /tokenize)"
    )
    context_window: int = Field(
        0, ge=0, description="the backend's context in tokens (0 = unknown): a longer compaction request is a 400"
    )
    reasoning_effort_map: dict[str, str] = Field(
        default_factory=dict,
        description='api = chat: reasoning.effort values -> what this backend accepts ("omit": not sent)',
    )
    drop_params: tuple[str, ...] = Field(
        (),
        description="api = responses: chat request fields the backend lacks (seed, logit_bias, ...) that are "
        "dropped and logged instead of answered with a 400",
    )
    # A pool of replicas (base_urls, retries, ...) and affinity hints: proxy/runtime/pool_config.py.

    @field_validator("base_url", "tokenize_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @cached_property
    def pooled(self) -> bool:
        """Calls go through its pool (proxy/runtime/pool.py): more than one replica, or a fallback."""
        return len(self.base_urls) > 1 or self.fallback is not None

    @cached_property
    def stream_cap(self) -> int:
        """Open streams at most (0: no cap): ``max_concurrent_streams`` on each replica."""
        return self.max_concurrent_streams * len(self.replica_urls)

    @property
    def replica_urls(self) -> tuple[str, ...]:
        """Every replica's base URL (one: ``base_url``)."""
        return self.base_urls or (self.base_url,)

    @property
    def tokenize_endpoint(self) -> str:
        """Where the server's tokenizer answers: ``tokenize_url``, or the server root + /tokenize."""
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        return self.tokenize_url or root + "/tokenize"

    @model_validator(mode="after")
    def _dialect_fits_the_api(self) -> Upstream:
        """A switch for the other API's streams would be silently ignored: refuse it instead."""
        wrong: list[str]
        if self.api == "chat":
            wrong = [k for k in ("normalize_stream", "min_output_tokens", "drop_params") if k in self.model_fields_set]
        else:
            wrong = [k for k in ("think_tags", "tool_markup", "reasoning_effort_map") if k in self.model_fields_set]
        if wrong:
            other = "responses" if self.api == "chat" else "chat"
            raise ValueError(
                f'{", ".join(wrong)} only applies to api = "{other}" upstreams (this one is api = "{self.api}")'
            )
        misplaced = self.pool_keys_misplaced(self.api)
        if misplaced:
            raise ValueError(misplaced)
        return self

    @cached_property
    def profile(self) -> BackendProfile:
        """The backend's dialect, as the translators take it (translators/options.py)."""
        return BackendProfile(
            reasoning_field=self.reasoning_field,
            max_tokens_field=self.max_tokens_field,
            system_role=self.system_role,
            system_placement=self.system_messages,
            compaction_prompt=self.compaction_prompt,
            think_tags=self.think_tags,
            tool_markup=self.tool_markup,
            normalize_stream=self.normalize_stream,
            min_output_tokens=self.min_output_tokens,
            drop_params=self.drop_params,
            reasoning_effort_map=tuple(self.reasoning_effort_map.items()),
        )

    def matches_pattern(self, model: str) -> bool:
        """``model`` matches one of the glob patterns listed here, the bare ``*`` aside."""
        return any(p != "*" and fnmatch.fnmatchcase(model, p) for p in self.models if any(c in p for c in "*?["))


class InboundKey(_Model):
    """One client key: its name (what logs, metrics and stored responses carry) and the variable
    holding it (the key itself is never in the file)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    key_env: str = Field(min_length=1)
    max_concurrent_streams: int | None = Field(
        None, ge=0, description="this key's open streams at most (0 = unlimited; default: server.max_streams_per_key)"
    )
    event_dialect: EventDialect | None = Field(
        None, description="the event names this key's clients read (default: server.event_dialect)"
    )
    requests_per_minute: int | None = Field(
        None,
        ge=0,
        description="this key's requests a minute (0 = unlimited; default: server.requests_per_minute_per_key)",
    )
    tokens_per_minute: int | None = Field(
        None, ge=0, description="this key's tokens a minute (0 = unlimited; default: server.tokens_per_minute_per_key)"
    )


class Server(_Model):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0)
    allocator_retain_mb: int = Field(
        DEFAULT_RETAIN_MB,
        ge=0,
        le=1024,
        description="freed memory (MiB) glibc keeps for the next request instead of returning it, so a large "
        "body's parse faults no pages in (0: glibc's own thresholds; proxy/runtime/allocator.py)",
    )
    gc_young_threshold: int = Field(
        DEFAULT_GC_YOUNG,
        ge=0,
        le=10_000_000,
        description="net allocations between two passes of the cyclic collector over young objects (0: Python's "
        'own threshold); the start-up heap is frozen either way (docs/DESIGN.md, "Collector passes")',
    )
    inbound_keys_env: str | None = None
    inbound_keys: tuple[InboundKey, ...] = Field(
        (), description="named client keys ([[server.inbound_keys]]); with inbound_keys_env, theirs come first"
    )
    drain_seconds: float = Field(20.0, ge=0)
    keepalive_seconds: float = Field(15.0, gt=0, description="SSE comment sent after this much upstream silence")
    max_header_bytes: int = Field(16384, ge=1024, description="longest request line or header field")
    max_headers: int = Field(100, ge=8, description="most request headers")
    websocket: bool = Field(True, description="WebSocket mode on GET /v1/responses (false: 426, clients use HTTP)")
    websocket_max_seconds: float = Field(3600.0, gt=0, description="a WebSocket connection's lifetime")
    requests_per_minute_per_key: int = Field(
        0, ge=0, description="requests a minute each inbound key may make (0 = unlimited); shared through the store"
    )
    tokens_per_minute_per_key: int = Field(
        0, ge=0, description="tokens a minute each inbound key may use (0 = unlimited); shared through the store"
    )
    websocket_max_streams: int = Field(4, ge=1, description="responses a WebSocket runs or queues at once")
    max_streams_per_key: int = Field(
        0, ge=0, description="open streams one inbound key may have (0 = unlimited); per worker process"
    )
    event_dialect: EventDialect = Field(
        "openai",
        description="the Responses event names clients read: OpenAI's (response.reasoning_text.delta/.done), "
        "or open_responses (response.reasoning.delta/.done, the Open Responses specification's)",
    )
    workers: int | Literal["auto"] = Field(1, description="worker processes serving the port (auto: one per core)")
    allow_unauthenticated: bool = Field(
        False, description="listening beyond loopback with no inbound keys is intended (no start-up warning)"
    )
    metrics_key_env: str | None = Field(
        None, min_length=1, description="variable holding the key GET /metrics then requires (Bearer)"
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="serve GET /metrics on this port instead of the main one"
    )
    metrics_host: str | None = Field(None, min_length=1, description="address of the metrics port (default: host)")

    @field_validator("workers", mode="before")
    @classmethod
    def _check_workers(cls, value: Any) -> int | str:
        if value == "auto":
            return value
        try:
            count = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
        except ValueError:
            count = None
        if count is None or not 1 <= count <= MAX_WORKERS:
            raise ValueError(
                f'must be a number of processes from 1 to {MAX_WORKERS}, or "auto" (one per core); got {value!r}'
            )
        return count

    @model_validator(mode="after")
    def _metrics_listener(self) -> Server:
        if self.metrics_host is not None and self.metrics_port is None:
            raise ValueError("metrics_host needs metrics_port (the port /metrics is served on there)")
        if self.metrics_port is not None and self.metrics_port == self.port:
            raise ValueError(
                f"metrics_port {self.metrics_port} is the main port: leave it unset to serve /metrics there"
            )
        return self

    @cached_property
    def _key_events(self) -> dict[str, EventNames]:
        return {k.name: EVENT_NAMES[k.event_dialect] for k in self.inbound_keys if k.event_dialect is not None}

    def event_names(self, key: str | None) -> EventNames:
        """The event names for a client of the inbound key named ``key`` (None or "": no key):
        that key's own ``event_dialect``, else the server's. Read once per stream."""
        return (self._key_events.get(key) if key else None) or EVENT_NAMES[self.event_dialect]

    @property
    def loopback_only(self) -> bool:
        """The main port is reachable from this machine only."""
        return is_loopback(self.host)

    @property
    def worker_count(self) -> int:
        """``workers`` with ``auto`` resolved: the cores this process may run on."""
        if self.workers != "auto":
            return int(self.workers)
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        return max(1, min(cores, MAX_WORKERS))


def is_loopback(host: str) -> bool:
    """``host`` is a loopback address (or ``localhost``): nothing outside this machine reaches it."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


class Logging(_Model):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"
    debug_max_chars: int = Field(
        2000, ge=100, description="debug lines: a string (body field, chunk) longer than this is cut"
    )
    record_dir: str | None = Field(
        None,
        min_length=1,
        description="write each streamed turn (the backend's raw stream, the client's request and the events "
        "sent) to a directory of its own here: `crossfeed translate` replays it; a debugging switch",
    )


class Reasoning(_Model):
    key_env: str = "CROSSFEED_REASONING_KEY"


SEARCH_URLS = {"brave": "https://api.search.brave.com/res/v1/web/search", "tavily": "https://api.tavily.com/search"}


class WebSearch(_Model):
    """The search service crossfeed runs the hosted ``web_search`` tool on (proxy/turns/hosted/search_backends.py)."""

    backend: Literal["searxng", "brave", "tavily"] | None = Field(
        None, description="unset: hosted search tools are dropped and logged"
    )
    url: str | None = Field(
        None, description="searxng: its base URL; brave/tavily: their API (default: the public one)"
    )
    api_key_env: str | None = Field(None, description="env var holding the search API's key (brave, tavily)")
    max_results: int = Field(5, ge=1, le=20)
    timeout_seconds: float = Field(10.0, gt=0, description="one search")
    max_searches: int = Field(5, ge=1, le=50, description="searches in one response")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/") if v else v

    @model_validator(mode="after")
    def _needs(self) -> WebSearch:
        if self.backend == "searxng" and not self.url:
            raise ValueError('backend "searxng" needs url (the SearXNG instance, e.g. http://127.0.0.1:8888)')
        if self.backend in ("brave", "tavily") and not self.api_key_env:
            raise ValueError(f'backend "{self.backend}" needs api_key_env (the env var holding its API key)')
        return self

    @property
    def endpoint(self) -> str:
        if self.backend == "searxng":
            return f"{self.url}/search"
        return self.url or SEARCH_URLS.get(self.backend or "", "")


class Mcp(_Model):
    """Remote MCP servers crossfeed may call for the hosted ``mcp`` tool (proxy/turns/hosted/mcp.py)."""

    allowed_servers: tuple[str, ...] = Field(
        (), description="shell-style patterns matched against the whole server_url; none: no MCP server is called"
    )
    call_timeout_seconds: float = Field(60.0, gt=0, description="one listing or one call")
    max_calls: int = Field(20, ge=1, le=200, description="MCP calls in one response")
    max_output_bytes: int = Field(65536, ge=1024, description="a call's output beyond this is cut")


class CodexModel(_Model):
    """What ``GET /v1/models`` tells Codex about one model (its catalog entry, proxy/http/codex_catalog.py)."""

    context_window: int | None = Field(
        None, gt=0, description="tokens (default: the upstream's context_window, else 128000)"
    )
    apply_patch: Literal["freeform", "function", "none"] = Field(
        "freeform", description="how Codex offers apply_patch: a custom (freeform) tool, a function, or not at all"
    )
    reasoning_levels: tuple[Literal["minimal", "low", "medium", "high", "xhigh"], ...] = ("low", "medium", "high")
    default_reasoning: Literal["minimal", "low", "medium", "high", "xhigh"] = "medium"
    display_name: str | None = None
    description: str = "A model served through crossfeed."
    instructions: str | None = Field(
        None,
        min_length=1,
        description="the base instructions Codex sends with this "
        "model (default: crossfeed's short coding-agent prompt)",
    )


class Config(_Model):
    server: Server = Field(default_factory=Server)
    logging: Logging = Field(default_factory=Logging)
    reasoning: Reasoning = Field(default_factory=Reasoning)
    web_search: WebSearch = Field(default_factory=WebSearch)
    mcp: Mcp = Field(default_factory=Mcp)
    images: ImagesConfig = Field(default_factory=ImagesConfig)
    upstreams: tuple[Upstream, ...] = (Upstream(default=True),)
    store: StoreConfig = Field(default_factory=StoreConfig)
    runs: Runs = Field(default_factory=Runs)
    inspector: InspectorConfig = Field(default_factory=InspectorConfig)
    codex_models: dict[str, CodexModel] = Field(
        default_factory=dict, description="per-model entries of the catalog Codex reads from GET /v1/models"
    )
    # Where each setting came from (a key path -> "$VAR", "--flag" or the file), set by load_config.
    _origins: dict[tuple[Any, ...], str] = PrivateAttr(default_factory=dict)
    _file: str | None = PrivateAttr(None)  # the file load_config read, if any

    def origin(self, *path: Any) -> str:
        """Where the setting at ``path`` (``"server", "port"``) came from: the variable or flag
        that set it or one of its parents, the file, or ``built-in default``."""
        for n in range(len(path), 0, -1):
            found = self._origins.get(tuple(path[:n]))
            if found:
                return found
        return "built-in default"

    def origin_note(self, *path: Any) -> str:
        """`` (built-in default)`` or `` (from $VAR)``/`` (from --flag)`` for the setting at
        ``path``; nothing for one the file set."""
        origin = self.origin(*path)
        if origin == "built-in default":
            return f" ({origin})"
        return "" if origin == self._file else f" (from {origin})"

    @property
    def upstreams_defaulted(self) -> bool:
        """No upstream was configured anywhere: the one built-in default upstream is used."""
        return not any(key[0] == "upstreams" for key in self._origins)

    def base_url_defaulted(self, index: int) -> bool:
        """The ``index``-th upstream's base_url was set nowhere (the built-in 127.0.0.1:8000/v1);
        a pool's comes from its ``base_urls``."""
        if self.upstreams[index].base_urls:
            return False
        return self.origin("upstreams", index, "base_url") == "built-in default"

    @model_validator(mode="after")
    def _check_upstreams(self) -> Config:
        if not self.upstreams:
            raise ValueError("at least one [[upstreams]] entry is required")
        names = [u.name for u in self.upstreams]
        if len(set(names)) != len(names):
            raise ValueError(f"upstream names must be unique: {names}")
        if sum(u.default for u in self.upstreams) > 1:
            raise ValueError("at most one upstream may be marked default = true")
        by_name = {u.name: u for u in self.upstreams}
        for i, u in enumerate(self.upstreams):
            if u.fallback is None:
                continue
            other = by_name.get(u.fallback)
            if other is None or other is u:
                raise ValueError(
                    f"upstreams.{i}.fallback = {u.fallback!r} (upstream {u.name!r}) must name another upstream: "
                    f"one of {[n for n in names if n != u.name]}"
                )
            if other.api != u.api:
                raise ValueError(
                    f"upstreams.{i}.fallback = {u.fallback!r} (upstream {u.name!r}) speaks api = {other.api!r}, "
                    f"this one api = {u.api!r}: a fallback must speak the same API"
                )
        if self.server.workers != 1 and self.store.backend == "memory":
            raise ValueError(
                f'server.workers = {self.server.workers!r} with store.backend = "memory": each worker '
                "would keep its own responses and a follow-up on another worker would not find them; "
                "use the sqlite (default) or redis store, or one worker"
            )
        if self.server.workers != 1 and self.inspector.enabled:
            raise ValueError(
                f"server.workers = {self.server.workers!r} with inspector.enabled: the inspector keeps its "
                "turns in its process's memory, so a page would see one worker's turns; inspect with one worker"
            )
        return self

    @cached_property
    def _routes(self) -> dict[str, Upstream | None]:
        return {}

    def route(self, model: str) -> Upstream | None:
        """The upstream serving ``model``, most specific first: an upstream that lists the exact
        name, then one with a matching pattern (``deepseek-*``), then the one marked default,
        then one that lists ``*`` (every upstream does unless it names its models). Within each
        step the first upstream in the file wins. So a catch-all upstream listed first never
        hides a narrower one listed after it. Memoised (bounded): the matching runs once per
        distinct model name."""
        routes = self._routes
        if model in routes:
            return routes[model]
        found = (
            next((u for u in self.upstreams if model in u.models), None)
            or next((u for u in self.upstreams if u.matches_pattern(model)), None)
            or next((u for u in self.upstreams if u.default), None)
            or next((u for u in self.upstreams if "*" in u.models), None)
        )
        if len(routes) < 1024:
            routes[model] = found
        return found


def load_config(
    path: Path | None,
    environ: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Config:
    """Read, merge and validate. Raises ConfigError naming the bad key and where its value came
    from (the file, a variable, or the flag ``labels`` names for an override)."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    from_file = {key: str(path) for key in key_paths(raw)}
    sources: Sources = {}
    apply_env(raw, environ, sources)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            if dotted == "upstream.model_map" and isinstance(value, str):
                value = json_object(value, (labels or {}).get(dotted) or dotted)
            sources[set_key(raw, dotted, value)] = (labels or {}).get(dotted) or f"the setting {dotted}"
    short_inbound_keys(raw, environ, sources, path)
    misspelt = misspelt_variables(environ, ENV_KEYS, named_variables(raw))
    if misspelt:
        raise ConfigError("invalid configuration: unknown environment variables\n" + "\n".join(misspelt))
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            name = ".".join(str(p) for p in loc) or "(top level)"
            lines.append(f"  {name} ({source_of(loc, sources, path)}): {explain(err, Config)}")
        raise ConfigError("invalid configuration:\n" + "\n".join(lines)) from None
    config._origins = {**from_file, **sources}
    config._file = str(path) if path is not None else None
    return config
