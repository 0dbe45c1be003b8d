"""The Redis backend's part for background runs (store/base.py): a mixin of ``RedisStore``
(redis.py), which gives it its client, its key prefix and its clock.

``P run:<id>``: a hash (state, holder, lease_until, cancel); ``P run:<id>:events``: a Stream, one
entry per event with the id ``<sequence_number + 1>-0`` (a stream id is above 0-0), so a reader
after sequence number N reads from ``N+1-0`` with XREAD BLOCK; both EXPIRE with the response
retention, renewed on every write. A cancel also PUBLISHes on ``P run-cancel:<id>``, which one
pattern subscription per process hears (``wait_cancel``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
import redis.asyncio as aioredis
import structlog
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from crossfeed.proxy.state.store.base import Clock, StoreError

log = structlog.get_logger("crossfeed")


class RedisRuns:
    """Run log, state, lease and cancel flag in Redis."""

    backend: str
    _client: aioredis.Redis
    _ttl: int
    _clock: Clock
    _record_prefix: str
    _closed: bool
    _lease_script: AsyncScript | None = None

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

        def _wrap(self, exc: Exception) -> StoreError: ...

    _LEASE_LUA = """
local h = redis.call('HMGET', KEYS[1], 'holder', 'lease_until')
if h[1] and h[1] ~= ARGV[1] and tonumber(h[2]) > tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'lease_until', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""

    def _run_key(self, run_id: str) -> str:
        return f"{self._record_prefix[: -len('resp:')]}run:{run_id}"

    def cancel_channel(self, run_id: str) -> str:
        return f"{self._record_prefix[: -len('resp:')]}run-cancel:{run_id}"

    async def append_events(self, run_id: str, events: list[tuple[int, bytes]]) -> None:
        self._check_open()
        key = self._run_key(run_id) + ":events"
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                for seq, doc in events:
                    pipe.xadd(key, {"d": doc}, id=f"{seq + 1}-0")
                pipe.expire(key, self._ttl)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def read_events(self, run_id: str, after: int, wait: float) -> list[tuple[int, bytes]]:
        self._check_open()
        key = self._run_key(run_id) + ":events"
        # a blocked read holds its connection: kept under the socket timeout
        timeout = float(self._client.connection_pool.connection_kwargs.get("socket_timeout") or 5.0)
        block = int(min(wait, max(timeout - 1.0, 0.1)) * 1000)
        answer: Any
        try:
            answer = await self._client.xread({key: f"{after + 1}-0"}, block=block if block > 0 else None)
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        out: list[tuple[int, bytes]] = []
        for _, entries in answer or ():
            for entry_id, fields in entries:
                ident = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                out.append((int(ident.split("-", 1)[0]) - 1, bytes(fields[b"d"])))
        return out

    async def put_run(self, run_id: str, state: dict[str, Any]) -> None:
        self._check_open()
        key = self._run_key(run_id)
        try:
            blob = orjson.dumps(state)
        except (orjson.JSONEncodeError, TypeError) as exc:
            raise StoreError(f"run {run_id}: {exc}", backend=self.backend, retryable=False) from exc
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(key, "state", blob)
                pipe.expire(key, self._ttl)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def _run_fields(self, run_id: str, *names: str) -> list[Any]:
        self._check_open()
        try:
            return list(await self._client.hmget(self._run_key(run_id), list(names)))
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        (blob,) = await self._run_fields(run_id, "state")
        if blob is None:
            return None
        try:
            state: dict[str, Any] = orjson.loads(blob)
        except orjson.JSONDecodeError as exc:
            raise StoreError(f"corrupt run state {run_id}: {exc}", backend=self.backend) from exc
        return state

    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> bool:
        self._check_open()
        now = self._clock()
        try:
            script = self._lease_script = getattr(self, "_lease_script", None) or self._client.register_script(
                self._LEASE_LUA
            )
            took = await script(keys=[self._run_key(run_id)], args=[holder, repr(now + ttl), repr(now), self._ttl])
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc
        return bool(took)

    async def lease(self, run_id: str) -> tuple[str, float] | None:
        holder, until = await self._run_fields(run_id, "holder", "lease_until")
        if holder is None or until is None:
            return None
        return (holder.decode() if isinstance(holder, bytes) else str(holder)), float(until)

    async def request_cancel(self, run_id: str) -> None:
        self._check_open()
        key = self._run_key(run_id)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(key, "cancel", 1)
                pipe.expire(key, self._ttl)
                pipe.publish(self.cancel_channel(run_id), b"cancel")
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise self._wrap(exc) from exc

    async def cancel_requested(self, run_id: str) -> bool:
        (flag,) = await self._run_fields(run_id, "cancel")
        return flag is not None

    _cancel_waiters: dict[str, asyncio.Event] | None = None  # run id -> its waiter (set on first use)
    _cancel_listener: asyncio.Task[None] | None = None

    async def wait_cancel(self, run_id: str, wait: float) -> bool:
        """Told at once: one subscription per process to the pattern of the cancels' channels
        (one connection, whatever the number of runs), waking the run's waiter; the flag is
        checked first (a cancel published before the subscription)."""
        if await self.cancel_requested(run_id):
            return True
        if self._cancel_waiters is None:
            self._cancel_waiters = {}
        waiters = self._cancel_waiters
        event = waiters.setdefault(run_id, asyncio.Event())
        if self._cancel_listener is None or self._cancel_listener.done():
            self._cancel_listener = asyncio.get_running_loop().create_task(self._listen_cancels(waiters))
        try:
            await asyncio.wait_for(event.wait(), wait)
            return True
        except TimeoutError:
            return False
        finally:
            if waiters.get(run_id) is event and not event.is_set():
                waiters.pop(run_id, None)

    async def _listen_cancels(self, waiters: dict[str, asyncio.Event]) -> None:
        prefix = self.cancel_channel("")
        pubsub = self._client.pubsub()
        try:
            await pubsub.psubscribe(prefix + "*")
            while not self._closed:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is None:
                    continue
                channel = message.get("channel")
                name = channel.decode() if isinstance(channel, bytes) else str(channel)
                event = waiters.get(name[len(prefix) :])
                if event is not None:
                    event.set()
        except (RedisError, OSError) as exc:  # the waiters poll the flag meanwhile; the next wait subscribes again
            log.info("store.cancel_listener_stopped", backend=self.backend, error=str(exc))
        finally:
            try:
                await pubsub.aclose()
            except (RedisError, OSError):
                pass
