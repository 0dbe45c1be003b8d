"""When a save last failed, as every process on one SQLite file sees it.

A process that cannot save keeps the record in its retry queue (proxy/state/store_retry.py), and
another process that is asked for it must answer 503 ("try again"), not 404. While the disk is
full the other process learns it from its own probe write; but once space is back it may answer
a miss before the first process's retry has written its queue, and its own saves never failed.
So every failed save is also noted here: eight bytes (the time, a little-endian double) in a
file beside the database, written in place. The file is made and its bytes written when the
store opens, so noting a failure later allocates nothing: it works on the full disk it reports.
Whatever goes wrong with the file (cannot be made, a filesystem that refuses even that write)
leaves the mark silent: the probe write and each process's own health still answer.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from pathlib import Path

_TIME = struct.Struct("<d")


class FailureMark:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()  # opened by the store's thread, read and written by the loop's

    def open(self) -> None:
        """Open (or make) the file; quietly nothing when that cannot be done."""
        with self._lock:
            if self._fd is not None:
                return
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:
                return
            try:
                if os.fstat(fd).st_size < _TIME.size:
                    os.pwrite(fd, _TIME.pack(0.0), 0)
            except OSError:
                os.close(fd)
                return
            self._fd = fd

    def note(self, at: float) -> None:
        with self._lock:  # (held: a descriptor closed meanwhile could be another file's by now)
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.pwrite(self._fd, _TIME.pack(at), 0)

    def last(self) -> float | None:
        """The time of the last failed save any process noted, or None."""
        with self._lock:
            if self._fd is None:
                return None
            try:
                data = os.pread(self._fd, _TIME.size, 0)
            except OSError:
                return None
        if len(data) != _TIME.size:
            return None
        (at,) = _TIME.unpack(data)
        return at if at > 0.0 else None

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
