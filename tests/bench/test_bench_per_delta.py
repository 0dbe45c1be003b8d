"""Smoke run of the in-process instructions per upstream delta (bench/per_delta.py) so the
harness never rots: two layers (a read a frame, four a read), two streams counted, under callgrind. It checks that every child
ran and was counted and that the figures are per delta: more than a frame's SSE split, less than a
stream (a stream of 20 deltas costs well over 200,000)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import require_service

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_instructions_per_delta(tmp_path: Path) -> None:
    if shutil.which("valgrind") is None:
        require_service("valgrind", "apt-get install valgrind (.ci/run installs it)")
    out = tmp_path / "per_delta.json"
    argv = [sys.executable, str(REPO / "bench" / "per_delta.py"), "--layers", "paced,reads4", "--loops", "2"]
    proc = subprocess.run([*argv, "--json", str(out)], capture_output=True, text=True, timeout=590, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) == {"forward paced", "reverse paced", "forward reads4", "reverse reads4"}
    assert all(2_000 < n < 100_000 for n in figures.values()), figures
    assert "| paced |" in proc.stdout, proc.stdout
    # reads of four frames: per delta, and each stream's whole count (20 deltas: over 200,000)
    streams = [line for line in proc.stdout.splitlines() if line.startswith("| reads4 |")]
    assert len(streams) == 2, proc.stdout
    assert all(int(n.replace(",", "")) > 200_000 for n in streams[1].split("|")[2:6]), streams
