"""Production ids: random, unique, and never shared between a process and its forked child."""

from __future__ import annotations

import os
import re

from crossfeed.proxy.runtime.ids import RandomIds


def test_ids_are_prefixed_random_hex_and_unique() -> None:
    ids = RandomIds()
    made = [ids.new("resp_") for _ in range(5000)]  # several refills of the pool
    assert all(re.fullmatch(r"resp_[0-9a-f]{32}", i) for i in made)
    assert len(set(made)) == len(made)
    assert RandomIds().new("msg_") not in made  # instances draw from one pool, never repeat it


def test_forked_child_does_not_repeat_the_parent() -> None:
    ids = RandomIds()
    ids.new("x_")  # the pool is filled before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next ids and leave at once
        os.write(write, " ".join(ids.new("x_") for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode().split()
    os.close(read)
    parent = [ids.new("x_") for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(parent)
