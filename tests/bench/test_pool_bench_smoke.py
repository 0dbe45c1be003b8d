"""Smoke run of the pool cell (bench/pool.py --quick) so it never rots: three fake replicas, one
crossfeed at a time in front of them. It checks that every cell ran without a failed stream and
that its figures are there; never speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_pool_bench_quick_run_completes(tmp_path: Path) -> None:
    out = tmp_path / "pool.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "pool.py"), "--quick", "--json", str(out)],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert all(r["errors"] == 0 for runs in data["cpu"]["runs"].values() for r in runs)
    assert set(data["cpu"]["ratios"]) == {"one", "pool1", "pool", "spread", "pool_vs_spread", "pt", "pt_spread"}
    assert all(r["cpu_us_per_chunk"] > 0 for r in data["cpu"]["runs"]["pt_spread"])  # the pass-through ran
    keyed = data["affinity"]["keyed"]
    assert keyed["hits"] == keyed["turns"] > 0  # no replica was full or down: every later turn stayed
    assert data["failover"]["runs"]["live"][0]["failovers"] == 0
    assert data["failover"]["runs"]["dead"][0]["failovers"] > 0
    assert "latency a failover adds" in proc.stdout
