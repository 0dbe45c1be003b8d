"""Benchmark runner: crossfeed against a byte-for-byte pass-through, interleaved, one table.

    .venv/bin/python bench/run.py                      # full run, both directions (~6-9 min)
    .venv/bin/python bench/run.py --quick              # a few seconds: the smoke test
    .venv/bin/python bench/run.py --direction forward --repeat 5 --cells 'n2000|tool' --json out.json

What it does:
  1. starts bench/upstream.py (one process serves chat and Responses streams);
  2. starts the targets as subprocesses: the pass-through (bench/passthrough.py) and crossfeed
     (``python -m proxy serve``, forward: Responses clients -> chat upstream; reverse: chat
     clients -> Responses upstream), all pinned to one CPU, the upstream and this process (the
     load generator) to another;
  3. for each repeat, each cell, runs every target in turn (A/B, then B/A on the next repeat),
     reading the target's CPU time (utime+stime of its process tree, /proc/<pid>/stat) and the
     upstream's frame counter before and after, and sampling its RSS while it runs;
  4. prints one table (median over repeats, spread = (max-min)/2 relative to the median) and one
     summary line per direction with the ratios against the pass-through and the issue-5 budgets.

The pass-through receives the same upstream stream untranslated (forward cells: a chat client
through the pass-through to the chat upstream), so "CPU per upstream chunk" compares the cost of
carrying the same upstream frames. Exit status: 0 when every target ran and no stream failed,
1 when a stream failed, 2 when a target could not start. Budgets are reported, not enforced
(``--enforce-budgets`` makes a miss exit 3).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import loadgen
import pyspy
import upstream as upstream_mod

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024

BUDGETS = {"geomean": 1.3, "max_cell": 2.0, "paced_p50_ms": 0.5, "paced_p99_ratio": 1.5,
           "paced_cpu_ratio": 1.5, "rss_kib_per_stream": 64.0}


# ---------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    name: str
    c: int
    n: int
    v: str = "text"
    d: float = 0.0           # ms between deltas
    b: int = 24
    duration: float = 2.0    # seconds of launching streams (then drain)
    requests: int | None = None
    stagger: float = 0.0
    group: str = "info"      # "geo": in the geomean/max set; "paced": the paced budget cell
    fresh: bool = False      # restart the targets before this cell (clean RSS per stream)

    @property
    def paced(self) -> bool:
        return self.d > 0


def full_cells(duration: float) -> list[Cell]:
    cells = []
    for n in (20, 2000):
        for c in (1, 16, 128):
            cells.append(Cell(f"c{c} n{n} text", c, n, duration=duration, group="geo"))
    cells.append(Cell("c16 n200 tool", 16, 200, v="tool", duration=duration, group="geo"))
    cells.append(Cell("c16 n200 text", 16, 200, duration=duration))
    cells.append(Cell("c16 n200 reasoning", 16, 200, v="reasoning", duration=duration))
    cells.append(Cell("paced c256 n200 d20", 256, 200, d=20.0, requests=256, duration=30.0,
                      stagger=0.5, group="paced", fresh=True))
    return cells


def quick_cells() -> list[Cell]:
    return [
        Cell("c1 n20 text", 1, 20, duration=0.25, group="geo"),
        Cell("c4 n20 text", 4, 20, duration=0.25, group="geo"),
        Cell("c4 n20 tool", 4, 20, v="tool", duration=0.25, group="geo"),
        Cell("c2 n20 reasoning", 2, 20, v="reasoning", duration=0.25),
        Cell("paced c8 n10 d20", 8, 10, d=20.0, requests=8, duration=10.0, stagger=0.02, group="paced"),
    ]


# ---------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo and len(pids) < 256:
        p = todo.pop()
        pids.append(p)
        todo += _children(p)
    return pids


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process and its live descendants, in seconds."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        except (OSError, IndexError, ValueError):
            pass
    return total / CLK_TCK


def system_busy_seconds() -> float:
    """user+nice+system time of all CPUs (irq/softirq left out: not charged to processes)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return (int(fields[1]) + int(fields[2]) + int(fields[3])) / CLK_TCK


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def status_kib(pid: int, key: str) -> int:
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(key):
                        total += int(line.split()[1])
                        break
        except (OSError, ValueError):
            pass
    return total


@dataclass
class Proc:
    name: str
    argv: list[str]
    port: int
    cpu: int | None
    log_path: Path
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as logf:
            self.popen = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO,
                                          start_new_session=True)
        if self.cpu is not None:
            # right after the spawn, long before the interpreter starts any thread
            os.sched_setaffinity(self.popen.pid, {self.cpu})

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self) -> None:
        p = self.popen
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


async def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size_s, _, rest = rest.partition(b"\r\n")
            size = int(size_s.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return status, body


async def wait_ready(proc: Proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartError(f"{proc.name} exited with status {proc.popen.returncode if proc.popen else '?'}"
                             f" before it answered /healthz; log {proc.log_path}:\n{proc.log_tail()}")
        try:
            status, _ = await http_get(proc.port, "/healthz", 1.0)
            if status == 200:
                return
        except (TimeoutError, OSError, ValueError, IndexError):
            pass
        await asyncio.sleep(0.05)
    raise StartError(f"{proc.name} did not answer /healthz within {timeout:.0f}s; log {proc.log_path}:\n"
                     f"{proc.log_tail()}")


class StartError(RuntimeError):
    pass


# ---------------------------------------------------------------------------- targets


@dataclass
class Target:
    """One thing the load generator talks to, for one direction."""
    label: str          # passthrough | crossfeed | direct
    direction: str      # forward | reverse
    proc: Proc | None   # None for direct
    path: str           # client path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"


@dataclass
class Env:
    args: argparse.Namespace
    logdir: Path
    proxy_cpu: int | None
    gen_cpu: int | None
    upstream: Proc | None = None
    procs: dict[str, Proc] = field(default_factory=dict)
    pyspy: str | None = None

    @property
    def upstream_url(self) -> str:
        assert self.upstream is not None
        return f"http://127.0.0.1:{self.upstream.port}/v1"

    def make_proc(self, key: str) -> Proc:
        py = self.args.python
        port = free_port()
        if key == "passthrough":
            argv = [py, str(HERE / "passthrough.py"), "--port", str(port), "--upstream", self.upstream_url]
            if self.args.passthrough_loop == "uvloop":
                argv.append("--uvloop")
        elif key.startswith("mintrans"):
            argv = [py, str(HERE / "mintrans.py"), "--port", str(port), "--upstream", self.upstream_url,
                    "--upstream-api", "responses" if key.endswith("reverse") else "chat"]
            if self.args.passthrough_loop == "uvloop":
                argv.append("--uvloop")
        else:  # crossfeed-forward | crossfeed-reverse
            argv = [py, "-m", "proxy", "serve", "--host", "127.0.0.1", "--port", str(port),
                    "--upstream", self.upstream_url]
            if key == "crossfeed-reverse":
                argv += ["--upstream-api", "responses"]
            argv += self.args.crossfeed_arg
        return Proc(key, argv, port, self.proxy_cpu, self.logdir / f"{key}.log")

    async def start(self, key: str) -> Proc:
        proc = self.make_proc(key)
        proc.start()
        self.procs[key] = proc
        await wait_ready(proc, self.args.start_timeout)
        return proc

    async def restart(self, key: str) -> Proc:
        old = self.procs.get(key)
        if old is not None:
            old.stop()
        return await self.start(key)

    def stop_all(self) -> None:
        for proc in list(self.procs.values()):
            proc.stop()
        if self.upstream is not None:
            self.upstream.stop()


def proc_key(label: str, direction: str) -> str:
    return "passthrough" if label == "passthrough" else f"{label}-{direction}"


def make_target(env: Env, label: str, direction: str) -> Target:
    up_chat = "/v1/chat/completions"
    up_resp = "/v1/responses"
    upstream_path = up_chat if direction == "forward" else up_resp
    if label == "direct":
        assert env.upstream is not None
        return Target(label, direction, None, upstream_path, env.upstream.port)
    proc = env.procs[proc_key(label, direction)]
    if label == "passthrough":
        return Target(label, direction, proc, upstream_path, proc.port)
    client_path = up_resp if direction == "forward" else up_chat
    return Target(label, direction, proc, client_path, proc.port)


# ---------------------------------------------------------------------------- one measurement


async def upstream_frames(env: Env) -> int:
    assert env.upstream is not None
    _, body = await http_get(env.upstream.port, "/stats")
    return int(orjson.loads(body)["frames"])


async def measure(env: Env, target: Target, cell: Cell, rep: int = 0) -> dict:
    model = upstream_mod.model_name(cell.n, b=cell.b, d=cell.d, v=cell.v, w=env.args.write_batch)
    spec = loadgen.LoadSpec(url=target.url, model=model, variant=cell.v, concurrency=cell.c,
                            duration=cell.duration, requests=cell.requests,
                            drain_timeout=env.args.drain_timeout, stagger=cell.stagger)
    pid = target.proc.pid if target.proc else None
    assert env.upstream is not None
    up_pid = env.upstream.pid
    rss_base = status_kib(pid, "VmRSS:") if pid else 0
    rss_peak = rss_base
    stop_sampling = asyncio.Event()

    async def sampler() -> None:
        nonlocal rss_peak
        while not stop_sampling.is_set():
            rss_peak = max(rss_peak, status_kib(pid, "VmRSS:"))
            try:
                await asyncio.wait_for(stop_sampling.wait(), 0.05)
            except TimeoutError:
                pass

    ours = [os.getpid(), up_pid] + [p.pid for p in env.procs.values() if p.alive()]
    f0 = await upstream_frames(env)
    sys0 = system_busy_seconds() - sum(cpu_seconds(p) for p in ours)
    up0 = cpu_seconds(up_pid)
    cpu0 = cpu_seconds(pid) if pid else 0.0
    samp = asyncio.ensure_future(sampler()) if pid else None
    rec = None
    if env.args.profile and pid and target.label != "passthrough" and env.pyspy:
        name = re.sub(r"[^A-Za-z0-9]+", "_", f"{target.label}-{target.direction}-{cell.name}-rep{rep}")
        rec = pyspy.Recorder(env.pyspy, pid, Path(env.args.profile) / f"{name}.txt", env.gen_cpu)
        await asyncio.sleep(0.3)  # let py-spy attach
    res = await loadgen.run_load(spec)
    if rec is not None:
        summary = rec.stop()
        res["profile"] = str(summary) if summary else None
    cpu1 = cpu_seconds(pid) if pid else 0.0
    up1 = cpu_seconds(up_pid)
    sys1 = system_busy_seconds() - sum(cpu_seconds(p) for p in ours)
    stop_sampling.set()
    if samp is not None:
        await samp
    f1 = await upstream_frames(env)
    frames = f1 - f0
    res.update({
        "target": target.label, "direction": target.direction, "cell": cell.name,
        "frames": frames,
        "cpu_s": round(cpu1 - cpu0, 4),
        "cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / frames if (pid and frames) else None,
        "cpu_util": ((cpu1 - cpu0) if pid else (up1 - up0)) / res["wall_s"] if res["wall_s"] else None,
        "upstream_us_per_chunk": (up1 - up0) * 1e6 / frames if frames else None,
        "background_cpu": max(0.0, sys1 - sys0) / res["wall_s"] if res["wall_s"] else None,
        "loadgen_us_per_event": res["loadgen_cpu_s"] * 1e6 / res["events"] if res["events"] else None,
        "rss_base_kib": rss_base, "rss_peak_kib": rss_peak,
        "hwm_kib": status_kib(pid, "VmHWM:") if pid else None,
        "rss_kib_per_stream": ((rss_peak - rss_base) / res["max_open"]) if (pid and res["max_open"]) else None,
    })
    if pid and not target.proc.alive():  # type: ignore[union-attr]
        res["errors"] += 1
        res["error_kinds"]["target_died"] = 1
    return res


async def warm(env: Env, target: Target, quick: bool) -> None:
    for v in ("text", "tool", "reasoning"):
        cell = Cell("warmup", 4, 20 if quick else 200, v=v, duration=0.1 if quick else 0.4)
        model = upstream_mod.model_name(cell.n, v=v, w=env.args.write_batch)
        spec = loadgen.LoadSpec(url=target.url, model=model, variant=v, concurrency=cell.c,
                                duration=cell.duration, drain_timeout=10)
        res = await loadgen.run_load(spec)
        if res["errors"]:
            print(f"  warmup {target.label} {target.direction} {v}: {res['error_kinds']}", file=sys.stderr)


# ---------------------------------------------------------------------------- aggregation and report


def med(vals: list) -> float | None:
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def spread(vals: list) -> float | None:
    vals = [v for v in vals if v is not None]
    if len(vals) < 2:
        return None
    m = statistics.median(vals)
    return (max(vals) - min(vals)) / 2 / m if m else None


def aggregate(runs: list[dict], cells: list[Cell], directions: list[str], labels: list[str]) -> list[dict]:
    rows = []
    for direction in directions:
        for cell in cells:
            base = [r for r in runs if r["direction"] == direction and r["cell"] == cell.name
                    and r["target"] == "passthrough"]
            for label in labels:
                rs = [r for r in runs if r["direction"] == direction and r["cell"] == cell.name
                      and r["target"] == label]
                if not rs:
                    continue
                row = {"direction": direction, "cell": cell.name, "group": cell.group, "target": label,
                       "repeats": len(rs)}
                for k in ("streams_per_s", "events_per_s", "ttfe_p50_ms", "ttfe_p99_ms", "lat_p50_ms",
                          "lat_p99_ms", "cpu_us_per_chunk", "cpu_util", "upstream_us_per_chunk",
                          "loadgen_us_per_event", "rss_peak_kib", "rss_kib_per_stream", "hwm_kib",
                          "background_cpu"):
                    row[k] = med([r.get(k) for r in rs])
                row["cpu_spread"] = spread([r.get("cpu_us_per_chunk") for r in rs])
                row["completed"] = sum(r["completed"] for r in rs)
                row["errors"] = sum(r["errors"] for r in rs)
                kinds: dict = {}
                for r in rs:
                    for k, v in r["error_kinds"].items():
                        kinds[k] = kinds.get(k, 0) + v
                row["error_kinds"] = kinds
                # paired ratios, repeat by repeat (the A/B pairs ran back to back)
                if label != "passthrough" and base:
                    pairs = list(zip(sorted(rs, key=lambda r: r["rep"]), sorted(base, key=lambda r: r["rep"])))
                    ratios = [a["cpu_us_per_chunk"] / b["cpu_us_per_chunk"] for a, b in pairs
                              if a.get("cpu_us_per_chunk") and b.get("cpu_us_per_chunk")]
                    row["cpu_ratio"] = med(ratios)
                    row["cpu_ratio_spread"] = spread(ratios)
                    row["lat_p50_delta_ms"] = med([a["lat_p50_ms"] - b["lat_p50_ms"] for a, b in pairs
                                                   if a.get("lat_p50_ms") is not None
                                                   and b.get("lat_p50_ms") is not None])
                    row["lat_p99_ratio"] = med([a["lat_p99_ms"] / b["lat_p99_ms"] for a, b in pairs
                                                if a.get("lat_p99_ms") and b.get("lat_p99_ms")])
                rows.append(row)
    return rows


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return "" if v is None else f"±{v * 100:.0f}%"


def render_table(rows: list[dict]) -> str:
    head = ["dir", "cell", "target", "streams/s", "events/s", "ttfe p50/p99 ms", "lat p50/p99 ms",
            "cpu µs/chunk", "vs pt", "cpu%", "rss MiB", "KiB/stream", "up µs/ch", "bg%", "errors"]
    out = []
    for r in rows:
        out.append([
            r["direction"][:3], r["cell"], r["target"],
            _f(r["streams_per_s"], ".1f"), _f(r["events_per_s"], ".0f"),
            f"{_f(r['ttfe_p50_ms'], '.2f')}/{_f(r['ttfe_p99_ms'], '.2f')}",
            f"{_f(r['lat_p50_ms'], '.2f')}/{_f(r['lat_p99_ms'], '.2f')}",
            f"{_f(r['cpu_us_per_chunk'], '.2f')} {_pct(r['cpu_spread'])}".strip(),
            (f"{r['cpu_ratio']:.2f}x {_pct(r.get('cpu_ratio_spread'))}".strip()
             if r.get("cpu_ratio") is not None else ""),
            _f(r["cpu_util"] * 100 if r["cpu_util"] is not None else None, ".0f"),
            _f(r["rss_peak_kib"] / 1024 if r["rss_peak_kib"] else None, ".1f"),
            _f(r["rss_kib_per_stream"], ".1f") if r["group"] == "paced" else "",
            _f(r["upstream_us_per_chunk"], ".2f"),
            _f(r["background_cpu"] * 100 if r["background_cpu"] is not None else None, ".0f"),
            str(r["errors"]) + (f" {r['error_kinds']}" if r["errors"] else ""),
        ])
    widths = [max(len(head[i]), *(len(row[i]) for row in out)) if out else len(head[i]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)),
             "  ".join("-" * w for w in widths)]
    prev = None
    for row in out:
        key = (row[0], row[1])
        if prev is not None and key != prev:
            lines.append("")
        prev = key
        lines.append("  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def summarise(rows: list[dict], direction: str, label: str = "crossfeed") -> tuple[str, dict]:
    cf = [r for r in rows if r["direction"] == direction and r["target"] == label]
    pt = {r["cell"]: r for r in rows if r["direction"] == direction and r["target"] == "passthrough"}
    s: dict = {"direction": direction, "target": label}
    parts = []
    ok = True

    def verdict(passed: bool) -> str:
        nonlocal ok
        ok = ok and passed
        return "ok" if passed else "OVER"

    geo = [r for r in cf if r["group"] == "geo" and r.get("cpu_ratio")]
    if geo:
        gm = math.exp(sum(math.log(r["cpu_ratio"]) for r in geo) / len(geo))
        worst = max(geo, key=lambda r: r["cpu_ratio"])
        s.update(geomean=gm, max_cell=worst["cpu_ratio"], max_cell_name=worst["cell"], geo_cells=len(geo))
        parts.append(f"cpu/chunk geomean {gm:.2f}x (≤{BUDGETS['geomean']}) {verdict(gm <= BUDGETS['geomean'])}")
        parts.append(f"max {worst['cpu_ratio']:.2f}x [{worst['cell']}] (≤{BUDGETS['max_cell']}) "
                     f"{verdict(worst['cpu_ratio'] <= BUDGETS['max_cell'])}")
    paced = [r for r in cf if r["group"] == "paced"]
    for r in paced:
        p = pt.get(r["cell"])
        all_done = r["errors"] == 0 and (p is None or p["errors"] == 0)
        parts.append(f"{r['cell']}: {r['completed']} streams, {r['errors']} failed {verdict(all_done)}")
        s.update(paced_completed=r["completed"], paced_errors=r["errors"])
        if r.get("lat_p50_delta_ms") is not None:
            d = r["lat_p50_delta_ms"]
            parts.append(f"lat p50 {d:+.2f} ms (≤{BUDGETS['paced_p50_ms']}) {verdict(d <= BUDGETS['paced_p50_ms'])}")
            s["paced_p50_delta_ms"] = d
        if r.get("lat_p99_ratio") is not None:
            q = r["lat_p99_ratio"]
            parts.append(f"p99 {q:.2f}x (≤{BUDGETS['paced_p99_ratio']}) {verdict(q <= BUDGETS['paced_p99_ratio'])}")
            s["paced_p99_ratio"] = q
        if r.get("cpu_ratio") is not None:
            q = r["cpu_ratio"]
            parts.append(f"cpu {q:.2f}x (≤{BUDGETS['paced_cpu_ratio']}) {verdict(q <= BUDGETS['paced_cpu_ratio'])}")
            s["paced_cpu_ratio"] = q
        if r.get("rss_kib_per_stream") is not None:
            k = r["rss_kib_per_stream"]
            ptk = p.get("rss_kib_per_stream") if p else None
            parts.append(f"rss {k:.1f} KiB/stream (≤{BUDGETS['rss_kib_per_stream']:.0f}; pt "
                         f"{_f(ptk, '.1f')}) {verdict(k <= BUDGETS['rss_kib_per_stream'])}")
            s["rss_kib_per_stream"] = k
    name = "" if label == "crossfeed" else f" ({label})"
    if not parts:
        return f"SUMMARY{name} {direction}: no cells to compare", s
    s["within_budgets"] = ok
    return (f"SUMMARY{name} {direction} vs pass-through: " + "; ".join(parts)
            + f" => {'within budgets' if ok else 'OVER BUDGET'}"), s


def machine_info() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import aiohttp
        aiohttp_v = aiohttp.__version__
    except ImportError:
        aiohttp_v = None
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cpu": model, "cpus": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "aiohttp": aiohttp_v}


# ---------------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> int:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = not args.no_pin and len(cpus) >= 2
    gen_cpu = cpus[0] if pin else None
    proxy_cpu = cpus[-1] if pin else None
    up_cpu = (cpus[1] if len(cpus) >= 3 else cpus[0]) if pin else None
    if args.upstream_cpu is not None:
        up_cpu = args.upstream_cpu
    if gen_cpu is not None:
        os.sched_setaffinity(0, {gen_cpu})
    logdir = Path(args.logdir or tempfile.mkdtemp(prefix="crossfeed-bench-"))
    logdir.mkdir(parents=True, exist_ok=True)
    env = Env(args, logdir, proxy_cpu, gen_cpu)
    if args.profile:
        env.pyspy = pyspy.find_pyspy()
        if env.pyspy is None:
            print("bench: --profile needs py-spy (.venv/bin/pip install py-spy)", file=sys.stderr)
            return 2
        if Path(args.profile).exists() and not Path(args.profile).is_dir():
            print(f"bench: --profile {args.profile} exists and is not a directory", file=sys.stderr)
            return 2
        Path(args.profile).mkdir(parents=True, exist_ok=True)

    cells = quick_cells() if args.quick else full_cells(args.duration)
    if args.cells:
        rx = re.compile(args.cells)
        cells = [c for c in cells if rx.search(c.name)]
    if args.paced_n and not args.quick:
        cells = [Cell(f"paced c256 n{args.paced_n} d20", 256, args.paced_n, d=20.0, requests=256,
                      duration=30.0, stagger=0.5, group="paced", fresh=True) if c.group == "paced" else c
                 for c in cells]
    if args.quick:
        cells = [Cell(**{**asdict(c), "fresh": False}) for c in cells]
    directions = ["forward", "reverse"] if args.direction == "both" else [args.direction]
    labels = [x.strip() for x in args.targets.split(",") if x.strip()]
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)

    print(f"# crossfeed bench: {len(cells)} cells x {len(labels)} targets x {len(directions)} directions "
          f"x {repeat} repeats; pinning: load generator+upstream cpu {gen_cpu}/{up_cpu}, targets cpu "
          f"{proxy_cpu}; load average {loadavg()}; logs {logdir}", flush=True)
    up_port = free_port()
    env.upstream = Proc("upstream", [args.python, str(HERE / "upstream.py"), "--port", str(up_port)],
                        up_port, up_cpu, logdir / "upstream.log")
    runs: list[dict] = []
    t_start = time.monotonic()
    try:
        env.upstream.start()
        await wait_ready(env.upstream, args.start_timeout)
        keys = []
        if "passthrough" in labels:
            keys.append("passthrough")
        for label in ("crossfeed", "mintrans"):
            if label in labels:
                keys += [f"{label}-{d}" for d in directions]
        for key in keys:
            await env.start(key)
        for direction in directions:
            for label in labels:
                await warm(env, make_target(env, label, direction), args.quick)
        for rep in range(repeat):
            for ci, cell in enumerate(cells):
                for direction in directions:
                    order = labels if (rep + ci) % 2 == 0 else labels[::-1]
                    for label in order:
                        if time.monotonic() - t_start > args.max_seconds:
                            raise TimeoutError(f"run exceeded --max-seconds {args.max_seconds}")
                        if cell.fresh and label != "direct":
                            await env.restart(proc_key(label, direction))
                            tgt = make_target(env, label, direction)
                            await warm_small(env, tgt)
                        tgt = make_target(env, label, direction)
                        res = await measure(env, tgt, cell, rep)
                        res["rep"] = rep
                        runs.append(res)
                        if args.verbose:
                            print(f"  rep {rep} {direction:7s} {cell.name:22s} {label:11s} "
                                  f"{res['completed']:6d} streams {res['events_per_s']:9.0f} ev/s "
                                  f"cpu {_f(res['cpu_us_per_chunk'], '.2f')} µs/chunk "
                                  f"lat {_f(res['lat_p50_ms'], '.2f')}/{_f(res['lat_p99_ms'], '.2f')} ms "
                                  f"err {res['errors']}", flush=True)
                        if res["errors"] and not args.verbose:
                            print(f"  errors: rep {rep} {direction} {cell.name} {label}: {res['error_kinds']}",
                                  file=sys.stderr, flush=True)
    except StartError as exc:
        print(f"bench: target failed to start: {exc}", file=sys.stderr)
        env.stop_all()
        return 2
    except TimeoutError as exc:
        print(f"bench: {exc}; reporting the runs so far", file=sys.stderr)
        runs.append({"target": "-", "direction": "-", "cell": "-", "errors": 1,
                     "error_kinds": {"max_seconds": 1}, "completed": 0})
    finally:
        env.stop_all()
    elapsed = time.monotonic() - t_start
    rows = aggregate(runs, cells, directions, labels)
    print()
    print(render_table(rows))
    print()
    summaries = []
    for label in ("crossfeed", "mintrans"):
        for direction in directions:
            if label in labels and "passthrough" in labels:
                line, s = summarise(rows, direction, label)
                print(line)
                summaries.append(s)
    info = machine_info()
    n_err = sum(r["errors"] for r in runs)
    hwm: dict[str, int] = {}
    for r in runs:
        if r.get("hwm_kib"):
            key = r["target"] if r["target"] == "passthrough" else f"{r['target']}-{r['direction']}"
            hwm[key] = max(hwm.get(key, 0), r["hwm_kib"])
    profiles = [r["profile"] for r in runs if r.get("profile")]
    if profiles:
        print(f"# {len(profiles)} py-spy profiles (collapsed stacks + .summary.txt) in {args.profile}; "
              "these runs were profiled: do not quote their figures")
    if hwm:
        print("# peak RSS (VmHWM): " + ", ".join(f"{k} {v / 1024:.1f} MiB" for k, v in hwm.items()))
    bg = med([r.get("background_cpu") for r in runs])
    if bg is not None and bg > 0.10:
        print(f"# WARNING: other processes used {bg * 100:.0f}% of a CPU (median) during the runs: "
              "figures are noisy; rerun on a quiet machine")
    print(f"# {len(runs)} runs in {elapsed:.0f}s, {n_err} failed streams; load average {loadavg()}; machine: {info['cpu']}, "
          f"{info['cpus']} cpus, {info['mem_gib']} GiB, Linux {info['kernel']}, Python {info['python']}, "
          f"aiohttp {info['aiohttp']}")
    if args.json:
        doc = {"machine": info, "args": {k: v for k, v in vars(args).items()}, "elapsed_s": elapsed,
               "budgets": BUDGETS, "rows": rows, "summary": summaries, "runs": runs}
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    if n_err:
        return 1
    if args.enforce_budgets and not all(s.get("within_budgets", True) for s in summaries
                                        if s["target"] == "crossfeed"):
        return 3
    return 0


async def warm_small(env: Env, target: Target) -> None:
    """After a restart: exercise every path briefly so RSS starts from a warm process."""
    for v in ("text", "tool", "reasoning"):
        spec = loadgen.LoadSpec(url=target.url, model=upstream_mod.model_name(50, v=v), variant=v,
                                concurrency=8, duration=0.2, drain_timeout=10)
        await loadgen.run_load(spec)
    await asyncio.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny counts, a few seconds (smoke test)")
    ap.add_argument("--direction", choices=["forward", "reverse", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=None, help="repeats per cell (default 3; --quick 1)")
    ap.add_argument("--cells", default=None, help="regex on cell names, e.g. 'n2000|tool|paced'")
    ap.add_argument("--targets", default="passthrough,crossfeed",
                    help="comma list of passthrough, crossfeed, mintrans (the issue's minimal translating "
                         "proxy, for calibration), direct (load generator straight to the upstream)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of launching streams per throughput run")
    ap.add_argument("--paced-n", type=int, default=None, help="deltas per paced stream (default 200)")
    ap.add_argument("--drain-timeout", type=float, default=60.0)
    ap.add_argument("--write-batch", type=int, default=1,
                    help="upstream frames per socket write when unpaced (default 1, like a real server)")
    ap.add_argument("--passthrough-loop", choices=["uvloop", "asyncio"],
                    default="uvloop" if _has_uvloop() else "asyncio",
                    help="event loop of the pass-through (default uvloop when installed, as crossfeed does)")
    ap.add_argument("--crossfeed-arg", action="append", default=[],
                    help="extra argument for `python -m proxy serve` (repeatable)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the subprocesses")
    ap.add_argument("--upstream-cpu", type=int, default=None,
                    help="pin the upstream here (with --targets direct and the proxy's CPU: the upstream's "
                         "capacity alone)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    ap.add_argument("--start-timeout", type=float, default=30.0)
    ap.add_argument("--max-seconds", type=float, default=1200.0, help="abort the run after this long")
    ap.add_argument("--json", default=None, help="write every run and the aggregated rows to this file")
    ap.add_argument("--logdir", default=None, help="where the subprocess logs go (default: a temp dir)")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="record a py-spy profile of every non-baseline target run into DIR (figures of a "
                         "profiled run are not for quoting)")
    ap.add_argument("--enforce-budgets", action="store_true", help="exit 3 when a budget is missed")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")
    args = ap.parse_args(argv)
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return asyncio.run(run(args))
    return uvloop.run(run(args))


def _has_uvloop() -> bool:
    try:
        import uvloop  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
