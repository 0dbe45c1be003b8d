"""Response store: where crossfeed keeps Responses so that ``previous_response_id`` works.

One record is one stored response (``StoredResponse``). Three backends implement
``ResponseStore`` (the record, the error and the interface they share are in base.py);
``open_store`` here opens the configured one:

- ``sqlite`` (sqlite.py, the default): one file, ``<data_dir>/responses.sqlite3``, WAL mode. All SQLite work runs
  on one worker thread that owns the connection, so the event loop never blocks on disk.
- ``redis`` (redis.py): for several crossfeed replicas sharing conversations. Records expire with Redis
  ``EXPIRE``; ``max_count`` is enforced atomically by a Lua script over a sorted-set index.
- ``memory`` (memory.py): per process, lost on restart, always bounded (``max_count`` defaults to 10 000).
  For tests and throwaway single-process use; never the default.

Retention: every record lives ``ttl_seconds`` from the moment it is saved (default 30 days, the
OpenAI API's retention for stored responses); afterwards ``get`` answers ``None`` and the record is
purged lazily (on ``get``/``delete``) and by a sweep amortised over ``save`` calls, with bounded
work per call. Optionally ``max_count`` (all backends) and ``max_bytes`` (sqlite, memory: the sum of
the stored JSON sizes) evict the oldest-saved records first; re-saving an id makes it the newest.

Items by id: every item a record holds (its response's output items and its input items) is
indexed under (owner, item id) when the record is saved, so ``get_by_item`` (what an input
``item_reference`` resolves with) is one indexed read, never a scan. The index lives and dies
with the records: a record that expires, is evicted, deleted or re-saved leaves it in the same
operation (redis: see proxy/state/store/redis.py). An item several records hold (a conversation's
history is in every later record) resolves from the newest live one.

Background runs (``background: true``): each backend also keeps a run's event log, state record,
lease and cancel flag (the ``ResponseStore`` methods after ``close``), for the same ``ttl_seconds``:
memory.py in the class, sqlite_runs.py and redis_runs.py as mixins of their stores.

Every backend failure is raised as ``StoreError`` so the proxy can log and count it without
breaking the client's stream; a failed save is kept and retried by proxy/state/store_retry.py
(``StoreError.retryable`` says whether a retry can help).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store.base import Clock, ResponseStore, StoreError
from crossfeed.proxy.state.store.memory import MemoryStore


def open_store(config: StoreConfig, *, clock: Clock = time.time, env: Mapping[str, str] | None = None) -> ResponseStore:
    """Build the configured backend. Cheap and synchronous: nothing is opened or created until the
    first call (use ``await store.ping()`` to fail fast at startup). Raises ``StoreError`` when the
    configuration cannot work (redis backend without a URL, malformed URL)."""
    if config.backend == "memory":
        return MemoryStore(config, clock=clock)
    if config.backend == "sqlite":
        from crossfeed.proxy.state.store.sqlite import SQLiteStore

        return SQLiteStore(config, clock=clock, data_dir=config.resolved_data_dir(env))
    from crossfeed.proxy.state.store.redis import RedisStore

    url = config.resolved_redis_url(env)
    if not url:
        raise StoreError(
            f"store backend is redis but neither [store] redis_url nor ${config.redis_url_env} is set", backend="redis"
        )
    return RedisStore(config, url, clock=clock)
