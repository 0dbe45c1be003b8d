"""How the machine's idle CPUs wait, and a way to make them poll for the length of a run.

A load generator's CPU that has nothing to do idles. When the target then writes to one of the
generator's sockets, the kernel wakes the reader (``sock_def_readable`` -> ``try_to_wake_up``) on
the target's own time. A CPU that polls while idle sees the wake-up by itself; a CPU that halted
needs an interrupt from the writer's CPU. On a virtual machine that interrupt is a VM exit, and
its cost lands on the writer: in its system time, and in its user time, as the host's work
clears the caches it was using.

The faster a target, the busier it keeps the generator, the less often the generator halts,
and the fewer of these interrupts it pays. A slower target pays more of them per request. On
short streams that compounds the difference between two targets (docs/benchmark.md, "Idle CPUs
that halt").

Linux's ``haltpoll`` cpuidle driver (KVM guests) polls ``guest_halt_poll_ns`` nanoseconds
before it halts: 200,000 by default, 0 when the kernel command line turns the polling off.
``--idle-poll-ns N`` (bench/run.py) sets it for the run and puts the old value back after; it
needs root and that driver.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
DRIVER = Path("/sys/devices/system/cpu/cpuidle/current_driver")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def idle_state() -> dict[str, Any]:
    """The cpuidle driver and, under ``haltpoll``, how long an idle CPU polls before it halts."""
    poll = _read(POLL_NS)
    return {"cpuidle_driver": _read(DRIVER), "halt_poll_ns": int(poll) if poll and poll.isdigit() else None}


def describe(state: dict[str, Any]) -> str:
    """One line for the table's header."""
    driver, poll = state.get("cpuidle_driver"), state.get("halt_poll_ns")
    if driver is None:
        return "idle CPUs: cpuidle driver unknown"
    if poll is None:
        return f"idle CPUs: cpuidle driver {driver}"
    how = "halt at once (a wake-up from idle is an interrupt)" if poll == 0 else f"poll {poll} ns, then halt"
    return f"idle CPUs: cpuidle driver {driver}, {how}"


class IdleError(Exception):
    """The idle polling could not be set (no haltpoll driver, or not root)."""


@contextmanager
def polling(ns: int | None) -> Iterator[None]:
    """Idle CPUs poll ``ns`` nanoseconds before they halt while the block runs (None: unchanged).
    The old value is put back on the way out, on SIGTERM too."""
    if ns is None:
        yield
        return
    old = _read(POLL_NS)
    if old is None:
        raise IdleError(f"--idle-poll-ns needs the haltpoll cpuidle driver ({POLL_NS} is missing)")
    try:
        POLL_NS.write_text(str(ns))
    except OSError as exc:
        raise IdleError(f"--idle-poll-ns: cannot write {POLL_NS} ({exc.strerror}; it needs root)") from None
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        POLL_NS.write_text(old)
