"""The idle and total bounds of reading one upstream body, shared by every streaming loop.

Re-arming a timer for every chunk costs about what handling the chunk does, so a loop reads
inside one timeout scope (``arm``, proxy/runtime/timeout_scope.py) that it moves at most once a second
(``move``, when ``now > move_at``), recording the time of the last data in ``last``. When the
scope fires, ``lapsed`` says why: the total bound, the idle bound, or neither (a silence shorter
than ``idle``: the loop's tick, when it sends a keepalive, then arms again).

    deadline = Deadline(loop, idle=300, total=3600, tick=15)
    while ...:
        try:
            with deadline.arm():
                ... chunk = await read(); now = loop.time(); deadline.last = now
                ... if now > deadline.move_at: deadline.move(now)
        except TimeoutError:
            why = deadline.lapsed()   # "total" | "idle" | None
"""

from __future__ import annotations

import asyncio

from crossfeed.proxy.runtime.timeout_scope import TimeoutScope


class Deadline:
    __slots__ = ("_loop", "idle", "tick", "end", "last", "move_at", "_scope")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, idle: float, total: float, tick: float | None = None
    ) -> None:
        now = loop.time()
        self._loop = loop
        self.idle = idle
        self.tick = min(tick or idle, idle, total)
        self.end = now + total
        self.last = now
        self.move_at = now + 1.0
        self._scope: TimeoutScope | None = None

    def arm(self) -> TimeoutScope:
        """A fresh scope ending at the next tick (never past the total bound)."""
        now = self._loop.time()
        self.move_at = now + 1.0
        self._scope = TimeoutScope(self._loop, min(now + self.tick, self.end))
        return self._scope

    def move(self, now: float) -> None:
        """Push the armed scope's end to ``now`` + tick; the next move is a second away."""
        assert self._scope is not None
        self._scope.reschedule(min(now + self.tick, self.end))
        self.move_at = now + 1.0

    def expired(self) -> bool:
        """The armed scope is what raised the TimeoutError just caught."""
        return self._scope is not None and self._scope.expired()

    def lapsed(self) -> str | None:
        """After the scope fired: ``"total"``, ``"idle"``, or None (only a tick has passed)."""
        now = self._loop.time()
        if now >= self.end:
            return "total"
        if now - self.last >= self.idle:
            return "idle"
        return None
