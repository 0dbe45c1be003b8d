"""What "saved before final" costs: the wait a stored response's terminal event takes for its save.

    .venv/bin/python bench/store_latency.py                       # sqlite, and redis when one is given
    .venv/bin/python bench/store_latency.py --redis-url redis://127.0.0.1:6379/0 --requests 400

crossfeed (one process, forward) in front of bench/upstream.py; for each store backend, streamed
requests with ``store: true`` and ``store: false`` interleaved, at concurrency 1 and 16. Each
stream is timed from sending the request to the arrival of ``response.completed``. With
``store: true`` the terminal event waits for the save (proxy/turns/exchange.py, bounded by ``[store]
save_timeout_seconds``), so the difference of the medians is what saving before final adds. (The
gap between the last text delta and the terminal event says nothing here: the events of the
upstream's last read, the closing ones included, go out together, after the save.)

Nothing is pinned: on a 2-core machine the load generator, the upstream, crossfeed and Redis share
the cores; figures are medians over every stream of a configuration.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import REPO, Proc, base_env, free_port, wait_ready  # noqa: E402 - bench/ is this script's own folder

COMPLETED = b'"type":"response.completed"'


async def one_stream(session: aiohttp.ClientSession, url: str, store: bool, n: int) -> float:
    """Seconds from the request to its ``response.completed``."""
    body = {"model": f"bench:n={n}", "input": "hi", "stream": True, "store": store}
    start = time.perf_counter()
    async with session.post(url + "/v1/responses", json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if COMPLETED in line:
                return time.perf_counter() - start
    raise AssertionError("the stream ended without response.completed")


async def measure(url: str, requests: int, concurrency: int, n: int) -> dict[bool, list[float]]:
    out: dict[bool, list[float]] = {True: [], False: []}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        for i in range(3):  # warm-up: connections, the store's first writes
            await one_stream(session, url, i % 2 == 0, n)
        todo = iter(range(requests * 2))

        async def worker() -> None:
            for i in todo:
                store = i % 2 == 0  # interleaved, so drift hits both alike
                out[store].append(await one_stream(session, url, store, n))

        await asyncio.gather(*[worker() for _ in range(concurrency)])
    return out


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_backend(args: argparse.Namespace, upstream_url: str, backend: str, logdir: Path) -> list[str]:
    cwd, env = base_env(args.tree) if args.tree else (REPO, dict(os.environ))
    env = {k: v for k, v in env.items() if not k.startswith("CROSSFEED_")}
    env["CROSSFEED_STORE__BACKEND"] = backend
    if backend == "redis":
        env["CROSSFEED_REDIS_URL"] = args.redis_url
        env["CROSSFEED_STORE__KEY_PREFIX"] = f"cf-bench-{os.getpid()}:"
    else:
        env["CROSSFEED_DATA_DIR"] = str(logdir / "data")
    port = free_port()
    proc = Proc(
        f"crossfeed-{backend}",
        [sys.executable, "-m", "crossfeed", "serve", "--port", str(port), "--upstream", upstream_url],
        port,
        None,
        logdir / f"crossfeed-{backend}.log",
        cwd=cwd,
        env=env,
    )
    proc.start()
    rows = []
    try:
        await wait_ready(proc, 30)
        for c in args.concurrency:
            got = await measure(f"http://127.0.0.1:{port}", args.requests, c, args.chunks)
            on, off = got[True], got[False]
            added = statistics.median(on) - statistics.median(off)
            rows.append(
                f"| {backend} | {c} | {len(on)} | {ms(off, 0.5):.2f} | {ms(on, 0.5):.2f} | **{1000 * added:+.2f}** | "
                f"{ms(off, 0.99):.2f} | {ms(on, 0.99):.2f} |"
            )
            print(rows[-1], flush=True)
    finally:
        proc.stop()
    return rows


async def main_async(args: argparse.Namespace) -> int:
    logdir = Path(tempfile.mkdtemp(prefix="cf-store-latency-"))
    up_port = free_port()
    upstream = Proc(
        "upstream",
        [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port)],
        up_port,
        None,
        logdir / "upstream.log",
    )
    upstream.start()
    print(
        "| store | concurrency | streams each | store=false median (ms) | store=true median | added | "
        "store=false p99 | store=true p99 |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    try:
        await wait_ready(upstream, 30)
        for backend in args.backends:
            if backend == "redis" and not args.redis_url:
                print("| redis | - | skipped: no --redis-url (or CROSSFEED_TEST_REDIS_URL) | | | | | |")
                continue
            await run_backend(args, f"http://127.0.0.1:{up_port}/v1", backend, logdir)
    finally:
        upstream.stop()
    print(f"\nlogs: {logdir}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "redis"], choices=["sqlite", "redis", "memory"])
    ap.add_argument("--redis-url", default=os.environ.get("CROSSFEED_TEST_REDIS_URL"))
    ap.add_argument("--requests", type=int, default=300, help="streams per store setting and concurrency")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--chunks", type=int, default=20, help="upstream chunks per stream")
    ap.add_argument(
        "--tree",
        default=None,
        metavar="DIR",
        help="run crossfeed from this source tree (another build, e.g. one that saved after the terminal event)",
    )
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
