"""Re-chunking helpers: feed the same bytes to a decoder at arbitrary boundaries."""

from __future__ import annotations

import itertools
import random


def split_points(data: bytes, seed: int, n: int) -> list[bytes]:
    """Cut ``data`` into ``n`` non-empty pieces at random (seeded, reproducible) offsets.

    ``n`` is clamped to ``1..len(data)``; ``b"".join(result) == data`` always holds.
    """
    if not data:
        return []
    n = max(1, min(n, len(data)))
    cuts = sorted(random.Random(seed).sample(range(1, len(data)), n - 1))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def byte_by_byte(data: bytes) -> list[bytes]:
    """One piece per byte (the worst case for a line splitter: CR and LF land apart)."""
    return [data[i : i + 1] for i in range(len(data))]
