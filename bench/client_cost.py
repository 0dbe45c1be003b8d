"""What aiohttp's request machinery costs per upstream call, above its connector and parser.

``ClientSession.request`` is made for any request. Most of it is generic machinery a JSON POST
to a configured backend does not use: the URL and headers merged and checked, cookies, a
``ClientRequest`` and its writer and payload. This script measures it against the call crossfeed
makes instead (proxy/runtime/upstream_call.py, docs/DESIGN.md "The upstream call"), which uses
aiohttp for everything that matters on the wire (its connector: the pool, DNS, TLS; its
connection protocol and C parser: chunked bodies, decompression; a genuine ``ClientResponse``)
and writes only the request head, with aiohttp's serializer.

    .venv/bin/python bench/client_cost.py                  # both modes, callgrind and time (~1 min)
    .venv/bin/python bench/client_cost.py --no-callgrind   # time only (no valgrind needed)

Each mode runs in its own process (on uvloop, as ``crossfeed serve``) against the benchmark's fake
upstream (bench/upstream.py): ``--warmup`` calls, then ``--requests`` calls of one 20-delta chat
stream (24 frames, written in one socket write, as bench/account.py's scenarios), each read to
its end and its connection given back to the pool.

- ``aiohttp``: ``session.request("POST", ...)`` with the arguments crossfeed passed it (bytes
  body, a headers dict, ``allow_redirects=False``, a ``ClientTimeout`` with the connect bound
  only).
- ``lean``: ``upstream_call.post`` with the same body, headers and timeout.

Both on a session made by ``proxy/upstream.py``'s ``new_session``, each response read with
``readany`` until EOF and released. Callgrind counts every user-space instruction of the calling
process between two client requests (the marker of bench/account.py), so the figure is
load-independent; the time column is CPU time (``time.process_time``) over the same calls and
moves with the machine's load.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from account import build_marker, collect_dumps, free_port, stop, wait_http  # noqa: E402 - bench/ is this script's folder

MODES = ("aiohttp", "lean")
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def body(n: int) -> bytes:
    import orjson

    model = f"bench:n={n},b=24,d=0,v=text,w=64"
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


async def run_mode(mode: str, port: int, n: int, warmup: int, requests: int, marker: Any) -> dict[str, Any]:
    """``warmup`` + ``requests`` calls in this process; the figures of the last ``requests``."""
    import aiohttp

    from crossfeed.proxy.runtime import upstream_call
    from crossfeed.proxy.upstream import new_session

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    data = body(n)
    timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10)
    session = new_session()  # crossfeed's own, for both modes
    if not upstream_call.usable(session):
        raise RuntimeError(f"upstream_call is not usable with aiohttp {aiohttp.__version__}")

    async def read(resp: aiohttp.ClientResponse) -> int:
        if resp.status != 200:
            raise RuntimeError(f"the upstream answered {resp.status}")
        size = 0
        while chunk := await resp.content.readany():
            size += len(chunk)
        resp.release()
        return size

    async def via_aiohttp() -> int:
        return await read(
            await session.request("POST", url, data=data, headers=HEADERS, allow_redirects=False, timeout=timeout)
        )

    async def lean() -> int:
        return await read(await upstream_call.post(session, url, data, HEADERS, timeout))

    call = via_aiohttp if mode == "aiohttp" else lean
    sizes = {await call() for _ in range(warmup)}
    if marker is not None:
        marker.start()
        marker.cut(mode, 0, "switch")  # (the first dump absorbs the switch)
    t0 = time.process_time()
    for _ in range(requests):
        sizes.add(await call())
    cpu = time.process_time() - t0
    if marker is not None:
        marker.cut(mode, 1, "calls")
    await session.close()
    return {"mode": mode, "body_bytes": sorted(sizes), "cpu_us": cpu * 1e6 / requests}


def child(argv: list[str]) -> int:
    """``--child MODE PORT N WARMUP REQUESTS [MARKER_DIR]``: one mode's calls, a JSON line out."""
    mode, port, n, warmup, requests = argv[0], *map(int, argv[1:5])
    marker = None
    if len(argv) > 5:
        sys.path.insert(0, argv[5])
        built = importlib.import_module("cf_cgmark")  # (bench/account.py's marker, built at run time)
        marker = built if built.running() else None
    import uvloop

    out = uvloop.run(run_mode(mode, port, n, warmup, requests, marker))
    print(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=20, help="delta frames per stream")
    ap.add_argument("--requests", type=int, default=200, help="measured calls per mode")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--time-requests", type=int, default=3000, help="measured calls per mode, time pass")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    valgrind = None if args.no_callgrind else shutil.which("valgrind")
    if not args.no_callgrind and valgrind is None:
        print("valgrind not found: --no-callgrind for the time pass alone", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cf-client-cost-"))
    port = free_port()
    up_log = work / "upstream.log"
    with open(up_log, "wb") as log:
        up = subprocess.Popen([sys.executable, str(HERE / "upstream.py"), "--port", str(port)], stdout=log, stderr=log)
    results: dict[str, dict[str, Any]] = {m: {} for m in MODES}
    try:
        wait_http(port, "/healthz", up, up_log, 30)
        me = [sys.executable, str(Path(__file__).resolve()), "--child"]
        for mode in MODES:
            spec = [mode, str(port), str(args.chunks), str(args.warmup), str(args.time_requests)]
            out = json.loads(subprocess.run([*me, *spec], capture_output=True, check=True).stdout)
            results[mode].update(body_bytes=out["body_bytes"], cpu_us=out["cpu_us"])
        if valgrind is not None:
            where = build_marker(work / "marker")
            for mode in MODES:
                spec = [mode, str(port), str(args.chunks), str(args.warmup), str(args.requests), str(where)]
                cg = [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={work}/cg.%p"]
                subprocess.run([*cg, *me, *spec], capture_output=True, check=True)
                dumps = dict(collect_dumps(work, set()))
                results[mode]["instructions"] = dumps[f"{mode}|1|calls"] / args.requests
    finally:
        stop(up)
    shutil.rmtree(work, ignore_errors=True)
    if {tuple(r["body_bytes"]) for r in results.values()} != {tuple(results["aiohttp"]["body_bytes"])}:
        print(f"the modes read different bodies: {results}", file=sys.stderr)
        return 1
    print(f"# {args.chunks}-delta chat stream, {results['aiohttp']['body_bytes'][0]} body bytes a call; per call")
    print("| mode | instructions | CPU µs |")
    print("|---|--:|--:|")
    for mode in MODES:
        r = results[mode]
        instr = f"{r['instructions']:,.0f}" if "instructions" in r else "-"
        print(f"| {mode} | {instr} | {r['cpu_us']:.1f} |")
    a, b = results["aiohttp"], results["lean"]
    if "instructions" in a:
        print(f"| aiohttp - lean | {a['instructions'] - b['instructions']:,.0f} | {a['cpu_us'] - b['cpu_us']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
