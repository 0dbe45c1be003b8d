"""Smoke run of bench/client_cost.py (aiohttp's request machinery against a lean call on its own
connector and parser), so the measurement never rots: both modes make their calls in processes of
their own and read the same whole stream. The time pass only (callgrind would add half a minute to
CI; what it adds here, the dump's parsing, is bench/account.py's and tested there). Nothing timed
is compared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_client_cost_modes(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    argv = [sys.executable, str(REPO / "bench" / "client_cost.py"), "--warmup", "3", "--requests", "5"]
    argv += ["--time-requests", "10", "--no-callgrind", "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results) == {"aiohttp", "lean"}
    sizes = {tuple(r["body_bytes"]) for r in results.values()}
    assert len(sizes) == 1 and next(iter(sizes))[0] > 1000, results  # one whole stream, the same in both
    assert all(r["cpu_us"] > 0 for r in results.values()), results
    for row in ("| aiohttp | - |", "| lean | - |"):
        assert row in proc.stdout, proc.stdout
