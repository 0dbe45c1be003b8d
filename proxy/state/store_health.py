"""The write health of the response store as one process sees it, and the words for it.

``WriteHealth`` follows this process's saves (fresh ones, retries, probe writes): failing since
when and why, recovered when. ``proxy/state/store_retry.py`` keeps it and explains a lookup's miss with
it (``Miss``): while saves fail, and for ``RECOVERY_HINT_SECONDS`` after they recover, a response
that is not found may be one whose save failed (in this process or another), so the answer is a
503 that says so rather than a bare 404. Thirty seconds: every other process writes its retry
queue within about two seconds of the store coming back (its backoff is capped at 2 s), plus the
time to write the queue; past that a miss is an ordinary 404.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from crossfeed.proxy.state.store.base import StoreError

RECOVERY_HINT_SECONDS = 30.0  # a miss still gets the 503 naming the failed saves this long after they recover
FRESH_SECONDS = 5.0  # the longest a miss waits for its probe write (probe_write) before it is explained


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def short_reason(exc: BaseException) -> str:
    """A client-safe word for a store failure (the log line has the whole error)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc).lower()
    for needles, reason in (
        (("disk is full", "no space", "sqlite_full"), "disk full"),
        (("readonly", "read-only", "read only"), "read-only"),
        (("oom", "maxmemory", "out of memory"), "out of memory"),
        (("timeout", "timed out"), "timed out"),
        (("connect", "connection", "closed", "refused", "unreachable"), "unreachable"),
    ):
        if any(n in text for n in needles):
            return reason
    return "write error" if isinstance(exc, StoreError) else type(exc).__name__


class WriteHealth:
    """What this process's saves have seen: failing since when (and why), recovered when."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.failing_since: float | None = None
        self.reason = ""
        self.recovered_at: float | None = None
        self.failed_from: float | None = None  # the failing_since of the last recovered outage

    def ok(self) -> bool:
        """A save went through; True when that ends a failing spell."""
        now = self.clock()
        if self.failing_since is None:
            return False
        self.failed_from, self.failing_since, self.recovered_at = self.failing_since, None, now
        return True

    def failed(self, reason: str) -> bool:
        """A save failed; True when that starts a failing spell."""
        now = self.clock()
        self.reason = reason
        if self.failing_since is not None:
            return False
        self.failing_since = now
        return True

    def recently_recovered(self) -> bool:
        return self.recovered_at is not None and self.clock() - self.recovered_at < RECOVERY_HINT_SECONDS

    def miss(self, backend: str) -> Miss | None:
        """Why an id may be missing now: saves failing, or recovered less than
        ``RECOVERY_HINT_SECONDS`` ago (another process may still be writing its queue); else None."""
        if self.failing_since is not None:
            return Miss(
                False,
                "was not found",
                f"the response store ({backend}) has been failing to save since {stamp(self.failing_since)} "
                f"({self.reason}); it may be one whose save failed. Try again when the store recovers.",
            )
        if self.recently_recovered() and self.recovered_at is not None:
            return Miss(
                False,
                "was not found",
                f"the response store ({backend}) failed to save from {stamp(self.failed_from or 0)} to "
                f"{stamp(self.recovered_at)} ({self.reason}); it may be one whose save failed and is still being "
                "written by another crossfeed process. Try again in a few seconds.",
            )
        return None

    def words(self, problems: list[str], queued: int, lost: int) -> str:
        """The store's state for /readyz: ``ok``, or ``degraded: ...`` with ``problems`` (an
        unreachable store), failing saves, the queue and the responses given up."""
        parts = list(problems)
        if self.failing_since is not None:
            parts.append(f"failing saves since {stamp(self.failing_since)} ({self.reason})")
        if queued or parts:
            parts.append(f"{queued} queued for retry")
        if lost and parts:
            parts.append(f"{lost} lost since start")
        return ("degraded: " + ", ".join(parts)) if parts else "ok"


@dataclass(frozen=True, slots=True)
class Miss:
    """Why a lookup may have missed: ``permanent`` (a 404: this process gave the save up) or not
    (a 503: try again); ``message(subject)`` says so, naming the failed save."""

    permanent: bool
    verb: str  # "was not saved" / "was not found"
    why: str

    def message(self, subject: str) -> str:
        return f"{subject} {self.verb}: {self.why}"

    @classmethod
    def failed_elsewhere(cls, backend: str, at: float | None, now: float) -> Miss | None:
        """A save failed at ``at`` in another process (noted in the store, ``note_failed_save``):
        less than ``RECOVERY_HINT_SECONDS`` ago, a 503 as for one of this process's own; else None."""
        if at is None or not 0.0 <= now - at < RECOVERY_HINT_SECONDS:
            return None
        return cls(
            False,
            "was not found",
            f"the response store ({backend}) failed a save in another crossfeed process at {stamp(at)}; it may be "
            "that one, still queued to be written there. Try again in a few seconds.",
        )

    @classmethod
    def given_up(cls, backend: str, *, why: str, reason: str) -> Miss:
        """A response this process could not save and gave up on: a 404 that says so."""
        return cls(
            True,
            "was not saved",
            f"the response store ({backend}) failed to save it ({reason}) and crossfeed gave it up ({why}). "
            "Send the conversation again in full.",
        )
