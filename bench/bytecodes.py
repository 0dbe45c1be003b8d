"""Python bytecodes per request: how much interpreted work, and how much distinct code, a request
costs crossfeed against the pass-through and the minimal translator (issue 33's yardsticks).

    .venv/bin/python bench/bytecodes.py                          # both directions (~40 s)
    .venv/bin/python bench/bytecodes.py --directions forward --top 25
    .venv/bin/python bench/bytecodes.py --tree /tmp/cf-base      # another crossfeed build

Each target (``bench/passthrough.py``, ``bench/mintrans.py``, ``crossfeed serve``) runs unchanged
in front of the fake upstream (bench/upstream.py), started through this script's ``--child``
mode: the target's own command, with a ``sys.settrace`` tracer that ``SIGUSR1`` switches on and
``SIGUSR2`` off (it then writes what it counted). One client sends ``--warmup`` requests of the
cell (``c1 n20 text`` by default) on one keep-alive connection, then the tracer counts
``--requests`` more. The event loop's thread is the only one traced: it runs every handler.

Per request:

- ``bytecodes``: opcodes the interpreter executed (``f_trace_opcodes``);
- ``calls``: Python frames entered (a call, or a coroutine or generator resumed);
- ``code objects``: distinct functions that ran at least once in the batch, divided by nothing
  (they are not per request: the code a request needs);
- ``64-byte blocks``: distinct 64-byte blocks of those functions' bytecode that ran (the
  instruction offset over 64), an estimate of the cache lines of bytecode a request reads. A
  code object's bytecode sits inside it, so the blocks are not aligned to real cache lines; the
  figure is for comparing targets.

Counted while tracing, which is slow (the figures do not depend on the machine's load); time and
instructions are bench/run.py's and bench/instr.py's. Uses only the standard library.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


# ---------------------------------------------------------------------------- the traced child


def child(out: str, argv: list[str]) -> None:
    """Run ``argv`` (``-m module args`` or ``script args``) in this process, traced on demand."""
    ops: collections.Counter[CodeType] = collections.Counter()
    calls: collections.Counter[CodeType] = collections.Counter()
    blocks: set[tuple[CodeType, int]] = set()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            code = frame.f_code
            ops[code] += 1
            blocks.add((code, frame.f_lasti >> 6))
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            calls[frame.f_code] += 1
            return local
        return None

    def on(*_: Any) -> None:
        ops.clear()
        calls.clear()
        blocks.clear()
        sys.settrace(tracer)

    def off(*_: Any) -> None:
        sys.settrace(None)
        per_code: collections.Counter[CodeType] = collections.Counter(code for code, _ in blocks)
        rows = {
            (code.co_filename, code.co_firstlineno, code.co_qualname): (ops[code], calls[code], per_code[code])
            for code in set(ops) | set(calls)
        }
        tmp = out + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(rows, f)
        os.replace(tmp, out)  # whole, or not there yet

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


# ---------------------------------------------------------------------------- the parent


def count(target: str, direction: str, args: argparse.Namespace, up_url: str, work: Path) -> dict[tuple, tuple]:
    """``(file, line, name) -> (bytecodes, calls, blocks)`` over ``--requests`` requests."""
    from account import Client, free_port, stop, wait_http
    from instr import start_target, target_argv

    port = free_port()
    outdir = work / f"{target}-{direction}"
    outdir.mkdir()
    log, out = outdir / "target.log", outdir / "counts.pickle"
    argv = target_argv(target, direction, port, up_url, args.python)
    cmd = [args.python, __file__, "--child", str(out), "--", *argv[1:]]
    proc, path, body = start_target(cmd, direction, args, outdir, log)
    try:
        wait_http(port, "/healthz", proc, log, 120)
        client = Client(port, 120)
        for i in range(args.warmup + args.requests):
            if i == args.warmup:
                # Tracing on, then made sure of with a request (a signal's handler runs once the
                # loop wakes), then on again: the second switch clears what that request counted.
                proc.send_signal(signal.SIGUSR1)
                time.sleep(0.2)
                client.request("GET", "/healthz")
                proc.send_signal(signal.SIGUSR1)
                time.sleep(0.2)
            status, data = client.request("POST", path, body)
            if status != 200:
                raise RuntimeError(f"{target} {direction}: HTTP {status}: {data[:300]!r}")
        proc.send_signal(signal.SIGUSR2)
        client.request("GET", "/healthz")  # wakes the loop, so the handler runs
        deadline = time.monotonic() + 60
        while not out.exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{target} {direction}: no counts written; log {log}")
            time.sleep(0.1)
        client.close()
        with open(out, "rb") as f:
            rows: dict[tuple, tuple] = pickle.load(f)
        return rows
    finally:
        stop(proc)


def summary(rows: dict[tuple, tuple], n: int) -> dict[str, float]:
    return {
        "bytecodes": sum(r[0] for r in rows.values()) / n,
        "calls": sum(r[1] for r in rows.values()) / n,
        "code objects": float(sum(1 for r in rows.values() if r[0])),
        "64-byte blocks": float(sum(r[2] for r in rows.values())),
    }


def where(filename: str) -> str:
    """A function's file, short: ``aiohttp/streams.py``, ``crossfeed/proxy/app.py``, ``bench/...``."""
    for marker, shown in (("site-packages/", ""), ("/crossfeed/", "crossfeed/"), ("/bench/", "bench/")):
        if marker in filename:
            return shown + filename.split(marker, 1)[1]
    return filename.rsplit("/", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[3:])  # --child OUT -- target argv
        return 0
    from account import free_port, stop, wait_http
    from instr import cell_options

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cell_options(ap, requests=50, requests_help="requests counted")
    ap.add_argument("--top", type=int, default=0, help="also each target's N functions with the most bytecodes")
    ap.add_argument("--json", type=Path, help="write the per-request figures here")
    args = ap.parse_args(argv)

    targets = [t for t in args.targets.split(",") if t]
    directions = [d for d in args.directions.split(",") if d]
    results: dict[str, dict[str, dict[tuple, tuple]]] = {}
    with tempfile.TemporaryDirectory(prefix="cf-bytecodes-") as tmp:
        work = Path(tmp)
        up_port = free_port()
        up_log = work / "upstream.log"
        with open(up_log, "wb") as logf:
            up = subprocess.Popen(
                [args.python, str(HERE / "upstream.py"), "--port", str(up_port)], stdout=logf, stderr=subprocess.STDOUT
            )
        try:
            wait_http(up_port, "/healthz", up, up_log, 60)
            for direction in directions:
                for target in targets:
                    print(f"# {direction} {target} ...", file=sys.stderr, flush=True)
                    rows = count(target, direction, args, f"http://127.0.0.1:{up_port}/v1", work)
                    results.setdefault(direction, {})[target] = rows
        finally:
            stop(up)
    n = args.requests
    print(f"# Python bytecodes per request, c1 n{args.chunks} {args.variant}, {n} requests (bench/bytecodes.py)")
    columns = ("bytecodes", "calls", "code objects", "64-byte blocks")
    for direction in directions:
        print(f"| {direction} | " + " | ".join(columns) + " |")
        print("|---|" + "--:|" * len(columns))
        for target in targets:
            s = summary(results[direction][target], n)
            print(f"| {target} | " + " | ".join(f"{s[c]:,.0f}" for c in columns) + " |")
    if args.json:
        figures = {d: {t: summary(results[d][t], n) for t in targets} for d in directions}
        args.json.write_text(
            json.dumps({"cell": f"c1 n{args.chunks} {args.variant}", "per_request": figures}, indent=2)
        )
    for direction in directions:
        for target in targets if args.top else ():
            rows = results[direction][target]
            print(f"\n# {direction} {target}: the {args.top} functions with the most bytecodes per request")
            print("| bytecodes | calls | 64-byte blocks | function |")
            print("|--:|--:|--:|---|")
            ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])[: args.top]
            for (filename, line, name), (ops, calls, blocks) in ranked:
                print(f"| {ops / n:,.0f} | {calls / n:.1f} | {blocks} | {where(filename)}:{line} {name} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
