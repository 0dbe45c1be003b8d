"""``serve --workers 1`` against ``--workers 2`` under the same load: throughput and CPU per chunk.

    .venv/bin/python bench/workers.py                         # 3 interleaved repeats, ~2 minutes
    .venv/bin/python bench/workers.py --concurrency 64 --seconds 15 --repeat 5
    .venv/bin/python bench/run.py --workers-cell ...          # the same, after the main table

bench/upstream.py and crossfeed (forward, ``--workers N``) as subprocesses, loaded by
bench/loadgen.py from this process with streamed Responses requests (20 chunks each, unpaced, a
fixed concurrency, a fixed duration). Per run: streams per second, upstream chunks per second,
crossfeed's CPU time per upstream chunk (utime+stime of the supervisor and its workers, from
/proc), and how busy crossfeed, the upstream and the load generator kept the machine's cores.

Nothing is pinned: workers are only worth having with cores to run on. On a machine with as
few cores as workers plus the load generator and the upstream, the load generator competes with
crossfeed for the same cores, so the throughput gained is a floor of what a host with spare cores
gets; the CPU per chunk shows what the second process costs (its own event loop, its own
connection pool, the multiprocess metrics files).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402 - bench/ is this script's own folder
import upstream as upstream_mod  # noqa: E402
from run import Proc, cpu_seconds, free_port, http_get, wait_ready  # noqa: E402


async def frames(port: int) -> int:
    _, body = await http_get(port, "/stats")
    return int(orjson.loads(body)["frames"])


async def one_run(workers: int, up: Proc, logdir: Path, args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    proc = Proc(
        f"crossfeed-w{workers}",
        [
            sys.executable,
            "-m",
            "crossfeed",
            "serve",
            "--port",
            str(port),
            "--upstream",
            f"http://127.0.0.1:{up.port}/v1",
            "--workers",
            str(workers),
        ],
        port,
        None,
        logdir / f"crossfeed-w{workers}.log",
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")},
            "CROSSFEED_DATA_DIR": str(logdir / f"data-w{workers}"),
        },
    )
    proc.start()
    try:
        await wait_ready(proc, 60)
        spec = loadgen.LoadSpec(
            url=f"http://127.0.0.1:{port}/v1/responses",
            model=upstream_mod.model_name(args.chunks),
            concurrency=args.concurrency,
            duration=2.0,
        )
        await loadgen.run_load(spec)  # warm-up: every worker's pools and caches
        spec.duration = args.seconds
        f0, cpu0, up0 = await frames(up.port), cpu_seconds(proc.pid), cpu_seconds(up.pid)
        res = await loadgen.run_load(spec)
        f1, cpu1, up1 = await frames(up.port), cpu_seconds(proc.pid), cpu_seconds(up.pid)
    finally:
        proc.stop()
    wall, chunks = res["wall_s"], f1 - f0
    return {
        "streams_per_s": res["streams_per_s"],
        "chunks_per_s": chunks / wall,
        "errors": res["errors"],
        # (a window too short for the upstream to count a frame is nan, not a crash)
        "cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / chunks if chunks else float("nan"),
        "crossfeed_cores": (cpu1 - cpu0) / wall,
        "upstream_cores": (up1 - up0) / wall,
        "loadgen_cores": res["loadgen_cpu_s"] / wall,
    }


async def run_cell(args: argparse.Namespace) -> list[str]:
    logdir = Path(tempfile.mkdtemp(prefix="cf-workers-"))
    up_port = free_port()
    up = Proc(
        "upstream",
        [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port)],
        up_port,
        None,
        logdir / "upstream.log",
    )
    up.start()
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    try:
        await wait_ready(up, 30)
        for rep in range(args.repeat):
            for workers in (1, 2) if rep % 2 == 0 else (2, 1):  # A/B, then B/A
                runs[workers].append(await one_run(workers, up, logdir, args))
    finally:
        up.stop()
    lines = [
        f"workers cell: c{args.concurrency} n{args.chunks} text, {args.seconds:g} s per run, {args.repeat} "
        f"interleaved repeats, {os.cpu_count()} cores, nothing pinned (medians)",
        "| workers | streams/s | chunks/s | CPU us/chunk | crossfeed cores | upstream cores | loadgen cores | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workers, got in runs.items():

        def med(key: str, got: list[dict[str, float]] = got) -> float:
            return statistics.median(r[key] for r in got)

        lines.append(
            f"| {workers} | {med('streams_per_s'):.0f} | {med('chunks_per_s'):.0f} | "
            f"{med('cpu_us_per_chunk'):.1f} | {med('crossfeed_cores'):.2f} | {med('upstream_cores'):.2f} | "
            f"{med('loadgen_cores'):.2f} | {sum(r['errors'] for r in got):.0f} |"
        )
    one, two = (statistics.median(r["streams_per_s"] for r in runs[w]) for w in (1, 2))
    lines.append(f"throughput --workers 2 / --workers 1: {two / one:.2f}x")
    return lines


def add_arguments(ap: argparse.ArgumentParser, prefix: str = "") -> None:
    ap.add_argument(f"--{prefix}concurrency", type=int, default=32)
    ap.add_argument(f"--{prefix}seconds", type=float, default=10.0)
    ap.add_argument(f"--{prefix}repeat", type=int, default=3)
    ap.add_argument(f"--{prefix}chunks", type=int, default=20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    lines = asyncio.run(run_cell(ap.parse_args()))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
