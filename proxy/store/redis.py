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
  writes (proxy/store_retry.py).

``exp`` lets a replica treat a record as expired by its own clock (and tests use a fake clock);
replicas are assumed to have NTP-synchronised clocks. Single Redis (or primary/replica) only: the
script touches keys it computes, which Redis Cluster does not allow.
"""

from __future__ import annotations

import time

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from proxy.store import (
    Clock,
    ResponseStore,
    StoreConfig,
    StoredResponse,
    StoreError,
    StoreStats,
    decode_record,
    encode_record,
    item_ids,
    owner_tag,
)

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

# KEYS: an item set. ARGV: now, record key prefix. The newest live record holding the item (its
# data), or false; members whose record is gone are removed on the way.
_BY_ITEM_LUA = """
local rids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
for _, rid in ipairs(rids) do
  local v = redis.call('HMGET', ARGV[2] .. rid, 'exp', 'data')
  if v[2] then
    local e = tonumber(v[1])
    if e and e > tonumber(ARGV[1]) then return v[2] end
  else
    redis.call('ZREM', KEYS[1], rid)
  end
end
return false
"""


class RedisStore(ResponseStore):
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
        self._save_script = self._client.register_script(_SAVE_LUA)
        self._sweep_script = self._client.register_script(_SWEEP_LUA)
        self._delete_script = self._client.register_script(_DELETE_LUA)
        self._by_item_script = self._client.register_script(_BY_ITEM_LUA)

    def _key(self, response_id: str) -> str:
        return self._record_prefix + response_id

    def _item_key(self, item_id: str, owner: str | None) -> str:
        return f"{self._item_prefix}{owner_tag(owner)}:{item_id}"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed", backend=self.backend)

    def _wrap(self, exc: Exception) -> StoreError:
        return StoreError(f"redis: {type(exc).__name__}: {exc}", backend=self.backend)

    async def save(self, record: StoredResponse) -> None:
        self._check_open()
        blob = encode_record(record, self.backend)
        item_keys = orjson.dumps([self._item_key(i, record.owner) for i in item_ids(record)])
        now = self._clock()
        try:
            evicted, expired = await self._save_script(
                keys=[self._key(record.id), self._index, self._seq],
                args=[
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
                await self._delete_script(keys=[key, self._index], args=[response_id])
                self._expired += 1
                return None
        except (RedisError, OSError, ValueError) as exc:
            raise self._wrap(exc) from exc
        return decode_record(data, self.backend)

    async def get_by_item(self, item_id: str, owner: str | None) -> StoredResponse | None:
        self._check_open()
        try:
            data = await self._by_item_script(
                keys=[self._item_key(item_id, owner)], args=[repr(self._clock()), self._record_prefix]
            )
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        return None if data is None else decode_record(data, self.backend)

    async def delete(self, response_id: str) -> bool:
        self._check_open()
        try:
            exp, deleted = await self._delete_script(keys=[self._key(response_id), self._index], args=[response_id])
            return bool(deleted) and exp is not None and float(exp) > self._clock()
        except (RedisError, OSError, ValueError) as exc:
            raise self._wrap(exc) from exc

    async def sweep(self) -> int:
        """Redis expires records by itself; this also drops expired ids from the index."""
        self._check_open()
        try:
            n = int(
                await self._sweep_script(
                    keys=[self._index], args=[repr(self._clock()), self._record_prefix, self.SWEEP_BATCH]
                )
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
