"""Smoke run of the instruction counts per request (bench/instr.py) so the harness never rots.

A few requests of the forward 20-chunk cell on each target, under callgrind: it checks that each
target answered under valgrind, that callgrind's dumps were found and read, and that the table
and the JSON hold a count for each. Counts are deterministic, not timed; the one relation
checked is one the design guarantees: crossfeed does more per request than a byte copier.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.bench_scripts import run_bench
from tests.support.services import require_service

FEW = ("--warmup", "3", "--requests", "3")  # a few requests: the harness runs, nothing is timed


@pytest.mark.timeout(600)
def test_instruction_counts_per_request(tmp_path: Path) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        require_service("valgrind", "apt-get install valgrind (.ci/run installs it)")
    out = tmp_path / "instr.json"
    proc = run_bench("instr.py", "--directions", "forward", *FEW, "--json", str(out), timeout=590)
    counts = json.loads(out.read_text())["instructions"]["forward"]
    assert set(counts) == {"passthrough", "mintrans", "crossfeed"}
    assert all(n > 100_000 for n in counts.values()), counts  # a whole request each, not an idle loop
    assert counts["crossfeed"] > counts["passthrough"], counts
    for row in ("| passthrough |", "| mintrans |", "| crossfeed |", "| crossfeed / passthrough |"):
        assert row in proc.stdout, proc.stdout


@pytest.mark.timeout(600)
def test_simulated_cache_misses_per_request(tmp_path: Path) -> None:
    """``--cache-sim``: callgrind's first-level cache and branch simulation, per request, beside
    the instructions (one target, to keep the run short)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        require_service("valgrind", "apt-get install valgrind (.ci/run installs it)")
    out = tmp_path / "instr.json"
    args = ("--targets", "crossfeed", "--directions", "forward", *FEW, "--cache-sim", "--json", str(out))
    proc = run_bench("instr.py", *args, timeout=590)
    data = json.loads(out.read_text())
    events = data["events"]["forward"]["crossfeed"]
    assert events["Ir"] == data["instructions"]["forward"]["crossfeed"] > 100_000
    for name in ("I1mr", "D1mr", "D1mw", "Bcm", "Bim"):
        assert 0 < events[name] < events["Ir"], (name, events)  # counted, and far fewer than instructions
    assert "| target | Ir | I1mr | D1mr | D1mw | Bcm | Bim |" in proc.stdout, proc.stdout
