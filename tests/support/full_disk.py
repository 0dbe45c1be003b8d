"""A filesystem that fills up, for the store's disk-full tests: a private tmpfs in a mount
namespace of its own (what that needs here), and a file that takes its last byte."""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path


def namespace_problem() -> str | None:
    """Why a private tmpfs cannot be mounted here, or None."""
    if sys.platform != "linux":
        return f"a private mount namespace needs Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "unshare --mount and mount -t tmpfs need root (CI runs as root)"
    for tool in ("unshare", "nsenter", "sh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux)"
    return None


def fill(path: Path) -> int:
    """Write ``path`` until the filesystem has no byte left; returns the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1 << 9):
            block = b"\0" * size
            while True:
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written
