"""Production id factory: prefix + random hex, like the OpenAI API's ids.

The randomness comes from the OS (``os.urandom``: ids must not be guessable, since a stored
response is fetched by its id), read 4 KiB at a time instead of one system call per id: a
request makes two or three ids, and the call costs five times the slicing. A forked child
drops the pool it inherited, so two processes never hand out the same bytes.
"""

from __future__ import annotations

import os

_ID_BYTES = 16
_POOL_BYTES = 4096


class _Pool:
    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data = b""
        self.pos = 0

    def drop(self) -> None:
        self.data, self.pos = b"", 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.drop)


class RandomIds:
    __slots__ = ()

    def new(self, prefix: str) -> str:
        pool = _POOL
        pos = pool.pos
        end = pos + _ID_BYTES
        if end > len(pool.data):
            pool.data, pos, end = os.urandom(_POOL_BYTES), 0, _ID_BYTES
        pool.pos = end
        return prefix + pool.data[pos:end].hex()
