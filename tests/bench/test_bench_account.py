"""Smoke run of the per-request account (bench/account.py) so the harness never rots.

The time pass only (valgrind may be missing), a few requests of each short turn: it checks that
the hooks found every function they wrap in this tree and that the phase rows and totals were
printed and recorded. It never checks speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_account_time_pass_completes(tmp_path: Path) -> None:
    out = tmp_path / "account.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "account.py"),
            "--no-callgrind",
            "--scenarios",
            "forward,reverse",
            "--requests",
            "30",
            "--warmup",
            "10",
            "--skip",
            "2",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
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
    assert "hooks not found" not in proc.stdout, report
    for row in ("request read and parse", "per-chunk work (relay)", "terminal event and Response body", "metrics"):
        assert f"| {row} |" in proc.stdout, report
    doc = json.loads(out.read_text())
    for scenario in ("forward", "reverse"):
        row = doc["results"]["time"][scenario]
        assert row["requests"] >= 20, row
        assert row["bare"] > 0 and row["phases"]["chunks"] > 0, row
    forward = doc["results"]["time"]["forward"]
    assert forward["phases"]["mapping"] > 0 and forward["phases"]["lifecycle"] > 0, forward
