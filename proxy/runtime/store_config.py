"""The ``[store]`` section of the configuration: which backend keeps stored responses, where, and
for how long. It lives here, on the floor, so that the configuration does not import the store;
the store (proxy/state/store/) reads it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

THIRTY_DAYS = 30 * 24 * 3600


class StoreConfig(BaseModel):
    """``[store]`` section of the crossfeed configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["sqlite", "redis", "memory"] = "sqlite"
    # SQLite directory, created when `serve` starts (it stops there if it cannot). None -> $CROSSFEED_DATA_DIR, else
    # $XDG_STATE_HOME/crossfeed, else ~/.local/state/crossfeed (%LOCALAPPDATA%\crossfeed on Windows).
    data_dir: Path | None = None
    # Redis URL (redis://, rediss://, unix://). None -> read from the env var named by redis_url_env.
    redis_url: str | None = None
    redis_url_env: str = "CROSSFEED_REDIS_URL"
    # Prefix of every Redis key; replicas that share conversations must use the same prefix.
    key_prefix: str = Field(default="crossfeed:", min_length=1)
    ttl_seconds: int = Field(default=THIRTY_DAYS, ge=1)
    max_count: int | None = Field(default=None, ge=1)
    max_bytes: int | None = Field(default=None, ge=1)
    # Minimum interval between two amortised TTL sweeps (sqlite, memory).
    sweep_interval_seconds: float = Field(default=60.0, ge=0)
    # Connect and command timeout for Redis.
    redis_timeout_seconds: float = Field(default=5.0, gt=0)
    # How long the terminal event (or a non-streamed body) waits for its response to be saved:
    # saved before the client has its answer, so another replica finds it; a slower store is
    # left to finish in the background (logged and counted), the client is not kept waiting.
    # 0: never wait (the save runs after the terminal event: a follow-up to this same process
    # still finds it, one to another replica or worker may not).
    save_timeout_seconds: float = Field(default=1.0, ge=0)
    # The longest crossfeed waits for one store operation (a read before a turn, GET/DELETE, a
    # save in the background): past it a read answers 503 store_unavailable and a save counts as
    # failed (kept for retry), so a hung store never hangs a request.
    operation_timeout_seconds: float = Field(default=10.0, gt=0)
    # Failed saves (the store down, its disk full or read-only) are kept in memory, per process,
    # and saved again in the background until the store takes them; within these bounds (the
    # oldest dropped first, logged and counted as lost). 0 keeps none. (proxy/state/store_retry.py)
    retry_max_records: int = Field(default=5000, ge=0)
    retry_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)

    @model_validator(mode="after")
    def _check_backend_options(self) -> StoreConfig:
        if self.redis_url and "@" in self.redis_url.split("://", 1)[-1].split("/", 1)[0]:
            raise ValueError(
                "redis_url must not hold credentials: put the URL in the environment "
                "variable named by redis_url_env instead"
            )
        if self.backend == "redis" and self.max_bytes is not None:
            raise ValueError(
                "max_bytes is not supported by the redis backend: bound memory with Redis's own "
                "maxmemory setting, and use ttl_seconds / max_count here"
            )
        return self

    def resolved_data_dir(self, env: Mapping[str, str] | None = None) -> Path:
        env = os.environ if env is None else env
        if self.data_dir is not None:
            return self.data_dir.expanduser()
        if env.get("CROSSFEED_DATA_DIR"):
            return Path(env["CROSSFEED_DATA_DIR"]).expanduser()
        if os.name == "nt" and env.get("LOCALAPPDATA"):
            return Path(env["LOCALAPPDATA"]) / "crossfeed"
        if env.get("XDG_STATE_HOME"):
            return Path(env["XDG_STATE_HOME"]) / "crossfeed"
        return Path("~/.local/state/crossfeed").expanduser()

    def resolved_redis_url(self, env: Mapping[str, str] | None = None) -> str | None:
        env = os.environ if env is None else env
        return self.redis_url or env.get(self.redis_url_env) or None
