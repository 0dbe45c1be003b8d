"""``reserve_descriptors``: the descriptor table is grown once at start-up, so it never grows
(and stalls the event loop for an RCU grace period) while streams open. Run in subprocesses:
the limits and the table belong to the process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")

PROBE = """
import json, os, resource, sys
sys.path.insert(0, {repo!r})
from crossfeed.proxy.cli.main import reserve_descriptors

def fdsize():
    for line in open("/proc/self/status"):
        if line.startswith("FDSize:"):
            return int(line.split()[1])

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, hard))
before = fdsize()
kept = None
if {inherited}:
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, {soft} - 1)
    os.close(fd)
size = reserve_descriptors({limit})
if {inherited}:
    kept = os.fstat({soft} - 1).st_ino == os.stat(os.devnull).st_ino
print(json.dumps({{"before": before, "after": fdsize(), "size": size, "hard": hard,
                  "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "kept": kept}}))
"""


def probe(soft: int, limit: int, inherited: bool = False) -> dict:
    code = PROBE.format(repo=str(REPO), soft=soft, limit=limit, inherited=inherited)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_the_table_is_grown_to_the_raised_limit() -> None:
    r = probe(soft=256, limit=4096)
    want = min(4096, r["hard"])
    assert r["before"] < want  # a fresh interpreter starts with a small table
    assert r["soft"] == want  # the soft limit is raised towards the hard one, up to the cap
    assert r["size"] == want
    assert r["after"] >= want  # the kernel rounds the table up to a power of two


def test_the_cap_bounds_the_table() -> None:
    r = probe(soft=256, limit=1024)
    assert r["soft"] == min(1024, r["hard"])
    assert r["after"] >= r["size"] == min(1024, r["hard"])


def test_an_open_descriptor_at_the_top_is_left_open() -> None:
    r = probe(soft=512, limit=512, inherited=True)
    assert r["kept"] is True
    assert r["size"] == 512
