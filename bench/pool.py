"""The pool cell: one crossfeed in front of three fake replicas (bench/upstream.py, each its own
process) as one pooled upstream (README "Pools").

    .venv/bin/python bench/pool.py                       # ~2 minutes on 2 cores
    .venv/bin/python bench/pool.py --repeat 5 --seconds 8 --json pool.json
    .venv/bin/python bench/pool.py --quick               # ~20 s, what the smoke test runs

Three measurements:

1. **CPU per chunk, pool against one upstream.** The same load (bench/loadgen.py: streamed
   Responses requests of 20 chunks, paced 5 ms apart, c32: the same offered load whichever
   upstream answers, since three replica processes sharing one core with the load generator
   serve less unpaced load than one, and CPU per chunk falls as a process gets busier) on
   crossfeed with ``base_url`` = replica 0,
   then on crossfeed with ``base_urls`` = the three replicas (unkeyed calls: least busy, ties
   take turns), interleaved A/B then B/A; crossfeed's utime+stime per upstream chunk (frames
   counted by the replicas' ``/stats``). The goal: the pool within 3 % of one upstream. Two
   more arms tell the pool's code from the replicas' number: the pool of three URLs of one
   replica process (127.0.0.1, .2, .3: chunks arrive as from one backend), and one
   ``base_url`` the kernel spreads over the three processes (SO_REUSEPORT, no pool code). The
   byte pass-through (bench/passthrough.py, chat requests) in front of one replica and in front
   of the same three processes shows what three replicas instead of one cost a proxy that has
   neither a pool nor a translation (``--no-passthrough`` leaves these two arms out).
2. **Affinity hit rate** over a multi-turn keyed workload: conversations of several turns, run
   several at once, half chained with ``previous_response_id``, half keyed by
   ``prompt_cache_key``; a hit is a turn answered (``x-crossfeed-replica``) by the replica of its
   conversation's first turn. The same workload without keys (each turn a fresh request) shows
   what chance gives.
3. **Failover latency.** Sequential unkeyed streamed requests; time to the first byte of the
   answer on a pool of three live replicas, and on a pool whose first replica refuses
   connections (a port nothing listens on) and never cools down
   (``failures_before_cooldown`` = 10^6), so every call that picks it first fails over. The
   latency a failover adds = (total TTFB with the dead replica - total TTFB with three live
   ones) / failovers (``crossfeed_upstream_failovers_total``). With the default cooldown, the
   same run shows how few calls pay it.

Pinning (2+ cores): crossfeed on CPU 1; the replicas and this process (the load) on CPU 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402 - bench/ is this script's own folder
import upstream as upstream_mod  # noqa: E402
from run import Proc, cpu_seconds, free_port, http_get, wait_ready  # noqa: E402

PINNED = (os.cpu_count() or 1) >= 2
CROSSFEED_CPU = 1 if PINNED else None
OTHERS_CPU = 0 if PINNED else None
STORE = "sqlite"  # --store
_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]+)"')


# ------------------------------------------------------------------------------------ processes


def start_replicas(n: int, logdir: Path, shared_port: int | None = None) -> list[Proc]:
    """``n`` fake replicas, each its own process on its own port; each also on ``shared_port``
    (SO_REUSEPORT) when given: one address the kernel spreads connections over, as a load
    balancer in front of them does."""
    procs = []
    for i in range(n):
        port = free_port()
        # replica 0 also listens on 127.0.0.2 and .3: the pool1 arm's three replicas are one process
        hosts = "127.0.0.1,127.0.0.2,127.0.0.3" if i == 0 else "127.0.0.1"
        proc = Proc(
            f"replica{i}",
            [sys.executable, str(HERE / "upstream.py"), "--port", str(port), "--host", hosts]
            + (["--shared-port", str(shared_port)] if shared_port else []),
            port,
            OTHERS_CPU,
            logdir / f"replica{i}.log",
        )
        proc.start()
        procs.append(proc)
    return procs


def write_config(path: Path, urls: list[str], data_dir: Path, **keys: Any) -> Path:
    lines = ["[store]", f'backend = "{STORE}"', f'data_dir = "{data_dir}"', "", "[[upstreams]]", 'name = "gpu"']
    lines.append(f"base_urls = {orjson.dumps(urls).decode()}" if len(urls) > 1 else f'base_url = "{urls[0]}"')
    lines += [f"{k} = {v}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


async def start_crossfeed(name: str, config: Path, logdir: Path) -> Proc:
    port = free_port()
    proc = Proc(
        name,
        [sys.executable, "-m", "crossfeed", "serve", "--config", str(config), "--port", str(port)],
        port,
        CROSSFEED_CPU,
        logdir / f"{name}.log",
        env={k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")},
    )
    proc.start()
    await wait_ready(proc, 60)
    return proc


def wakeups(pid: int) -> int:
    """The process's voluntary context switches (its event loop going to sleep and waking)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


async def frames(replicas: list[Proc]) -> int:
    total = 0
    for r in replicas:
        _, body = await http_get(r.port, "/stats")
        total += int(orjson.loads(body)["frames"])
    return total


async def failovers(proc: Proc) -> float:
    _, body = await http_get(proc.port, "/metrics", 5.0)
    found = re.findall(rb"^crossfeed_upstream_failovers_total\{[^}]*\} ([0-9.e+]+)$", body, re.M)
    return sum(float(v) for v in found)


# ------------------------------------------------------------------------------------ 1. CPU


async def start_passthrough(name: str, url: str, logdir: Path) -> Proc:
    """bench/passthrough.py in front of ``url``, on crossfeed's CPU and its event loop (uvloop)."""
    port = free_port()
    argv = [sys.executable, str(HERE / "passthrough.py"), "--port", str(port), "--upstream", url, "--uvloop"]
    proc = Proc(name, argv, port, CROSSFEED_CPU, logdir / f"{name}.log")
    proc.start()
    await wait_ready(proc, 30)
    return proc


async def cpu_run(name: str, urls: list[str], replicas: list[Proc], logdir: Path, args: argparse.Namespace) -> dict:
    """One measured run: crossfeed in front of ``urls`` (one: ``base_url``, more: a pool), or,
    for an arm named ``pt-*``, the byte pass-through in front of the one URL (chat requests: it
    copies what the replica streams)."""
    if name.startswith("pt-"):
        proc, path = await start_passthrough(name, urls[0], logdir), "/v1/chat/completions"
    else:
        config = write_config(logdir / f"{name}.toml", urls, logdir / f"data-{name}")
        proc, path = await start_crossfeed(name, config, logdir), "/v1/responses"
    try:
        spec = loadgen.LoadSpec(
            url=f"http://127.0.0.1:{proc.port}{path}",
            model=upstream_mod.model_name(args.chunks, d=args.delay_ms),
            concurrency=args.concurrency,
            duration=2.0,
        )
        await loadgen.run_load(spec)  # warm-up: connection pools, caches
        spec.duration = args.seconds
        f0, cpu0, w0 = await frames(replicas), cpu_seconds(proc.pid), wakeups(proc.pid)
        res = await loadgen.run_load(spec)
        f1, cpu1, w1 = await frames(replicas), cpu_seconds(proc.pid), wakeups(proc.pid)
    finally:
        proc.stop()
    chunks = f1 - f0
    return {
        "streams_per_s": res["streams_per_s"],
        "errors": res["errors"],
        "cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / chunks if chunks else float("nan"),
        "chunks_per_wakeup": chunks / (w1 - w0) if w1 > w0 else float("nan"),
    }


ARMS = {
    "one": "one base_url",
    "pool1": "pool of 3 URLs, one replica process",
    "pool": "pool of 3 replica processes",
    "spread": "one base_url over the 3 replica processes (SO_REUSEPORT), no pool",
    "pt": "pass-through, one replica (its own yardstick)",
    "pt_spread": "pass-through over the 3 replica processes (SO_REUSEPORT)",
}


async def cpu_cell(replicas: list[Proc], logdir: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    urls = [f"http://127.0.0.1:{r.port}/v1" for r in replicas]
    port = replicas[0].port  # three addresses of one process: the pool's cost without the replicas'
    arms = {
        "one": urls[:1],
        "pool1": [f"http://127.0.0.{i}:{port}/v1" for i in (1, 2, 3)],
        "pool": urls,
        "spread": [f"http://127.0.0.1:{args.shared_port}/v1"],
    }
    if args.passthrough:  # what three processes cost a proxy with no pool and no translation
        arms |= {"pt": urls[:1], "pt_spread": arms["spread"]}
    runs: dict[str, list[dict]] = {k: [] for k in arms}
    for rep in range(args.repeat):
        for which in list(arms) if rep % 2 == 0 else list(arms)[::-1]:
            prefix = "pt" if which.startswith("pt") else "cf"
            runs[which].append(await cpu_run(f"{prefix}-{which}-{rep}", arms[which], replicas, logdir, args))
    lines = [
        f"CPU per chunk: c{args.concurrency} n{args.chunks} d{args.delay_ms:g} text, {args.seconds:g} s per run, "
        f"{args.repeat} interleaved repeats, crossfeed {'on CPU 1' if PINNED else 'unpinned'}, store {STORE}",
        "| upstream | streams/s | CPU us/chunk (median) | per run | vs the same proxy on one replica (median of "
        "per-repeat ratios) "
        "| chunks per wakeup | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {}
    for which, label in ARMS.items():
        if which not in runs:
            continue
        these = runs[which]
        base = runs["pt" if which.startswith("pt") else "one"]  # each proxy against itself on one replica
        ratios[which] = [r["cpu_us_per_chunk"] / o["cpu_us_per_chunk"] for o, r in zip(base, these, strict=True)]
        per_run = ", ".join(f"{r['cpu_us_per_chunk']:.1f}" for r in these)
        lines.append(
            f"| {label} | {statistics.median(r['streams_per_s'] for r in these):.0f} | "
            f"{statistics.median(r['cpu_us_per_chunk'] for r in these):.1f} | {per_run} | "
            f"{statistics.median(ratios[which]):.3f} ({', '.join(f'{x:.3f}' for x in ratios[which])}) | "
            f"{statistics.median(r['chunks_per_wakeup'] for r in these):.1f} | {sum(r['errors'] for r in these):.0f} |"
        )
    own = [p["cpu_us_per_chunk"] / o["cpu_us_per_chunk"] for p, o in zip(runs["pool"], runs["spread"], strict=True)]
    ratios["pool_vs_spread"] = own
    lines.append(
        f"the pool's own cost: one process {statistics.median(ratios['pool1']):.3f}x one base_url; three processes "
        f"{statistics.median(own):.3f}x one base_url over the same three ({', '.join(f'{x:.3f}' for x in own)})"
    )
    if "pt_spread" in ratios:
        lines.append(
            f"three replica processes instead of one: crossfeed with the pool {statistics.median(ratios['pool']):.3f}x, "
            f"the pass-through {statistics.median(ratios['pt_spread']):.3f}x (each against itself on one replica)"
        )
    return lines, {"runs": runs, "ratios": ratios}


# ------------------------------------------------------------------------------------ turns


async def turn(session: aiohttp.ClientSession, port: int, body: dict[str, Any]) -> tuple[str, float, str | None]:
    """One streamed turn: its replica, its time to the first byte (s), its Response id."""
    t0 = time.perf_counter()
    async with session.post(f"http://127.0.0.1:{port}/v1/responses", json={**body, "stream": True}) as resp:
        first = await resp.content.readany()
        ttfb = time.perf_counter() - t0
        rest = first + await resp.content.read()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {rest[:300]!r}")
    found = _RESPONSE_ID.search(rest)
    return resp.headers.get("x-crossfeed-replica", "?"), ttfb, found.group(1).decode() if found else None


# ------------------------------------------------------------------------------------ 2. affinity


async def conversation(session: aiohttp.ClientSession, port: int, n: int, turns: int, keyed: bool) -> list[str]:
    """The replicas of one conversation's turns, in order."""
    model = upstream_mod.model_name(20)
    chained = n % 2 == 0
    seen: list[str] = []
    previous: str | None = None
    for t in range(turns):
        body: dict[str, Any] = {"model": model, "input": f"conversation {n} turn {t}"}
        if keyed and chained and previous is not None:
            body["previous_response_id"] = previous
        elif keyed and not chained:
            body["prompt_cache_key"] = f"bench-conversation-{n}"
        replica, _, previous = await turn(session, port, body)
        seen.append(replica)
    return seen


async def affinity_cell(replicas: list[Proc], logdir: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    urls = [f"http://127.0.0.1:{r.port}/v1" for r in replicas]
    proc = await start_crossfeed("cf-affinity", write_config(logdir / "aff.toml", urls, logdir / "data-aff"), logdir)
    out: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for keyed in (True, False):
                gate = asyncio.Semaphore(args.conversations_at_once)

                async def one(n: int, keyed: bool = keyed, gate: asyncio.Semaphore = gate) -> list[str]:
                    async with gate:
                        return await conversation(session, proc.port, n, args.turns, keyed)

                convs = await asyncio.gather(*(one(n) for n in range(args.conversations)))
                later = [r == c[0] for c in convs for r in c[1:]]
                spread = {label: sum(c.count(label) for c in convs) for label in sorted({r for c in convs for r in c})}
                out["keyed" if keyed else "unkeyed"] = {"hits": sum(later), "turns": len(later), "spread": spread}
    finally:
        proc.stop()
    lines = [
        f"affinity: {args.conversations} conversations x {args.turns} turns, {args.conversations_at_once} at once "
        "(half previous_response_id chains, half prompt_cache_key)",
        "| workload | later turns on their first turn's replica | turns per replica |",
        "|---|---|---|",
    ]
    for name, got in out.items():
        rate = 100.0 * got["hits"] / got["turns"]
        lines.append(f"| {name} | {got['hits']}/{got['turns']} ({rate:.1f} %) | {got['spread']} |")
    return lines, out


# ------------------------------------------------------------------------------------ 3. failover


async def ttfb_run(name: str, urls: list[str], logdir: Path, args: argparse.Namespace, **keys: Any) -> dict:
    config = write_config(logdir / f"{name}.toml", urls, logdir / f"data-{name}", **keys)
    proc = await start_crossfeed(name, config, logdir)
    body = {"model": upstream_mod.model_name(20), "input": "failover"}
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(10):  # warm-up (and, with a dead replica, its first failovers)
                await turn(session, proc.port, body)
            before = await failovers(proc)
            times = [(await turn(session, proc.port, body))[1] for _ in range(args.failover_requests)]
            moved = await failovers(proc) - before
    finally:
        proc.stop()
    return {"ttfb_ms": [t * 1000 for t in times], "failovers": moved}


async def failover_cell(replicas: list[Proc], logdir: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    live = [f"http://127.0.0.1:{r.port}/v1" for r in replicas]
    dead = [f"http://127.0.0.1:{free_port()}/v1", *live[1:]]
    runs: dict[str, list[dict]] = {"live": [], "dead": [], "dead_default": []}
    for rep in range(args.repeat):
        runs["live"].append(await ttfb_run(f"cf-live-{rep}", live, logdir, args))
        runs["dead"].append(await ttfb_run(f"cf-dead-{rep}", dead, logdir, args, failures_before_cooldown=10**6))
        runs["dead_default"].append(await ttfb_run(f"cf-deadd-{rep}", dead, logdir, args))
    added = []
    for a, b in zip(runs["live"], runs["dead"], strict=True):
        if b["failovers"]:
            added.append((sum(b["ttfb_ms"]) - sum(a["ttfb_ms"])) / b["failovers"])
    lines = [
        f"failover: {args.failover_requests} sequential streamed requests per run, {args.repeat} repeats; "
        "TTFB = time to the answer's first byte",
        "| pool | TTFB p50 ms | p90 ms | max ms | failovers per run |",
        "|---|---|---|---|---|",
    ]
    names = {
        "live": "3 live replicas",
        "dead": "replica 0 refuses, never cools down",
        "dead_default": "replica 0 refuses, default cooldown (3 failures, 10 s)",
    }
    for key, got in runs.items():
        allt = sorted(t for r in got for t in r["ttfb_ms"])
        p50, p90 = (allt[min(len(allt) - 1, round(q * (len(allt) - 1)))] for q in (0.5, 0.9))
        moved = ", ".join(f"{r['failovers']:.0f}" for r in got)
        lines.append(f"| {names[key]} | {p50:.1f} | {p90:.1f} | {allt[-1]:.1f} | {moved} |")
    if added:
        lines.append(
            f"latency a failover adds (ms, per repeat): {', '.join(f'{x:.1f}' for x in added)}; "
            f"median {statistics.median(added):.1f}"
        )
    return lines, {"runs": runs, "added_ms": added}


# ------------------------------------------------------------------------------------ main


async def run_all(args: argparse.Namespace) -> tuple[list[str], dict]:
    if PINNED:
        os.sched_setaffinity(0, {OTHERS_CPU or 0})
    logdir = Path(tempfile.mkdtemp(prefix="cf-pool-bench-"))
    args.shared_port = free_port()
    replicas = start_replicas(3, logdir, args.shared_port)
    lines: list[str] = [f"# pool cell, {os.cpu_count()} cores, logs in {logdir}"]
    data: dict[str, Any] = {}
    try:
        for r in replicas:
            await wait_ready(r, 30)
        for name, cell in (("cpu", cpu_cell), ("affinity", affinity_cell), ("failover", failover_cell)):
            if name not in args.cells:
                continue
            got_lines, got = await cell(replicas, logdir, args)
            lines += ["", *got_lines]
            data[name] = got
            print("\n".join(got_lines), flush=True)
    finally:
        for r in replicas:
            r.stop()
    return lines, data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", default="cpu,affinity,failover")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0, help="measured load per CPU run")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--delay-ms", type=float, default=5.0, help="between chunks (paced: both runs get the same load)")
    ap.add_argument(
        "--no-passthrough",
        dest="passthrough",
        action="store_false",
        help="CPU cell: leave out the pass-through's two arms (one replica, the three processes)",
    )
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--conversations-at-once", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--failover-requests", type=int, default=60)
    ap.add_argument("--store", choices=("sqlite", "memory"), default="sqlite", help="crossfeed's [store] backend")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="tiny counts (~20 s): tests/bench/test_pool_bench_smoke.py")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.seconds, args.conversations, args.turns, args.failover_requests = 1, 0.5, 4, 3, 6
    global STORE
    STORE = args.store
    args.cells = set(args.cells.split(","))
    _, data = asyncio.run(run_all(args))
    if args.json:
        args.json.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
