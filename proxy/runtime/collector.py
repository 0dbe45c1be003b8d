"""The cyclic garbage collector's settings for a serving process (``server.gc_young_threshold``).

Everything imported and built at start-up lives as long as the process: ``tune_collector``
freezes it (``gc.freeze``), so no pass of the collector walks it again.

A pass over the young generation runs once the tracked objects allocated since the last one,
minus those freed, pass the young threshold. Each pass walks the young objects still alive,
and with many streams open those are mostly the open requests' own: their coroutines, closures,
dicts, aiohttp's requests and responses (about 190 per short streamed turn). Streaming makes
no reference cycles: passes under load found nothing to free. With many short turns in flight
the count crosses a low threshold again and again as turns start and end, so each pass walks
the same open turns' objects; a threshold above how much that count swings leaves the passes
to real growth (docs/DESIGN.md, "Collector passes").
"""

from __future__ import annotations

import gc

# Net allocations between two young-generation passes (CPython 3.11's own: 700).
DEFAULT_GC_YOUNG = 10_000


def tune_collector(young: int) -> tuple[int, ...]:
    """Freeze the start-up heap, then collect the young generation every ``young`` net
    allocations (0: keep Python's thresholds). Returns the thresholds now in force."""
    gc.collect()
    gc.freeze()
    if young:
        gc.set_threshold(young, 10, 10)
    return gc.get_threshold()
