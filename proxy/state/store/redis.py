"""Redis backend, for several crossfeed replicas sharing one Redis.

Layout (``P`` = ``key_prefix``):

- ``P resp:<id>``: a hash ``{exp: <expiry, epoch seconds>, data: <orjson record>}`` with a Redis
  TTL of ``ttl_seconds``, so Redis itself purges expired records.
- ``P index``: a sorted set of ids scored by save order, from the counter ``P seq`` (global to all
  replicas, so clock skew cannot reorder evictions). ``save`` runs one Lua script that writes the
  record, purges expired records from the front of the index (bounded), and evicts the oldest
  records beyond ``max_count``: atomic with respect to every other replica, so the limit holds
  across them.
- ``P item:<owner tag>:<item id>``: a sorted set of the ids of the records holding that item
  (output or input), scored by save order, with the TTL of the newest of them (reset on every
  save that adds to it), so it never outlives the records it names. The record's hash keeps the
  list of its item keys (``items``, JSON), so that every removal crossfeed makes (delete, eviction,
  the trim of expired records, re-saving an id) takes the record out of its item sets in the same
  script. A record Redis itself expired leaves a stale member behind until ``get_by_item`` meets
  it (and removes it) or the set's own TTL ends.

- ``P probe``: a small key written (5 s TTL) by ``probe_write``, to learn whether Redis takes
  writes (proxy/state/store_retry.py).

``exp`` lets a replica treat a record as expired by its own clock (and tests use a fake clock);
replicas are assumed to have NTP-synchronised clocks. Single Redis (or primary/replica) only: the
script touches keys it computes, which Redis Cluster does not allow.

**Redis at ``maxmemory``** (``maxmemory-policy noeviction``): the save script must be refused, so
that the save fails (``StoreError`` naming Redis's OOM), is kept by the retry queue and written
once Redis has memory again. Redis checks a script without declared flags only at its first
write command, and lets a script go on once it has written: the save begins by removing the
record it replaces (allowed at maxmemory), so it would be taken and Redis would grow past its
limit. On Redis >= 7.0 every script therefore declares its flags in a ``#!lua`` shebang, which
Redis checks before it runs the script: the save declares none (refused with OOM at maxmemory);
delete, the sweep and the pruning of stale item-set members only remove, and declare
``allow-oom`` (they keep working there, and free memory); the item lookup declares ``no-writes``
(it keeps working at maxmemory, on a read-only replica and when Redis refuses writes for a
failed snapshot). The version comes from ``INFO server``, once, at the first script or ``ping``
(/readyz pings); when INFO is refused the flags are tried, and a Redis that answers the shebang
with an error (older than 7.0) gets the same scripts without it. **Redis older than 7.0 cannot refuse a save
at maxmemory**: saves are taken and Redis grows past the limit (logged once,
``store.redis_without_script_flags``). Use Redis 7.0 or later, or a ``maxmemory-policy`` that
evicts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import redis.asyncio as aioredis
import structlog
from redis.commands.core import AsyncScript
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

from crossfeed.proxy.runtime.store_config import StoreConfig
from crossfeed.proxy.state.store.base import (
    Clock,
    ResponseStore,
    StoredResponse,
    StoreError,
    StoreStats,
    decode_record,
    encode_record,
    item_ids,
    owner_tag,
)
from crossfeed.proxy.state.store.redis_runs import RedisRuns

log = structlog.get_logger("crossfeed")

# Takes record `rid` (hash key `rkey`) out of the item sets it is in; the record stays.
_UNINDEX_LUA = """
local function unindex(rkey, rid)
  local keys = redis.call('HGET', rkey, 'items')
  if keys then
    for _, k in ipairs(cjson.decode(keys)) do redis.call('ZREM', k, rid) end
  end
end
"""

# Drops expired records from the front (oldest) of the index, at most `batch`, stopping at the
# first live one. Needs locals idx, prefix, now, batch; sets `expired`.
_TRIM_LUA = """
local expired = 0
local front = redis.call('ZRANGE', idx, 0, batch - 1)
for _, oid in ipairs(front) do
  local e = redis.call('HGET', prefix .. oid, 'exp')
  if e and tonumber(e) > now then break end
  unindex(prefix .. oid, oid)
  redis.call('DEL', prefix .. oid)
  redis.call('ZREM', idx, oid)
  expired = expired + 1
end
"""

# KEYS: record key, index, sequence counter. ARGV: id, blob, exp, ttl, now, max_count (0 = none),
# record key prefix, sweep batch, evict batch, the record's item keys as a JSON list.
# Returns {evicted, expired}.
_SAVE_LUA = (
    _UNINDEX_LUA
    + """
local rkey, idx, seqkey = KEYS[1], KEYS[2], KEYS[3]
local ttl, now = tonumber(ARGV[4]), tonumber(ARGV[5])
local maxc, prefix = tonumber(ARGV[6]), ARGV[7]
local batch, evict_batch = tonumber(ARGV[8]), tonumber(ARGV[9])
unindex(rkey, ARGV[1])
redis.call('DEL', rkey)
redis.call('HSET', rkey, 'exp', ARGV[3], 'data', ARGV[2], 'items', ARGV[10])
redis.call('EXPIRE', rkey, ttl)
local seq = redis.call('INCR', seqkey)
redis.call('ZADD', idx, seq, ARGV[1])
for _, k in ipairs(cjson.decode(ARGV[10])) do
  redis.call('ZADD', k, seq, ARGV[1])
  redis.call('EXPIRE', k, ttl)
end
"""
    + _TRIM_LUA
    + """
local evicted = 0
if maxc > 0 then
  local excess = redis.call('ZCARD', idx) - maxc
  if excess > evict_batch then excess = evict_batch end
  if excess > 0 then
    local old = redis.call('ZRANGE', idx, 0, excess - 1)
    for _, oid in ipairs(old) do
      unindex(prefix .. oid, oid)
      redis.call('DEL', prefix .. oid)
    end
    redis.call('ZREMRANGEBYRANK', idx, 0, excess - 1)
    evicted = #old
  end
end
redis.call('EXPIRE', idx, ttl)
redis.call('EXPIRE', seqkey, ttl)
return {evicted, expired}
"""
)

# KEYS: index. ARGV: now, record key prefix, batch. Returns the number purged.
_SWEEP_LUA = (
    _UNINDEX_LUA
    + """
local idx, now, prefix, batch = KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
"""
    + _TRIM_LUA
    + """
return expired
"""
)

# KEYS: record key, index. ARGV: id. Removes the record, from the index and its item sets.
# Returns {exp or false, keys deleted}.
_DELETE_LUA = (
    _UNINDEX_LUA
    + """
local exp = redis.call('HGET', KEYS[1], 'exp')
unindex(KEYS[1], ARGV[1])
local deleted = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return {exp or false, deleted}
"""
)

# KEYS: an item set. ARGV: now, record key prefix. Reads only. Returns {the data of the newest
# live record holding the item, or false; the members met on the way whose record is gone}.
_BY_ITEM_LUA = """
local rids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
local stale = {}
for _, rid in ipairs(rids) do
  local v = redis.call('HMGET', ARGV[2] .. rid, 'exp', 'data')
  if v[2] then
    local e = tonumber(v[1])
    if e and e > tonumber(ARGV[1]) then return {v[2], stale} end
  else
    stale[#stale + 1] = rid
  end
end
return {false, stale}
"""

# KEYS: an item set. ARGV: record key prefix, then ids. Removes the ids whose record is gone (a
# record saved again since the lookup keeps its member). Returns the number removed.
_PRUNE_LUA = """
local n = 0
for i = 2, #ARGV do
  if redis.call('EXISTS', ARGV[1] .. ARGV[i]) == 0 then n = n + redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return n
"""

_SCRIPTS = {"save": _SAVE_LUA, "sweep": _SWEEP_LUA, "delete": _DELETE_LUA, "by_item": _BY_ITEM_LUA, "prune": _PRUNE_LUA}

# Redis >= 7.0: the flags each script declares, checked before it runs (see the module docstring).
_SHEBANGS = {
    "save": "#!lua\n",  # writes: refused at maxmemory (OOM), as a plain SET is
    "sweep": "#!lua flags=allow-oom\n",  # only removes
    "delete": "#!lua flags=allow-oom\n",
    "prune": "#!lua flags=allow-oom\n",
    "by_item": "#!lua flags=no-writes\n",
}


def script_flags_supported(redis_version: object) -> bool:
    """Whether a Redis of ``redis_version`` (``INFO server``) reads script flags (7.0 and later).
    True when the version cannot be read: a Redis that cannot read them says so at the first
    script, and the store falls back then."""
    try:
        return int(str(redis_version).split(".", 1)[0]) >= 7
    except ValueError:
        return True


def _shebang_refused(exc: ResponseError) -> bool:
    """Redis older than 7.0 compiles the shebang line as Lua: "Error compiling script (new
    function): user_script:1: unexpected symbol near '#'" (a server that reads the shebang but
    not these flags names the shebang)."""
    text = str(exc)
    return "near '#'" in text or "shebang" in text.lower()


class RedisStore(RedisRuns, ResponseStore):
    backend = "redis"
    EVICT_BATCH = 1000  # max records evicted by max_count per save
    SWEEP_BATCH = 100  # max expired records purged per save / sweep
    MAX_CONNECTIONS = 64  # per process; callers beyond it wait (up to the timeout) for one

    def __init__(self, config: StoreConfig, url: str, *, clock: Clock = time.time) -> None:
        self._ttl = config.ttl_seconds
        self._max_count = config.max_count or 0
        self._clock = clock
        self._record_prefix = f"{config.key_prefix}resp:"
        self._index = f"{config.key_prefix}index"
        self._seq = f"{config.key_prefix}seq"
        self._item_prefix = f"{config.key_prefix}item:"
        self._probe_key = f"{config.key_prefix}probe"
        self._counter_prefix = f"{config.key_prefix}count:"
        self._closed = False
        self._evicted = 0
        self._expired = 0
        try:
            pool = aioredis.BlockingConnectionPool.from_url(
                url,
                max_connections=self.MAX_CONNECTIONS,
                timeout=config.redis_timeout_seconds,
                socket_connect_timeout=config.redis_timeout_seconds,
                socket_timeout=config.redis_timeout_seconds,
            )
        except (ValueError, RedisError) as exc:
            raise StoreError(f"bad redis url: {exc}", backend=self.backend) from exc
        self._client = aioredis.Redis(connection_pool=pool)
        self._flagged = {n: self._client.register_script(_SHEBANGS[n] + body) for n, body in _SCRIPTS.items()}
        self._plain = {n: self._client.register_script(body) for n, body in _SCRIPTS.items()}
        self._scripts: dict[str, AsyncScript] | None = None  # one of the two, chosen at the first call
        self._choosing = asyncio.Lock()

    def _key(self, response_id: str) -> str:
        return self._record_prefix + response_id

    def _item_key(self, item_id: str, owner: str | None) -> str:
        return f"{self._item_prefix}{owner_tag(owner)}:{item_id}"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed", backend=self.backend)

    def _wrap(self, exc: Exception) -> StoreError:
        if isinstance(exc, OutOfMemoryError):  # Redis's own words: "OOM command not allowed when used memory > ..."
            return StoreError(f"redis: OOM {exc}", backend=self.backend)
        return StoreError(f"redis: {type(exc).__name__}: {exc}", backend=self.backend)

    async def _choose_scripts(self) -> dict[str, AsyncScript]:
        """The scripts with flags (Redis >= 7.0) or without, from ``INFO server``, once."""
        if self._scripts is not None:
            return self._scripts
        async with self._choosing:
            if self._scripts is None:
                try:
                    version = (await self._client.info("server")).get("redis_version")
                except ResponseError:  # INFO refused (an ACL, a renamed command): try the flags
                    version = None
                if version is None or script_flags_supported(version):
                    self._scripts = self._flagged
                else:
                    self._use_plain(f"INFO server: redis_version {version}")
            assert self._scripts is not None
            return self._scripts

    def _use_plain(self, why: str) -> None:
        if self._scripts is not self._plain:
            self._scripts = self._plain
            log.warning(
                "store.redis_without_script_flags",
                backend=self.backend,
                reason=why,
                needs="script flags (Redis 7.0 or later)",
                consequence="saves cannot be refused at maxmemory: Redis takes them and grows past it",
            )

    async def _eval(self, name: str, keys: list[str], args: list[Any]) -> Any:
        scripts = await self._choose_scripts()
        try:
            return await scripts[name](keys=keys, args=args)
        except ResponseError as exc:
            if scripts is self._plain or not _shebang_refused(exc):
                raise
            self._use_plain(f"Redis answered the script shebang with an error: {exc}")
        return await self._plain[name](keys=keys, args=args)

    async def save(self, record: StoredResponse) -> None:
        self._check_open()
        blob = encode_record(record, self.backend)
        item_keys = orjson.dumps([self._item_key(i, record.owner) for i in item_ids(record)])
        now = self._clock()
        try:
            evicted, expired = await self._eval(
                "save",
                [self._key(record.id), self._index, self._seq],
                [
                    record.id,
                    blob,
                    repr(now + self._ttl),
                    self._ttl,
                    repr(now),
                    self._max_count,
                    self._record_prefix,
                    self.SWEEP_BATCH,
                    self.EVICT_BATCH,
                    item_keys,
                ],
            )
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        self._evicted += int(evicted)
        self._expired += int(expired)

    async def get(self, response_id: str) -> StoredResponse | None:
        self._check_open()
        key = self._key(response_id)
        try:
            exp, data = await self._client.hmget(key, ["exp", "data"])
            if data is None:
                return None
            if exp is None or float(exp) <= self._clock():
                await self._eval("delete", [key, self._index], [response_id])
                self._expired += 1
                return None
        except (RedisError, OSError, ValueError) as exc:
            raise self._wrap(exc) from exc
        return decode_record(data, self.backend)

    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        self._check_open()
        key = self._item_key(item_id, owner)
        try:
            data, stale = await self._eval("by_item", [key], [repr(self._clock()), self._record_prefix])
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        if stale:
            # Best effort: a Redis that takes no writes (a read-only replica) still answers the
            # lookup; the members left go at a later lookup or with the set's own TTL.
            try:
                await self._eval("prune", [key], [self._record_prefix, *stale])
            except (RedisError, OSError):
                pass
        return None if data is None else decode_record(data, self.backend)

    async def delete(self, response_id: str) -> bool:
        self._check_open()
        try:
            exp, deleted = await self._eval("delete", [self._key(response_id), self._index], [response_id])
            return bool(deleted) and exp is not None and float(exp) > self._clock()
        except (RedisError, OSError, ValueError) as exc:
            raise self._wrap(exc) from exc

    async def count(self, name: str, amount: int, window: int) -> tuple[int, float]:
        self._check_open()
        now = self._clock()
        start = now - now % window
        key = f"{self._counter_prefix}{name}:{int(start)}"
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.incrby(key, amount)
                pipe.expire(key, window * 2)
                total, _ = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        return int(total), start + window - now

    async def sweep(self) -> int:
        """Redis expires records by itself; this also drops expired ids from the index."""
        self._check_open()
        try:
            n = int(
                await self._eval("sweep", [self._index], [repr(self._clock()), self._record_prefix, self.SWEEP_BATCH])
            )
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        self._expired += n
        return n

    async def stats(self) -> StoreStats:
        self._check_open()
        try:
            count = int(await self._client.zcard(self._index))
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        return StoreStats(self.backend, count, None, self._evicted, self._expired)

    async def ping(self) -> None:
        self._check_open()
        try:
            await self._client.ping()
            await self._choose_scripts()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def probe_write(self) -> None:
        """One small key that expires by itself (``P probe``, 5 s): refused as a save is when
        Redis is down, read-only (a replica) or out of memory."""
        self._check_open()
        try:
            await self._client.set(self._probe_key, b"\0" * 4096, px=5000)
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._client.aclose()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    # -- the key-value map (base.py ``remember``/``recall``): plain keys that expire by themselves

    def _kv_key(self, name: str) -> str:
        return self._probe_key[: -len("probe")] + "kv:" + name

    async def remember(self, name: str, value: str, ttl: int) -> None:
        self._check_open()
        try:
            await self._client.set(self._kv_key(name), value.encode(), ex=max(1, int(ttl)))
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def recall(self, name: str) -> str | None:
        self._check_open()
        try:
            found = await self._client.get(self._kv_key(name))
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        if found is None:
            return None
        return found.decode() if isinstance(found, bytes) else str(found)
