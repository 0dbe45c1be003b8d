"""Redis backend, for several crossfeed replicas sharing one Redis.

Layout (``P`` = ``key_prefix``):

- ``P resp:<id>``: a hash ``{exp: <expiry, epoch seconds>, data: <orjson record>}`` with a Redis
  TTL of ``ttl_seconds``, so Redis itself purges expired records.
- ``P index``: a sorted set of ids scored by save order, from the counter ``P seq`` (global to all
  replicas, so clock skew cannot reorder evictions). ``save`` runs one Lua script that writes the
  record, purges expired records from the front of the index (bounded), and evicts the oldest
  records beyond ``max_count``: atomic with respect to every other replica, so the limit holds
  across them.

``exp`` lets a replica treat a record as expired by its own clock (and tests use a fake clock);
replicas are assumed to have NTP-synchronised clocks. Single Redis (or primary/replica) only: the
script touches keys it computes, which Redis Cluster does not allow.
"""

from __future__ import annotations

import time

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
)

# Drops expired records from the front (oldest) of the index, at most `batch`, stopping at the
# first live one. Needs locals idx, prefix, now, batch; sets `expired`.
_TRIM_LUA = """
local expired = 0
local front = redis.call('ZRANGE', idx, 0, batch - 1)
for _, oid in ipairs(front) do
  local e = redis.call('HGET', prefix .. oid, 'exp')
  if e and tonumber(e) > now then break end
  redis.call('DEL', prefix .. oid)
  redis.call('ZREM', idx, oid)
  expired = expired + 1
end
"""

# KEYS: record key, index, sequence counter. ARGV: id, blob, exp, ttl, now, max_count (0 = none),
# record key prefix, sweep batch, evict batch. Returns {evicted, expired}.
_SAVE_LUA = (
    """
local rkey, idx, seqkey = KEYS[1], KEYS[2], KEYS[3]
local ttl, now = tonumber(ARGV[4]), tonumber(ARGV[5])
local maxc, prefix = tonumber(ARGV[6]), ARGV[7]
local batch, evict_batch = tonumber(ARGV[8]), tonumber(ARGV[9])
redis.call('DEL', rkey)
redis.call('HSET', rkey, 'exp', ARGV[3], 'data', ARGV[2])
redis.call('EXPIRE', rkey, ttl)
redis.call('ZADD', idx, redis.call('INCR', seqkey), ARGV[1])
"""
    + _TRIM_LUA
    + """
local evicted = 0
if maxc > 0 then
  local excess = redis.call('ZCARD', idx) - maxc
  if excess > evict_batch then excess = evict_batch end
  if excess > 0 then
    local old = redis.call('ZRANGE', idx, 0, excess - 1)
    for _, oid in ipairs(old) do redis.call('DEL', prefix .. oid) end
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
    """
local idx, now, prefix, batch = KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
"""
    + _TRIM_LUA
    + """
return expired
"""
)


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

    def _key(self, response_id: str) -> str:
        return self._record_prefix + response_id

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed", backend=self.backend)

    def _wrap(self, exc: Exception) -> StoreError:
        return StoreError(f"redis: {type(exc).__name__}: {exc}", backend=self.backend)

    async def save(self, record: StoredResponse) -> None:
        self._check_open()
        blob = encode_record(record, self.backend)
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
                async with self._client.pipeline(transaction=True) as pipe:
                    await pipe.delete(key).zrem(self._index, response_id).execute()
                self._expired += 1
                return None
        except (RedisError, OSError, ValueError) as exc:
            raise self._wrap(exc) from exc
        return decode_record(data, self.backend)

    async def delete(self, response_id: str) -> bool:
        self._check_open()
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                exp, deleted, _ = await (
                    pipe.hget(self._key(response_id), "exp")
                    .delete(self._key(response_id))
                    .zrem(self._index, response_id)
                    .execute()
                )
            return bool(deleted) and exp is not None and float(exp) > self._clock()
        except (RedisError, OSError, ValueError) as exc:
            raise self._wrap(exc) from exc

    async def sweep(self) -> int:
        """Redis expires records by itself; this also drops expired ids from the index."""
        self._check_open()
        try:
            n = int(
                await self._sweep_script(
                    keys=[self._index],
                    args=[repr(self._clock()), self._record_prefix, self.SWEEP_BATCH],
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

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._client.aclose()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
