"""The C allocator's thresholds, set once at start-up so a large request body costs no page faults.

A Codex session on HTTP resends its whole history every turn: a few MiB of JSON, read, parsed,
mapped and encoded again per request. glibc's malloc serves a block above its *mmap threshold*
with a fresh ``mmap`` and unmaps it on ``free``, and trims the heap's free top above its *trim
threshold*; either way the next request touches new pages, and the kernel faults each one in
(zeroed) again. The thresholds glibc picks move by themselves (up to 32 MiB and 64 MiB) as
blocks come and go, but orjson's parse buffer for a body of 3 MiB is about 38 MiB, above the
ceiling: every such request mapped, faulted in and unmapped it again (815 faults of 4 KiB each
for a 3 MiB body), and its other large blocks followed the thresholds' moves.

``tune_allocator`` fixes both thresholds at ``retain`` bytes (``server.allocator_retain_mb``):
blocks below it come from the heap, and up to that much freed memory stays for the next request
instead of going back to the kernel. A body's parse then faults nothing in once the first
request has grown the heap (docs/DESIGN.md "The allocator's thresholds"; bench/account.py
``codex3mb``). What stays is at most what glibc's own moving thresholds may keep; larger blocks
(bodies over about 5 MiB) are mapped and returned as before.

Only glibc has these parameters: with another C library (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
from typing import Any

MIB = 1024 * 1024
DEFAULT_RETAIN_MB = 64

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def _glibc() -> Any | None:
    """The process's C library, if it is glibc (the one with ``gnu_get_libc_version``)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - an attribute that only glibc has
        return libc
    except (OSError, AttributeError):
        return None


def tune_allocator(retain_mb: int, libc: Any | None = None) -> str:
    """Set glibc's mmap and trim thresholds to ``retain_mb`` MiB. Returns what happened, for
    the start-up log: ``"off"`` (``retain_mb`` 0), ``"not glibc"``, ``"refused"`` (mallopt said
    no) or ``"retain N MiB"``."""
    if retain_mb <= 0:
        return "off"
    libc = libc if libc is not None else _glibc()
    if libc is None:
        return "not glibc"
    size = retain_mb * MIB
    ok = libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(size)) == 1
    ok = libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(size)) == 1 and ok
    return f"retain {retain_mb} MiB" if ok else "refused"
