"""Smoke run of the bytecode counts per request (bench/bytecodes.py) so the harness never rots.

A few requests of the forward 20-chunk cell on the pass-through and on crossfeed, each traced
in its own process: each target answered under the tracer, its counts came back, and the table
and the JSON hold them. The one relation checked is one the design guarantees: crossfeed runs
more distinct code per request than a byte copier.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench_scripts import run_bench


@pytest.mark.timeout(300)
def test_bytecodes_per_request(tmp_path: Path) -> None:
    out = tmp_path / "bytecodes.json"
    args = ("--targets", "passthrough,crossfeed", "--directions", "forward", "--warmup", "3", "--requests", "3")
    proc = run_bench("bytecodes.py", *args, "--top", "3", "--json", str(out), timeout=290)
    figures = json.loads(out.read_text())["per_request"]["forward"]
    assert set(figures) == {"passthrough", "crossfeed"}
    for target, f in figures.items():
        # a whole request each (thousands of opcodes in hundreds of frames), not an idle loop
        assert f["bytecodes"] > 2_000 and f["calls"] > 50, (target, f)
        assert f["calls"] < f["bytecodes"] and f["code objects"] <= f["64-byte blocks"], (target, f)
    assert figures["crossfeed"]["code objects"] > figures["passthrough"]["code objects"], figures
    assert "| passthrough |" in proc.stdout and "| crossfeed |" in proc.stdout, proc.stdout
    assert "functions with the most bytecodes per request" in proc.stdout, proc.stdout
