"""Instructions per request: crossfeed against the pass-through and the minimal translator, the
yardsticks of issue 33's budgets, counted by callgrind (load-independent) instead of timed.

    .venv/bin/python bench/instr.py                                  # ~4 minutes on 2 cores
    .venv/bin/python bench/instr.py --directions forward --requests 20
    .venv/bin/python bench/instr.py --tree /tmp/cf-base              # another crossfeed build
    .venv/bin/python bench/instr.py --targets crossfeed --keep /tmp/cg  # the dumps, for callgrind_annotate
    .venv/bin/python bench/instr.py --variant tool --chunks 2000     # another cell's stream
    .venv/bin/python bench/instr.py --targets crossfeed --pool 3      # a pool of 3 replicas against one (issue 35)
    .venv/bin/python bench/instr.py --directions forward --cache-sim  # also simulated cache misses per request

Each target (``bench/passthrough.py``, ``bench/mintrans.py``, ``crossfeed serve``) runs unchanged
under ``valgrind --tool=callgrind --instr-atstart=no`` in front of the fake upstream
(bench/upstream.py), on uvloop as bench/run.py runs them. One client sends the cell's request
(bench/loadgen.py's body: ``c1 n20 text`` by default) on one keep-alive connection, one request
at a time: ``--warmup`` requests, then ``callgrind_control --instr=on``, ``--requests`` requests
and a dump, ``--requests`` more and a second dump. The second dump holds exactly the second
batch (the first absorbs the switch): its total over ``--requests`` is the figure. Only the
target's own process is counted: the upstream and the client run natively.

What it counts: every user-space instruction of the process (the interpreter, aiohttp, uvloop,
orjson, crossfeed), nothing of the kernel (system calls, TCP): the pass-through and crossfeed make
about the same system calls per request (one upstream request, a write per upstream read).

``--pool N`` (issue 35's pool cell in instructions): N fake upstreams, each its own process, and
the target ``crossfeed-pool``, crossfeed with one upstream whose ``base_urls`` are the N (README
"Pools"; unkeyed requests: the least busy replica, ties taking turns, so every replica serves);
``crossfeed`` then runs from the same kind of config with the first one as its ``base_url``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402 - bench/ is this script's own folder
import upstream as upstream_mod  # noqa: E402
from account import Client, free_port, stop, tree_env, wait_http  # noqa: E402

TARGETS = ("passthrough", "mintrans", "crossfeed")


def pool_config(path: Path, direction: str, urls: list[str]) -> Path:
    """One default upstream: ``base_url`` for one URL, ``base_urls`` (a pool) for several."""
    api = "responses" if direction == "reverse" else "chat"
    where = f'base_url = "{urls[0]}"' if len(urls) == 1 else "base_urls = [" + ", ".join(f'"{u}"' for u in urls) + "]"
    path.write_text(f'[[upstreams]]\nname = "default"\ndefault = true\napi = "{api}"\n{where}\n')
    return path


def target_argv(
    target: str, direction: str, port: int, up_url: str, python: str, config: Path | None = None
) -> list[str]:
    reverse = direction == "reverse"
    if config is not None:  # crossfeed from a config file (--pool)
        return [python, "-m", "crossfeed", "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config)]
    if target == "passthrough":
        return [python, str(HERE / "passthrough.py"), "--port", str(port), "--upstream", up_url, "--uvloop"]
    if target == "mintrans":
        argv = [python, str(HERE / "mintrans.py"), "--port", str(port), "--upstream", up_url, "--uvloop"]
        return [*argv, "--upstream-api", "responses" if reverse else "chat"]
    argv = [python, "-m", "crossfeed", "serve", "--host", "127.0.0.1", "--port", str(port), "--upstream", up_url]
    return argv + (["--upstream-api", "responses"] if reverse else [])


def cell_options(ap: argparse.ArgumentParser, *, requests: int, requests_help: str) -> None:
    """The options of the targets, the cell and the tree (this script's and bench/bytecodes.py's)."""
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--directions", default="forward,reverse")
    ap.add_argument("--chunks", type=int, default=20, help="delta frames per stream (the cell's n)")
    ap.add_argument("--variant", default="text", choices=("text", "tool", "reasoning"))
    ap.add_argument("--requests", type=int, default=requests, help=requests_help)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--tree", default=str(HERE.parent), help="the crossfeed tree to measure (default: this one)")
    ap.add_argument("--python", default=sys.executable)


def start_target(
    cmd: list[str], direction: str, args: argparse.Namespace, outdir: Path, log: Path
) -> tuple[subprocess.Popen[bytes], str, bytes]:
    """``cmd`` started in the tree with its output to ``log``; the client's path and the cell's
    request body for ``direction``."""
    api = "chat" if direction == "reverse" else "responses"
    path = "/v1/chat/completions" if direction == "reverse" else "/v1/responses"
    body = loadgen.request_body(api, upstream_mod.model_name(args.chunks, v=args.variant), args.variant)
    env = tree_env(Path(args.tree))
    env["CROSSFEED_DATA_DIR"] = str(outdir / "data")
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=args.tree, env=env)
    return proc, path, body


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=60)


def dumped(outdir: Path, seen: set[Path], timeout: float = 60) -> dict[str, int]:
    """The totals of the next dump file callgrind writes into ``outdir``, by event (``Ir``, and
    with ``--cache-sim`` the simulated misses: ``D1mr``, ``Bcm`` and the rest)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(outdir.glob("cg.*")):
            if path in seen:
                continue
            names: list[str] = ["Ir"]
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("events:"):
                    names = line.split()[1:]
                elif line.startswith("totals:") or line.startswith("summary:"):
                    seen.add(path)
                    return dict(zip(names, map(int, line.split()[1:]), strict=False))
        time.sleep(0.2)
    raise RuntimeError(f"callgrind wrote no dump into {outdir} within {timeout:.0f} s")


# --cache-sim: callgrind's simulated first-level cache misses and branch mispredictions per
# request (instruction fetch, data read, data write; conditional, indirect), beside Ir.
CACHE_EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "Bcm", "Bim")


def measure(target: str, direction: str, args: argparse.Namespace, up_urls: list[str], work: Path) -> dict[str, float]:
    """Instructions per request of ``target`` in ``direction`` (``Ir``; with ``--cache-sim``, the
    simulated misses per request too)."""
    port = free_port()
    outdir = work / f"{target}-{direction}"
    outdir.mkdir()
    log = outdir / "target.log"
    config = None
    if args.pool > 1 and target.startswith("crossfeed"):
        urls = up_urls if target == "crossfeed-pool" else up_urls[:1]
        config = pool_config(outdir / "crossfeed.toml", direction, urls)
    argv = target_argv(target, direction, port, up_urls[0], args.python, config)
    sim = ["--cache-sim=yes", "--branch-sim=yes"] if args.cache_sim else []
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", *sim, f"--callgrind-out-file={outdir}/cg", "-q", *argv]
    proc, path, body = start_target(cmd, direction, args, outdir, log)
    seen: set[Path] = set()
    try:
        wait_http(port, "/healthz", proc, log, 600)
        client = Client(port, 600)
        for _ in range(args.warmup):
            status, data = client.request("POST", path, body)
            if status != 200:
                raise RuntimeError(f"{target} {direction}: HTTP {status}: {data[:300]!r}")
        control(proc.pid, "--instr=on")
        totals = []
        for _ in range(2):
            for _ in range(args.requests):
                client.request("POST", path, body)
            control(proc.pid, "--dump")
            totals.append(dumped(outdir, seen))
        client.close()
    finally:
        stop(proc)
    return {name: n / args.requests for name, n in totals[1].items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cell_options(ap, requests=30, requests_help="requests per measured batch")
    ap.add_argument("--pool", type=int, default=1, help="N fake upstream processes and a crossfeed-pool target")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, help="copy each target's callgrind dumps here (for callgrind_annotate)")
    ap.add_argument(
        "--cache-sim",
        action="store_true",
        help="also callgrind's simulated cache misses and branch mispredictions per request (slower)",
    )
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench/instr.py needs valgrind (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    targets = [t for t in args.targets.split(",") if t]
    if args.pool > 1 and "crossfeed-pool" not in targets:
        targets.append("crossfeed-pool")
    directions = [d for d in args.directions.split(",") if d]
    results: dict[str, dict[str, float]] = {}  # direction -> target -> Ir per request
    events: dict[str, dict[str, dict[str, float]]] = {}  # direction -> target -> event -> per request
    with tempfile.TemporaryDirectory(prefix="cf-instr-") as tmp:
        work = Path(tmp)
        ups: list[subprocess.Popen[bytes]] = []
        up_urls = []
        try:
            for i in range(max(1, args.pool)):  # the fake upstreams, each its own process
                up_port = free_port()
                up_log = work / f"upstream{i}.log"
                with open(up_log, "wb") as logf:
                    ups.append(
                        subprocess.Popen(
                            [args.python, str(HERE / "upstream.py"), "--port", str(up_port)],
                            stdout=logf,
                            stderr=subprocess.STDOUT,
                        )
                    )
                wait_http(up_port, "/healthz", ups[-1], up_log, 60)
                up_urls.append(f"http://127.0.0.1:{up_port}/v1")
            for direction in directions:
                for target in targets:
                    print(f"# {direction} {target} ...", file=sys.stderr, flush=True)
                    counted = measure(target, direction, args, up_urls, work)
                    results.setdefault(direction, {})[target] = counted["Ir"]
                    events.setdefault(direction, {})[target] = counted
        finally:
            for up in ups:
                stop(up)
            if args.keep is not None:
                shutil.copytree(work, args.keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("data"))
    cell = f"c1 n{args.chunks} {args.variant}"
    pooled = f", crossfeed-pool: {args.pool} upstream processes" if args.pool > 1 else ""
    print(f"# instructions per request, {cell}, {args.requests} requests per batch{pooled} (bench/instr.py)")
    print("| target | " + " | ".join(directions) + " |")
    print("|---|" + "--:|" * len(directions))
    for target in targets:
        row = [f"{results[d][target]:,.0f}" for d in directions]
        print(f"| {target} | " + " | ".join(row) + " |")
    pairs = (
        ("crossfeed", "passthrough"),
        ("crossfeed", "mintrans"),
        ("mintrans", "passthrough"),
        ("crossfeed-pool", "crossfeed"),
    )
    for a, b in pairs:
        if a in targets and b in targets:
            ratios = [f"{results[d][a] / results[d][b]:.3f}x" for d in directions]
            print(f"| {a} / {b} | " + " | ".join(ratios) + " |")
    if args.cache_sim:
        print_cache_sim(events, targets, directions)
    if args.json:
        out = {"cell": cell, "pool": args.pool, "instructions": results}
        if args.cache_sim:
            out["events"] = events
        args.json.write_text(json.dumps(out, indent=2))
    return 0


def print_cache_sim(events: dict[str, dict[str, dict[str, float]]], targets: list[str], directions: list[str]) -> None:
    """Per request: instructions, then callgrind's simulated misses (I1mr: instruction fetches
    that miss the first-level cache; D1mr, D1mw: data reads and writes that do; Bcm, Bim:
    mispredicted conditional and indirect branches). A model of the first-level caches and a
    simple predictor, not the machine's counters: for comparing targets, not for cycles."""
    for direction in directions:
        print(f"# {direction}: simulated events per request (--cache-sim)")
        print("| target | " + " | ".join(CACHE_EVENTS) + " |")
        print("|---|" + "--:|" * len(CACHE_EVENTS))
        for target in targets:
            counted = events[direction][target]
            print(f"| {target} | " + " | ".join(f"{counted.get(e, 0):,.0f}" for e in CACHE_EVENTS) + " |")


if __name__ == "__main__":
    sys.exit(main())
