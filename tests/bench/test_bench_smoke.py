"""Smoke run of the benchmark (bench/run.py --quick) so the harness never rots.

It starts the fake upstream, the pass-through and crossfeed (both directions) as real
processes and pushes a few hundred tiny streams through each. It checks that the run finished,
that no stream failed and that the table and the summary were printed. It never checks speed:
speed is what the full benchmark reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_bench_quick_run_completes_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "run.py"),
            "--quick",
            "--json",
            str(out),
            "--logdir",
            str(tmp_path / "logs"),
            "--max-seconds",
            "120",
        ],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        stdin=subprocess.DEVNULL,
    )
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert "cpu µs/chunk" in proc.stdout, report  # the table header
    assert "SUMMARY forward vs pass-through" in proc.stdout, report
    assert "SUMMARY reverse vs pass-through" in proc.stdout, report

    doc = json.loads(out.read_text())
    assert {"cpuidle_driver", "halt_poll_ns"} <= set(doc["machine"]), doc["machine"]  # how idle CPUs wait
    assert "idle CPUs: cpuidle driver" in proc.stdout, report
    rows = doc["rows"]
    seen = {(r["direction"], r["target"]) for r in rows}
    assert seen == {(d, t) for d in ("forward", "reverse") for t in ("passthrough", "crossfeed")}, seen
    for row in rows:
        assert row["errors"] == 0, row
        assert row["completed"] > 0, row
        assert row["cpu_us_per_chunk"] is not None, row
    # every paced stream was read to its end and carried timestamps for the latency figures
    paced = [row for row in rows if row["group"] == "paced"]
    assert {(r["direction"], r["target"]) for r in paced} == seen, paced  # --quick has a paced cell
    for row in paced:
        assert row["lat_p50_ms"] is not None, row


@pytest.mark.timeout(180)
@pytest.mark.parametrize("script", ["workers.py", "store_latency.py"])
def test_the_workers_cell_and_the_store_latency_run_complete(script: str) -> None:
    """bench/workers.py (--workers 1 against 2) and bench/store_latency.py (sqlite; redis when the
    suite has one) at their smallest: every run finishes, every row is printed, no stream failed."""
    args = (
        ["--seconds", "2", "--repeat", "1", "--concurrency", "4"]
        if script == "workers.py"
        else ["--requests", "5", "--concurrency", "1", "2"]
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        stdin=subprocess.DEVNULL,
    )
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    if script == "workers.py":
        assert [r.split("|")[1].strip() for r in rows[1:]] == ["1", "2"], report
        assert all(r.rstrip(" |").endswith("| 0") for r in rows[1:]), report  # no errors
        assert "throughput --workers 2 / --workers 1:" in proc.stdout, report
    else:
        sqlite = [r for r in rows if r.startswith("| sqlite |")]
        assert len(sqlite) == 2 and all("**" in r for r in sqlite), report
