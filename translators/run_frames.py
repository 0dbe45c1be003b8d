"""A run's frames written at once: both stream machines' runs (translators/forward/frame_runs.py,
translators/reverse/text_runs.py) write frames that differ only in a text and a sequence number.

``frames`` joins them in one call, the list of their parts built by slice assignment (no loop
in Python); ``numbers`` gives the sequence numbers as a slice of a table of those written
before, where writing each one costs a format call (about 200 instructions).
"""

from __future__ import annotations

from typing import Final

_WRITTEN: list[bytes] = []  # b"0", b"1"... as far as a stream has needed, each written once
_WRITTEN_MAX: Final = 1 << 15  # (about 1.5 MB; a later number is written each time it is needed)


def numbers(first: int, n: int) -> list[bytes]:
    """``first``, ``first + 1``... as decimal bytes, ``n`` of them."""
    stop = first + n
    have = len(_WRITTEN)
    if have < stop <= _WRITTEN_MAX:
        _WRITTEN.extend(map(b"%d".__mod__, range(have, min(max(stop, 2 * have, 1024), _WRITTEN_MAX))))
    if stop <= len(_WRITTEN):
        return _WRITTEN[first:stop]
    return list(map(b"%d".__mod__, range(first, stop)))


def frames(lead: bytes, first: list[bytes], mid: bytes, second: list[bytes], close: bytes, glue: bytes) -> bytes:
    """``lead + first[k] + mid + second[k] + close`` for each ``k`` both lists have, joined;
    ``glue`` is ``close + lead`` (the caller keeps it: what goes between two frames)."""
    n = min(len(first), len(second))
    if not n:
        return b""
    parts: list[bytes] = [b"", mid, b"", glue] * n
    parts[0::4] = first if len(first) == n else first[:n]
    parts[2::4] = second if len(second) == n else second[:n]
    parts[-1] = close
    parts[0] = lead + parts[0]  # (the lead joins the first piece, not the whole run: one copy less)
    return b"".join(parts)
