"""The cyclic collector's settings (proxy/runtime/collector.py, ``server.gc_young_threshold``):
what ``tune_collector`` sets, that the threshold is what decides when a young pass runs, and that
``serve`` applies the configured one. Each runs in a process of its own: a freeze is for good."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.serve_process import SERVE, serve_process

# Prints Python's own thresholds, those tune_collector returns, whether the heap was frozen, then
# how many young passes ran while 2,000 fresh lists were allocated and kept (gc.callbacks count them).
PASSES = """
import gc, json, sys
from crossfeed.proxy.runtime.collector import tune_collector
before = gc.get_threshold()
thresholds = tune_collector(int(sys.argv[1]))
frozen = gc.get_freeze_count()
passes = []
gc.callbacks.append(lambda phase, info: passes.append(info["generation"]) if phase == "start" else None)
kept = [[] for _ in range(2_000)]
gc.callbacks.clear()
print(json.dumps({"before": before, "thresholds": thresholds, "frozen": frozen, "young_passes": passes.count(0)}))
"""


def _run(young: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PASSES, str(young)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_threshold_decides_when_young_passes_run() -> None:
    above = _run(5_000)  # 2,000 kept lists stay under it: no pass
    assert above["thresholds"] == [5_000, 10, 10]
    assert above["young_passes"] == 0
    below = _run(300)  # the same allocations cross it six times
    assert below["thresholds"] == [300, 10, 10]
    assert 5 <= below["young_passes"] <= 7  # type: ignore[operator]
    for run in (above, below):
        assert run["frozen"] > 1_000  # type: ignore[operator]  # the start-up heap (imports, tables)


def test_zero_keeps_pythons_thresholds_and_still_freezes() -> None:
    default = _run(0)
    assert default["thresholds"] == default["before"]
    assert default["frozen"] > 1_000  # type: ignore[operator]


async def test_serve_applies_the_configured_threshold(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\ngc_young_threshold = 4321\ndrain_seconds = 1\n\n[store]\nbackend = "memory"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
    flags = ["--config", str(cfg), "--upstream", "http://127.0.0.1:9/v1", "--log-level", "debug"]
    served = await serve_process([*SERVE, *flags, "--log-format", "json"], env, tmp_path / "serve.log")
    try:
        await served.stop()
    finally:
        lines = [json.loads(line) for line in served.lines().splitlines() if line.startswith("{")]
    tuned = [line for line in lines if line.get("event") == "server.collector"]
    assert len(tuned) == 1, served.lines()[-2000:]
    assert tuned[0]["thresholds"] == [4321, 10, 10]
