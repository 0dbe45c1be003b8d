"""What a run costs: logging every event of a background (or detached) response, and resuming one.

    .venv/bin/python bench/runs.py                                     # sqlite, and redis when given
    eval "$(bash .ci/start-redis.sh)"; .venv/bin/python bench/runs.py  # redis from the env
    .venv/bin/python bench/runs.py --streams 40 --rounds 3 --chunks 200

Loopback only, bounded (a minute or two). bench/upstream.py is the chat backend; per store
backend, two crossfeed processes share the store: A (``[runs] detach_on_disconnect`` off) and B
(on).

(a) **CPU per upstream chunk.** The same streamed turn (``store: true``, ``--chunks`` chunks, an
unpaced backend), as: a plain streamed create on A (nothing logged), a background create
(``background: true, stream: true``) on A (every event written to the store's log; the client
reads the run's events from memory, as its process's reader), and a detached create on B (the
same, with ``background`` false). Modes alternate in rounds; CPU is crossfeed's (the process's
user+system time over the batch, /proc) divided by the upstream chunks relayed; with Redis the
redis-server's CPU is given too (its pid from ``--redis-pidfile``).

(b) **Time to first resumed event.** A background run on A, paced (``--resume-delay-ms`` per
chunk); mid-run, ``GET /v1/responses/{id}?stream=true&starting_after=N`` is timed from the request
to the first event received: on A (the run's own process: read from memory) and on B (another
process: read from the store). And, on B, the time from an event's production (the upstream's
timestamp in each delta) to its arrival at a live resumed reader.

Nothing is pinned: on a 2-core machine the load generator, the upstream, crossfeed and Redis share
the cores; figures are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import REPO, Proc, cpu_seconds, free_port, wait_ready  # noqa: E402 - bench/ is this script's own folder

MODES = ("plain", "background", "detached")


async def one_stream(session: aiohttp.ClientSession, url: str, mode: str, n: int, i: int) -> None:
    """One streamed create read to its end (a distinct input each: no turn is joined)."""
    body: dict[str, object] = {"model": f"bench:n={n}", "input": f"hi {i}", "stream": True, "store": True}
    if mode == "background":
        body["background"] = True
    async with session.post(url + "/v1/responses", json=body) as r:
        assert r.status == 200, await r.text()
        tail, done = b"", False
        async for chunk in r.content.iter_any():
            tail = tail[-64:] + chunk
            done = done or b"event: response.completed" in tail
        assert done, tail[-500:]


async def cpu_batch(url: str, pid: int, mode: str, streams: int, n: int, concurrency: int, first: int) -> float:
    """Crossfeed's CPU seconds for ``streams`` streams of the mode."""
    todo = iter(range(first, first + streams))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            for i in todo:
                await one_stream(session, url, mode, n, i)

        before = cpu_seconds(pid)
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        return cpu_seconds(pid) - before


async def start_run(session: aiohttp.ClientSession, url: str, n: int, delay_ms: int, i: int) -> str:
    body = {"model": f"bench:n={n},d={delay_ms}", "input": f"resume {i}", "background": True, "store": True}
    async with session.post(url + "/v1/responses", json=body) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["id"])


async def first_resumed(session: aiohttp.ClientSession, url: str, rid: str, after: int) -> tuple[float, list[float]]:
    """Seconds from the request to the first resumed event; then, for the live deltas, the
    milliseconds from the upstream's timestamp to their arrival (this machine's monotonic clock)."""
    start = time.perf_counter()
    first = None
    lags: list[float] = []
    params = {"stream": "true", "starting_after": str(after)}
    async with session.get(f"{url}/v1/responses/{rid}", params=params) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            if first is None:
                first = time.perf_counter() - start
            event = orjson.loads(line[6:])
            delta = event.get("delta")
            if isinstance(delta, str) and delta.startswith("T@"):
                produced = int(delta[2:14])
                lags.append((time.monotonic_ns() // 1000 % 10**12 - produced) / 1e3)
    assert first is not None
    return first, lags


async def resume_figures(args: argparse.Namespace, a: str, b: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"same": [], "other": [], "live_lag": []}
    async with aiohttp.ClientSession() as session:
        for i in range(args.resumes):
            rid = await start_run(session, a, args.resume_chunks, args.resume_delay_ms, i)
            await asyncio.sleep(0.3)  # mid-run: some events are in the log
            which = "same" if i % 2 == 0 else "other"
            first, lags = await first_resumed(session, a if which == "same" else b, rid, 3)
            out[which].append(first * 1000)
            if which == "other":
                out["live_lag"] += lags[len(lags) // 4 :]  # the live part (past the backlog)
    return out


def crossfeed(label: str, backend: str, args: argparse.Namespace, upstream: str, logdir: Path, detach: bool) -> Proc:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
    env["CROSSFEED_STORE__BACKEND"] = backend
    env["CROSSFEED_RUNS__DETACH_ON_DISCONNECT"] = "true" if detach else "false"
    if backend == "redis":
        env["CROSSFEED_REDIS_URL"] = args.redis_url
        env["CROSSFEED_STORE__KEY_PREFIX"] = f"cf-bench-runs-{os.getpid()}:"
    else:
        env["CROSSFEED_DATA_DIR"] = str(logdir / "data")
    port = free_port()
    cmd = [sys.executable, "-m", "crossfeed", "serve", "--port", str(port), "--upstream", upstream]
    return Proc(f"crossfeed-{label}", cmd, port, None, logdir / f"crossfeed-{backend}-{label}.log", cwd=REPO, env=env)


def redis_pid(args: argparse.Namespace) -> int | None:
    try:
        return int(Path(args.redis_pidfile).read_text().strip()) if args.redis_pidfile else None
    except (OSError, ValueError):
        return None


async def run_backend(args: argparse.Namespace, upstream: str, backend: str, logdir: Path) -> None:
    pa, pb = (
        crossfeed("A", backend, args, upstream, logdir, False),
        crossfeed("B", backend, args, upstream, logdir, True),
    )
    pa.start()
    pb.start()
    try:
        await asyncio.gather(wait_ready(pa, 30), wait_ready(pb, 30))
        a, b = f"http://127.0.0.1:{pa.port}", f"http://127.0.0.1:{pb.port}"
        for mode in MODES:  # warm-up
            await cpu_batch(b if mode == "detached" else a, pa.pid, mode, 4, args.chunks, 2, 10**6)
        cpu: dict[str, list[float]] = {m: [] for m in MODES}
        rcpu: dict[str, float] = dict.fromkeys(MODES, 0.0)
        rpid = redis_pid(args) if backend == "redis" else None
        for rnd in range(args.rounds):
            for mode in MODES if rnd % 2 == 0 else reversed(MODES):
                url, pid = (b, pb.pid) if mode == "detached" else (a, pa.pid)
                r0 = cpu_seconds(rpid) if rpid else 0.0
                used = await cpu_batch(url, pid, mode, args.streams, args.chunks, args.concurrency, rnd * 10**4)
                rcpu[mode] += (cpu_seconds(rpid) - r0) if rpid else 0.0
                cpu[mode].append(used / (args.streams * args.chunks) * 1e6)
        base = statistics.median(cpu["plain"])
        chunks = args.rounds * args.streams * args.chunks
        for mode in MODES:
            per = statistics.median(cpu[mode])
            redis = f"{rcpu[mode] / chunks * 1e6:.1f}" if rpid else "-"
            print(
                f"| {backend} | {mode} | {args.rounds}x{args.streams} | {per:.1f} | {per - base:+.1f} | "
                f"{100 * (per / base - 1):+.0f}% | {redis} |",
                flush=True,
            )
        res = await resume_figures(args, a, b)
        print(
            f"| {backend} | resume, same process | {len(res['same'])} | {statistics.median(res['same']):.1f} ms "
            f"| max {max(res['same']):.1f} ms | | |"
        )
        print(
            f"| {backend} | resume, other process | {len(res['other'])} | {statistics.median(res['other']):.1f} ms "
            f"| max {max(res['other']):.1f} ms | live lag median {statistics.median(res['live_lag']):.1f} ms | |",
            flush=True,
        )
    finally:
        pa.stop()
        pb.stop()


async def main_async(args: argparse.Namespace) -> int:
    logdir = Path(tempfile.mkdtemp(prefix="cf-runs-"))
    up_port = free_port()
    upstream = Proc(
        "upstream",
        [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port)],
        up_port,
        None,
        logdir / "up.log",
    )
    upstream.start()
    print(f"{args.chunks} chunks a stream, concurrency {args.concurrency}; CPU in microseconds per upstream chunk")
    print("| store | mode | streams | crossfeed CPU/chunk (us) | vs plain | | redis-server CPU/chunk (us) |")
    print("|---|---|---|---|---|---|---|", flush=True)
    try:
        await wait_ready(upstream, 30)
        for backend in args.backends:
            if backend == "redis" and not args.redis_url:
                print("| redis | skipped: no --redis-url (or CROSSFEED_TEST_REDIS_URL) | | | | | |")
                continue
            async with asyncio.timeout(args.bound):
                await run_backend(args, f"http://127.0.0.1:{up_port}/v1", backend, logdir)
    finally:
        upstream.stop()
    print(f"\nlogs: {logdir}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "redis"], choices=["sqlite", "redis", "memory"])
    ap.add_argument("--redis-url", default=os.environ.get("CROSSFEED_TEST_REDIS_URL"))
    ap.add_argument("--redis-pidfile", default=os.environ.get("CROSSFEED_TEST_REDIS_PIDFILE"))
    ap.add_argument("--streams", type=int, default=30, help="streams per mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=200, help="upstream chunks per stream")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--resumes", type=int, default=20, help="resumed runs (half on each process)")
    ap.add_argument("--resume-chunks", type=int, default=100)
    ap.add_argument("--resume-delay-ms", type=int, default=10)
    ap.add_argument("--bound", type=float, default=300.0, help="seconds: give up on a backend after this long")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
