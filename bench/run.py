"""Benchmark runner: crossfeed against a byte-for-byte pass-through, interleaved, one table.

    .venv/bin/python bench/run.py                      # full run, both directions (~7-10 min)
    .venv/bin/python bench/run.py --quick              # a few seconds: the smoke test
    .venv/bin/python bench/run.py --direction forward --repeat 5 --cells 'n2000|tool' --json out.json
    .venv/bin/python bench/run.py --baseline-tree /tmp/cf-base   # A/B: this tree against another one
    .venv/bin/python bench/run.py --quick --workers-cell         # and --workers 1 against --workers 2

What it does:
  1. starts bench/upstream.py (one process serves chat and Responses streams);
  2. starts the targets as subprocesses: the pass-through (bench/passthrough.py) and crossfeed
     (``python -m crossfeed serve``, forward: Responses clients -> chat upstream; reverse: chat
     clients -> Responses upstream), all pinned to one CPU, the upstream and this process (the
     load generator) to another;
  3. for each repeat, each cell, runs every target in turn (A/B, then B/A on the next repeat),
     reading the target's CPU time (utime+stime of its process tree, /proc/<pid>/stat) and the
     upstream's frame counter before and after, and sampling its RSS while it runs;
  4. prints one table (median over repeats, spread = (max-min)/2 relative to the median) and one
     summary line per direction with the ratios against the pass-through and the issue-5 budgets.

A/B (``--baseline-tree DIR``): a third target, ``crossfeed-base``, runs ``python -m crossfeed serve``
from DIR (cwd and PYTHONPATH = DIR, the same interpreter and flags), interleaved with the others;
the summary prints crossfeed / crossfeed-base per cell (CPU per upstream chunk, paired by repeat),
their geometric mean and the worst cell.

WebSocket cells (forward only; names start with ``ws``): crossfeed's WebSocket mode, each client
one socket with its turns one after another on it. They run on the crossfeed targets only (the
pass-through has no WebSocket mode) and are compared with the SSE cell of the same shape in the
same repeat (``vs SSE``; ``vs pt`` is against the pass-through's SSE run of that cell). After each
repeat an idle-socket check opens N sockets, runs one turn on each and, while they idle, counts
the upstream's open streams and crossfeed's TCP connections to the upstream and reads crossfeed's
CPU time and context switches (against the same window with no socket open).

The pass-through receives the same upstream stream untranslated (forward cells: a chat client
through the pass-through to the chat upstream), so "CPU per upstream chunk" compares the cost of
carrying the same upstream frames. Exit status: 0 when every target ran and no stream failed,
1 when a stream, a WebSocket turn or an idle socket failed, 2 when a target could not start. Budgets are reported, not enforced
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import idle  # noqa: E402 - bench/ is this script's own folder, on the path just above
import loadgen  # noqa: E402
import pyspy  # noqa: E402
import upstream as upstream_mod  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")

BUDGETS = {
    "geomean": 1.3,
    "max_cell": 2.0,
    "paced_p50_ms": 0.5,
    "paced_p99_ratio": 1.5,
    "paced_cpu_ratio": 1.5,
    "rss_kib_per_stream": 64.0,
    # A/B against the build before a change; WebSocket cells
    "ab_geomean": 1.03,
    "ab_max_cell": 1.10,
    "ws_cpu_vs_sse": 1.0,
    "rss_kib_per_socket": 64.0,
    "idle_cpu_ms": 5.0,
}
WS_LABELS = ("crossfeed", "crossfeed-base")  # the targets with a WebSocket mode (when they have one)


# ---------------------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    name: str
    c: int
    n: int
    v: str = "text"
    d: float = 0.0  # ms between deltas
    b: int = 24
    duration: float = 2.0  # seconds of launching streams (then drain)
    requests: int | None = None
    stagger: float = 0.0
    group: str = "info"  # "geo": in the geomean/max set; "paced": the paced budget cell; "ws"
    fresh: bool = False  # restart the targets before this cell (clean RSS per stream)
    transport: str = "sse"  # "ws": crossfeed's WebSocket mode (forward, crossfeed targets only)
    twin: str | None = None  # ws cells: the SSE cell of the same shape

    @property
    def paced(self) -> bool:
        return self.d > 0


def ws_twin(cell: Cell) -> Cell:
    """The WebSocket cell of an SSE cell's shape (run right after it)."""
    return Cell(**{**asdict(cell), "name": f"ws {cell.name}", "group": "ws", "transport": "ws", "twin": cell.name})


def full_cells(duration: float, paced_n: int = 200) -> list[Cell]:
    cells = []
    for n in (20, 2000):
        for c in (1, 16, 128):
            cells.append(Cell(f"c{c} n{n} text", c, n, duration=duration, group="geo"))
            if (c, n) == (16, 2000):
                cells.append(ws_twin(cells[-1]))
    cells.append(Cell("c16 n200 tool", 16, 200, v="tool", duration=duration, group="geo"))
    cells.append(Cell("c16 n200 text", 16, 200, duration=duration))
    cells.append(Cell("c16 n200 reasoning", 16, 200, v="reasoning", duration=duration))
    cells.append(
        Cell(
            f"paced c256 n{paced_n} d20",
            256,
            paced_n,
            d=20.0,
            requests=256,
            duration=30.0,
            stagger=0.5,
            group="paced",
            fresh=True,
        )
    )
    cells.append(ws_twin(cells[-1]))
    return cells


def quick_cells() -> list[Cell]:
    cells = [
        Cell("c1 n20 text", 1, 20, duration=0.25, group="geo"),
        Cell("c4 n20 text", 4, 20, duration=0.25, group="geo"),
        Cell("c4 n20 tool", 4, 20, v="tool", duration=0.25, group="geo"),
        Cell("c2 n20 reasoning", 2, 20, v="reasoning", duration=0.25),
        Cell("paced c8 n10 d20", 8, 10, d=20.0, requests=8, duration=10.0, stagger=0.02, group="paced"),
    ]
    cells.insert(2, ws_twin(cells[1]))
    cells.append(ws_twin(cells[-1]))
    return cells


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
    pids: list[int] = []
    todo = [pid]
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


def steal_seconds() -> float:
    """CPU time the hypervisor gave to other guests while this VM wanted it (all CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / CLK_TCK if len(fields) > 8 else 0.0


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


def syscalls(pid: int) -> tuple[int, int]:
    """read and write system calls (syscr, syscw of /proc/<pid>/io) of a process tree."""
    r = w = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/io") as f:
                for line in f:
                    if line.startswith("syscr:"):
                        r += int(line.split()[1])
                    elif line.startswith("syscw:"):
                        w += int(line.split()[1])
        except (OSError, ValueError):
            pass
    return r, w


@dataclass
class Proc:
    name: str
    argv: list[str]
    port: int
    cpu: int | None
    log_path: Path
    popen: subprocess.Popen | None = None
    cwd: Path = REPO
    env: dict[str, str] | None = None  # None: this process's environment

    def start(self) -> None:
        with open(self.log_path, "ab") as logf:
            self.popen = subprocess.Popen(
                self.argv, stdout=logf, stderr=subprocess.STDOUT, cwd=self.cwd, env=self.env, start_new_session=True
            )
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
            out, rest = out + rest[:size], rest[size + 2 :]
        body = out
    return status, body


async def wait_ready(proc: Proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartError(
                f"{proc.name} exited with status {proc.popen.returncode if proc.popen else '?'}"
                f" before it answered /healthz; log {proc.log_path}:\n{proc.log_tail()}"
            )
        try:
            status, _ = await http_get(proc.port, "/healthz", 1.0)
            if status == 200:
                return
        except (TimeoutError, OSError, ValueError, IndexError):
            pass
        await asyncio.sleep(0.05)
    raise StartError(
        f"{proc.name} did not answer /healthz within {timeout:.0f}s; log {proc.log_path}:\n{proc.log_tail()}"
    )


class StartError(RuntimeError):
    pass


# ---------------------------------------------------------------------------- targets


@dataclass
class Target:
    """One thing the load generator talks to, for one direction."""

    label: str  # passthrough | crossfeed | direct
    direction: str  # forward | reverse
    proc: Proc | None  # None for direct
    path: str  # client path
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
    ws_ok: dict[str, bool] = field(default_factory=dict)  # label -> has a WebSocket mode

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
            argv = [
                py,
                str(HERE / "mintrans.py"),
                "--port",
                str(port),
                "--upstream",
                self.upstream_url,
                "--upstream-api",
                "responses" if key.endswith("reverse") else "chat",
            ]
            if self.args.passthrough_loop == "uvloop":
                argv.append("--uvloop")
        else:  # crossfeed-forward | crossfeed-reverse | crossfeed-base-forward | crossfeed-base-reverse
            tree = self.args.baseline_tree if key.startswith("crossfeed-base") else None
            argv = [
                py,
                "-m",
                entry_module(tree),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--upstream",
                self.upstream_url,
            ]
            if key.endswith("-reverse"):
                argv += ["--upstream-api", "responses"]
            argv += self.args.crossfeed_arg
            if key.startswith("crossfeed-base"):
                cwd, env = base_env(self.args.baseline_tree)
                return Proc(key, argv, port, self.proxy_cpu, self.logdir / f"{key}.log", cwd=cwd, env=env)
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


def base_env(tree: str) -> tuple[Path, dict[str, str]]:
    """cwd and environment of the crossfeed-base target: the other tree first on the path."""
    root = Path(tree).resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return root, env


def entry_module(tree: str | None) -> str:
    """``python -m`` what: ``crossfeed``, or ``proxy`` for a tree from before the one package name."""
    if tree is None or (Path(tree) / "crossfeed" / "__main__.py").is_file():
        return "crossfeed"
    return "proxy"


def check_base_tree(python: str, tree: str) -> str:
    """Where the base target's ``proxy`` and ``translators`` come from (must be inside the tree)."""
    root = Path(tree).resolve()
    if not (root / "proxy" / "__main__.py").is_file():
        raise StartError(f"--baseline-tree {tree}: no proxy/__main__.py there")
    cwd, env = base_env(tree)
    pkg = "crossfeed." if entry_module(tree) == "crossfeed" else ""
    out = subprocess.run(
        [python, "-c", f"import {pkg}proxy as p, {pkg}translators as t; print(p.__file__); print(t.__file__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    files = out.stdout.split()
    if out.returncode != 0 or len(files) != 2 or not all(Path(f).resolve().is_relative_to(root) for f in files):
        raise StartError(
            f"--baseline-tree {tree}: the interpreter imports {files or out.stderr.strip()!r}, "
            f"not the tree's own packages"
        )
    return files[0]


def git_describe(path: Path) -> str:
    """Short commit of a checkout, and whether proxy/ or translators/ have changes (read-only git)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if head.returncode != 0:
            return "not a git checkout"
        st = subprocess.run(
            ["git", "-C", str(path), "status", "--short", "proxy", "translators"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "git unavailable"
    dirty = [ln[3:] for ln in st.stdout.splitlines() if ln.strip()]
    return head.stdout.strip() + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else "")


async def ws_probe(env: Env) -> None:
    """One small WebSocket turn on each target that upgrades: say why when it fails."""
    import aiohttp

    for label, ok in env.ws_ok.items():
        if not ok:
            continue
        url = make_target(env, label, "forward").url
        frames: list[str] = []
        async with aiohttp.ClientSession() as session:
            ws = await loadgen.ws_connect(session, url)
            await ws.send_str(loadgen.ws_create_frame(upstream_mod.model_name(5)))
            try:
                while True:
                    msg = await ws.receive(timeout=10)
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        frames.append(f"<{msg.type.name}>")
                        break
                    frames.append(msg.data)
                    head = msg.data[:120]
                    if loadgen.WS_TERMINAL_OK in head or any(k in head for k in loadgen.WS_FAILED):
                        break
            except TimeoutError:
                frames.append("<no frame within 10 s>")
            await ws.close()
        if not frames or loadgen.WS_TERMINAL_OK not in frames[-1][:120]:
            print(
                f"bench: WebSocket probe of {label} failed; last frame: {frames[-1][:300] if frames else None}"
                + (
                    " (crossfeed asked the chat upstream for stream: false; --upstream-stream-always makes the "
                    "fake upstream stream anyway)"
                    if frames and "only streams" in frames[-1]
                    else ""
                ),
                file=sys.stderr,
                flush=True,
            )


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
    spec = loadgen.LoadSpec(
        url=target.url,
        model=model,
        variant=cell.v,
        transport=cell.transport,
        concurrency=cell.c,
        duration=cell.duration,
        requests=cell.requests,
        drain_timeout=env.args.drain_timeout,
        stagger=cell.stagger,
    )
    pid = target.proc.pid if target.proc else None
    assert env.upstream is not None
    up_pid = env.upstream.pid
    rss_base = status_kib(pid, "VmRSS:") if pid else 0
    rss_peak = rss_base
    stop_sampling = asyncio.Event()

    async def sampler() -> None:
        nonlocal rss_peak
        while not stop_sampling.is_set():
            rss_peak = max(rss_peak, status_kib(pid, "VmRSS:") if pid else 0)
            try:
                await asyncio.wait_for(stop_sampling.wait(), 0.05)
            except TimeoutError:
                pass

    # this process's tree: the load generator, the upstream and every target are its children
    # (counting them again on their own made the figure negative, so it read 0 whatever ran)
    ours = [os.getpid()]
    f0 = await upstream_frames(env)
    sys0 = system_busy_seconds() - sum(cpu_seconds(p) for p in ours)
    steal0 = steal_seconds()
    up0 = cpu_seconds(up_pid)
    cpu0 = cpu_seconds(pid) if pid else 0.0
    io0 = syscalls(pid) if pid else (0, 0)
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
    io1 = syscalls(pid) if pid else (0, 0)
    up1 = cpu_seconds(up_pid)
    sys1 = system_busy_seconds() - sum(cpu_seconds(p) for p in ours)
    steal1 = steal_seconds()
    stop_sampling.set()
    if samp is not None:
        await samp
    f1 = await upstream_frames(env)
    frames = f1 - f0
    res.update(
        {
            "target": target.label,
            "direction": target.direction,
            "cell": cell.name,
            "frames": frames,
            "cpu_s": round(cpu1 - cpu0, 4),
            "cpu_us_per_chunk": (cpu1 - cpu0) * 1e6 / frames if (pid and frames) else None,
            # the target's read and write system calls per upstream frame (both sockets)
            "reads_per_chunk": (io1[0] - io0[0]) / frames if (pid and frames) else None,
            "writes_per_chunk": (io1[1] - io0[1]) / frames if (pid and frames) else None,
            "cpu_util": ((cpu1 - cpu0) if pid else (up1 - up0)) / res["wall_s"] if res["wall_s"] else None,
            "upstream_us_per_chunk": (up1 - up0) * 1e6 / frames if frames else None,
            "background_cpu": max(0.0, sys1 - sys0) / res["wall_s"] if res["wall_s"] else None,
            "steal_cpu": (steal1 - steal0) / res["wall_s"] if res["wall_s"] else None,
            "loadgen_us_per_event": res["loadgen_cpu_s"] * 1e6 / res["events"] if res["events"] else None,
            "rss_base_kib": rss_base,
            "rss_peak_kib": rss_peak,
            "hwm_kib": status_kib(pid, "VmHWM:") if pid else None,
            "rss_kib_per_stream": ((rss_peak - rss_base) / res["max_open"]) if (pid and res["max_open"]) else None,
        }
    )
    if pid and not target.proc.alive():  # type: ignore[union-attr]
        res["errors"] += 1
        res["error_kinds"]["target_died"] = 1
    return res


def ws_capable(env: Env, target: Target) -> bool:
    return target.direction == "forward" and env.ws_ok.get(target.label, False)


async def warm(env: Env, target: Target, quick: bool) -> None:
    transports = ["sse", "ws"] if ws_capable(env, target) else ["sse"]
    for transport in transports:
        for v in ("text", "tool", "reasoning"):
            cell = Cell("warmup", 4, 20 if quick else 200, v=v, duration=0.1 if quick else 0.4)
            model = upstream_mod.model_name(cell.n, v=v, w=env.args.write_batch)
            spec = loadgen.LoadSpec(
                url=target.url,
                model=model,
                variant=v,
                transport=transport,
                concurrency=cell.c,
                duration=cell.duration,
                drain_timeout=10,
            )
            res = await loadgen.run_load(spec)
            if res["errors"]:
                print(
                    f"  warmup {target.label} {target.direction} {transport} {v}: {res['error_kinds']}", file=sys.stderr
                )


# ---------------------------------------------------------------------------- idle-socket check


def _thread_files(pid: int, name: str) -> Iterator[str]:
    """The text of /proc/<p>/task/<tid>/<name> for every thread of a process tree (gone ones skipped)."""
    for p in tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/{name}") as f:
                    yield f.read()
            except OSError:
                pass


def sched_ns(pid: int) -> int:
    """CPU time run (ns, /proc/<pid>/task/<tid>/schedstat) of every thread of a process tree."""
    total = 0
    for text in _thread_files(pid, "schedstat"):
        try:
            total += int(text.split()[0])
        except (ValueError, IndexError):
            pass
    return total


def ctx_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of a process tree: its wake-ups."""
    total = 0
    for text in _thread_files(pid, "status"):
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                try:
                    total += int(line.split()[1])
                except (ValueError, IndexError):
                    pass
    return total


def tcp_conns_to(pid: int, port: int) -> int:
    """Established TCP connections of a process tree whose remote port is ``port`` (/proc/net/tcp)."""
    inodes = set()
    for p in tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    n = 0
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if (
                        len(fields) > 9
                        and fields[3] == "01"
                        and int(fields[2].rsplit(":", 1)[1], 16) == port
                        and fields[9] in inodes
                    ):
                        n += 1
        except (OSError, StopIteration, ValueError):
            pass
    return n


async def upstream_stats(env: Env) -> dict:
    assert env.upstream is not None
    _, body = await http_get(env.upstream.port, "/stats")
    return orjson.loads(body)


async def idle_window(env: Env, pid: int, seconds: float) -> dict:
    """Watch a process that should be idle for ``seconds``: CPU used, wake-ups, upstream connections."""
    assert env.upstream is not None
    st0 = await upstream_stats(env)
    conns0 = tcp_conns_to(pid, env.upstream.port)
    ns0, cs0 = sched_ns(pid), ctx_switches(pid)
    await asyncio.sleep(seconds)
    ns1, cs1 = sched_ns(pid), ctx_switches(pid)
    conns1 = tcp_conns_to(pid, env.upstream.port)
    st1 = await upstream_stats(env)
    return {
        "seconds": seconds,
        "cpu_ms": (ns1 - ns0) / 1e6,
        "wakeups": cs1 - cs0,
        "upstream_active": max(st0["active"], st1["active"]),
        "upstream_open": max(st0["open"], st1["open"]) - 1,  # less the /stats request's own
        "crossfeed_upstream_conns": max(conns0, conns1),
    }


async def idle_check(env: Env, label: str, rep: int) -> dict:
    """N sockets that completed one turn each, idle: no upstream connection kept, no wake-up.

    The target is restarted first (its upstream pool then holds only what the warm-up and these
    turns leave: at most ``turn concurrency`` keep-alive connections, as after any SSE requests);
    the same window with no socket open is the control.
    """
    args = env.args
    n, secs, conc = args.idle_sockets, args.idle_seconds, min(args.idle_sockets, 4 if args.quick else 16)
    key = proc_key(label, "forward")
    if not args.quick:
        await env.restart(key)
        tgt = make_target(env, label, "forward")
        await warm_small(env, tgt, ws_conc=conc)
    tgt = make_target(env, label, "forward")
    pid = tgt.proc.pid  # type: ignore[union-attr]
    model = upstream_mod.model_name(50)
    await asyncio.sleep(0.3)
    control = await idle_window(env, pid, secs)
    rss0 = status_kib(pid, "VmRSS:")
    socks = loadgen.IdleSockets(tgt.url, model, n, conc)
    try:
        opened = await socks.open()
        await asyncio.sleep(0.3)
        rss1 = status_kib(pid, "VmRSS:")
        idle = await idle_window(env, pid, secs)
        still_open = socks.open_count()
    finally:
        await socks.close()
    return {
        "target": label,
        "rep": rep,
        "sockets": n,
        "turn_concurrency": conc,
        **opened,
        "still_open": still_open,
        "control": control,
        "idle": idle,
        "rss_kib_per_idle_socket": (rss1 - rss0) / n if n else None,
        "target_alive": tgt.proc is not None and tgt.proc.alive(),
    }


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


def paired(rs: list[dict], base: list[dict]) -> list[tuple[dict, dict]]:
    """Runs of two targets paired repeat by repeat (each pair ran in the same repeat)."""
    by_rep = {b.get("rep"): b for b in base}
    return [(a, by_rep[a.get("rep")]) for a in sorted(rs, key=lambda r: r.get("rep", 0)) if a.get("rep") in by_rep]


def cpu_ratios(pairs: list[tuple[dict, dict]]) -> list[float]:
    return [
        a["cpu_us_per_chunk"] / b["cpu_us_per_chunk"]
        for a, b in pairs
        if a.get("cpu_us_per_chunk") and b.get("cpu_us_per_chunk")
    ]


def aggregate(runs: list[dict], cells: list[Cell], directions: list[str], labels: list[str]) -> list[dict]:
    rows = []

    def of(direction: str, cell_name: str | None, label: str) -> list[dict]:
        return [r for r in runs if r["direction"] == direction and r["cell"] == cell_name and r["target"] == label]

    for direction in directions:
        for cell in cells:
            # the pass-through's runs of this cell (a WebSocket cell: of its SSE twin)
            base = of(direction, cell.twin if cell.transport == "ws" else cell.name, "passthrough")
            for label in labels:
                rs = of(direction, cell.name, label)
                if not rs:
                    continue
                row = {
                    "direction": direction,
                    "cell": cell.name,
                    "group": cell.group,
                    "target": label,
                    "transport": cell.transport,
                    "paced": cell.paced,
                    "twin": cell.twin,
                    "repeats": len(rs),
                }
                for k in (
                    "streams_per_s",
                    "events_per_s",
                    "ttfe_p50_ms",
                    "ttfe_p99_ms",
                    "lat_p50_ms",
                    "lat_p99_ms",
                    "cpu_us_per_chunk",
                    "cpu_util",
                    "upstream_us_per_chunk",
                    "loadgen_us_per_event",
                    "rss_peak_kib",
                    "rss_kib_per_stream",
                    "hwm_kib",
                    "background_cpu",
                    "steal_cpu",
                    "reads_per_chunk",
                    "writes_per_chunk",
                ):
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
                    pairs = paired(rs, base)
                    ratios = cpu_ratios(pairs)
                    row["cpu_ratio"] = med(ratios)
                    row["cpu_ratio_spread"] = spread(ratios)
                    row["lat_p50_delta_ms"] = med(
                        [
                            a["lat_p50_ms"] - b["lat_p50_ms"]
                            for a, b in pairs
                            if a.get("lat_p50_ms") is not None and b.get("lat_p50_ms") is not None
                        ]
                    )
                    row["lat_p99_ratio"] = med(
                        [
                            a["lat_p99_ms"] / b["lat_p99_ms"]
                            for a, b in pairs
                            if a.get("lat_p99_ms") and b.get("lat_p99_ms")
                        ]
                    )
                # A/B: crossfeed against crossfeed-base, same cell, same repeat
                if label == "crossfeed":
                    ab = cpu_ratios(paired(rs, of(direction, cell.name, "crossfeed-base")))
                    if ab:
                        row["ab_ratio"], row["ab_ratio_spread"], row["ab_ratios"] = med(ab), spread(ab), ab
                # WebSocket cell against the same target's SSE twin, same repeat
                if cell.transport == "ws":
                    twin = paired(rs, of(direction, cell.twin, label))
                    vs = cpu_ratios(twin)
                    if vs:
                        row["ws_vs_sse"], row["ws_vs_sse_spread"] = med(vs), spread(vs)
                    row["sse_cpu_us_per_chunk"] = med([b.get("cpu_us_per_chunk") for _, b in twin])
                    row["sse_writes_per_chunk"] = med([b.get("writes_per_chunk") for _, b in twin])
                    row["sse_reads_per_chunk"] = med([b.get("reads_per_chunk") for _, b in twin])
                    row["sse_rss_kib_per_stream"] = med([b.get("rss_kib_per_stream") for _, b in twin])
                    row["sse_lat_p50_ms"] = med([b.get("lat_p50_ms") for _, b in twin])
                    row["sse_lat_p99_ms"] = med([b.get("lat_p99_ms") for _, b in twin])
                rows.append(row)
    return rows


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return "" if v is None else f"±{v * 100:.0f}%"


def render_table(rows: list[dict]) -> str:
    head = [
        "dir",
        "cell",
        "target",
        "streams/s",
        "events/s",
        "ttfe p50/p99 ms",
        "lat p50/p99 ms",
        "cpu µs/chunk",
        "vs pt",
        "cpu%",
        "rss MiB",
        "KiB/stream",
        "up µs/ch",
        "bg%",
        "errors",
    ]
    extra = [(k, h) for k, h in (("ab_ratio", "vs base"), ("ws_vs_sse", "vs SSE")) if any(r.get(k) for r in rows)]
    head[9:9] = [h for _, h in extra]
    out = []
    for r in rows:
        out.append(
            [
                r["direction"][:3],
                r["cell"],
                r["target"],
                _f(r["streams_per_s"], ".1f"),
                _f(r["events_per_s"], ".0f"),
                f"{_f(r['ttfe_p50_ms'], '.2f')}/{_f(r['ttfe_p99_ms'], '.2f')}",
                f"{_f(r['lat_p50_ms'], '.2f')}/{_f(r['lat_p99_ms'], '.2f')}",
                f"{_f(r['cpu_us_per_chunk'], '.2f')} {_pct(r['cpu_spread'])}".strip(),
                (
                    f"{r['cpu_ratio']:.2f}x {_pct(r.get('cpu_ratio_spread'))}".strip()
                    if r.get("cpu_ratio") is not None
                    else ""
                ),
                *[
                    (f"{r[k]:.2f}x {_pct(r.get(k + '_spread'))}".strip() if r.get(k) is not None else "")
                    for k, _ in extra
                ],
                _f(r["cpu_util"] * 100 if r["cpu_util"] is not None else None, ".0f"),
                _f(r["rss_peak_kib"] / 1024 if r["rss_peak_kib"] else None, ".1f"),
                _f(r["rss_kib_per_stream"], ".1f") if r.get("paced") else "",
                _f(r["upstream_us_per_chunk"], ".2f"),
                _f(r["background_cpu"] * 100 if r["background_cpu"] is not None else None, ".0f"),
                str(r["errors"]) + (f" {r['error_kinds']}" if r["errors"] else ""),
            ]
        )
    widths = [max(len(head[i]), *(len(row[i]) for row in out)) if out else len(head[i]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)), "  ".join("-" * w for w in widths)]
    prev = None
    for row in out:
        key = (row[0], row[1])
        if prev is not None and key != prev:
            lines.append("")
        prev = key
        lines.append(
            "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        )
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
        parts.append(
            f"max {worst['cpu_ratio']:.2f}x [{worst['cell']}] (≤{BUDGETS['max_cell']}) "
            f"{verdict(worst['cpu_ratio'] <= BUDGETS['max_cell'])}"
        )
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
            parts.append(
                f"rss {k:.1f} KiB/stream (≤{BUDGETS['rss_kib_per_stream']:.0f}; pt "
                f"{_f(ptk, '.1f')}) {verdict(k <= BUDGETS['rss_kib_per_stream'])}"
            )
            s["rss_kib_per_stream"] = k
    name = "" if label == "crossfeed" else f" ({label})"
    if not parts:
        return f"SUMMARY{name} {direction}: no cells to compare", s
    s["within_budgets"] = ok
    return (
        f"SUMMARY{name} {direction} vs pass-through: "
        + "; ".join(parts)
        + f" => {'within budgets' if ok else 'OVER BUDGET'}"
    ), s


def geomean(vals: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summarise_ab(rows: list[dict], direction: str) -> tuple[str, dict]:
    """crossfeed against crossfeed-base, cell by cell (CPU per upstream chunk, paired by repeat)."""
    cf = [r for r in rows if r["direction"] == direction and r["target"] == "crossfeed" and r.get("ab_ratio")]
    base = {r["cell"]: r for r in rows if r["direction"] == direction and r["target"] == "crossfeed-base"}
    s: dict = {"direction": direction, "target": "crossfeed", "kind": "ab", "cells": {}}
    if not cf:
        return f"SUMMARY A/B {direction}: no cell ran both crossfeed and crossfeed-base", s
    lines = [
        f"A/B {direction}: crossfeed (this tree) / crossfeed-base, CPU per upstream chunk, median of the "
        "per-repeat ratios",
        f"  {'cell':26s} {'base µs/ch':>10s} {'crossfeed':>10s} {'ratio':>7s}  per repeat",
    ]
    for r in cf:
        b = base.get(r["cell"], {})
        lines.append(
            f"  {r['cell']:26s} {_f(b.get('cpu_us_per_chunk'), '.2f'):>10s} "
            f"{_f(r.get('cpu_us_per_chunk'), '.2f'):>10s} {r['ab_ratio']:6.3f}x  "
            + " ".join(f"{x:.3f}" for x in r["ab_ratios"])
        )
        s["cells"][r["cell"]] = {
            "ratio": r["ab_ratio"],
            "ratios": r["ab_ratios"],
            "crossfeed_us": r.get("cpu_us_per_chunk"),
            "base_us": b.get("cpu_us_per_chunk"),
        }
    gm = geomean([r["ab_ratio"] for r in cf])
    worst = max(cf, key=lambda r: r["ab_ratio"])
    geo = [r["ab_ratio"] for r in cf if r["group"] == "geo"]
    s.update(
        geomean=gm,
        max_cell=worst["ab_ratio"],
        max_cell_name=worst["cell"],
        n_cells=len(cf),
        geomean_geo_cells=geomean(geo) if geo else None,
    )
    ok_gm, ok_max = gm <= BUDGETS["ab_geomean"], worst["ab_ratio"] <= BUDGETS["ab_max_cell"]
    s["within_budgets"] = ok_gm and ok_max
    lines.append(
        f"SUMMARY A/B {direction} crossfeed vs crossfeed-base: geomean {gm:.3f}x over {len(cf)} cells "
        f"(≤{BUDGETS['ab_geomean']}) {'ok' if ok_gm else 'OVER'}"
        + (f" [throughput set {s['geomean_geo_cells']:.3f}x]" if geo else "")
        + f"; worst {worst['ab_ratio']:.3f}x [{worst['cell']}] (≤{BUDGETS['ab_max_cell']}) "
        f"{'ok' if ok_max else 'OVER'}"
    )
    return "\n".join(lines), s


def idle_ok(i: dict) -> bool:
    idle = i["idle"]
    return (
        i["errors"] == 0
        and i["still_open"] == i["sockets"]
        and idle["upstream_active"] == 0
        and idle["crossfeed_upstream_conns"] <= max(i["turn_concurrency"], i["control"]["crossfeed_upstream_conns"])
        and idle["cpu_ms"] <= BUDGETS["idle_cpu_ms"]
    )


def summarise_ws(rows: list[dict], idle: list[dict], label: str = "crossfeed") -> tuple[str, dict]:
    """The WebSocket cells against their SSE twins, and the idle-socket check."""
    ws = [r for r in rows if r["target"] == label and r.get("transport") == "ws"]
    its = [i for i in idle if i["target"] == label]
    s: dict = {"direction": "forward", "target": label, "kind": "ws"}
    parts = []
    ok = True

    def verdict(passed: bool) -> str:
        nonlocal ok
        ok = ok and passed
        return "ok" if passed else "OVER"

    for r in ws:
        d = {
            "cpu_us_per_chunk": r.get("cpu_us_per_chunk"),
            "sse_cpu_us_per_chunk": r.get("sse_cpu_us_per_chunk"),
            "ws_vs_sse": r.get("ws_vs_sse"),
            "vs_pt": r.get("cpu_ratio"),
            "errors": r["errors"],
        }
        txt = (
            f"{r['cell']}: {r['completed']} turns, {r['errors']} failed {verdict(r['errors'] == 0)}; "
            f"cpu {_f(r.get('cpu_us_per_chunk'), '.2f')} µs/chunk, SSE {_f(r.get('sse_cpu_us_per_chunk'), '.2f')}"
        )
        if r.get("ws_vs_sse") is not None:
            q = r["ws_vs_sse"]
            txt += f" = {q:.2f}x (≤{BUDGETS['ws_cpu_vs_sse']:.2f}) {verdict(q <= BUDGETS['ws_cpu_vs_sse'])}"
        if r.get("cpu_ratio") is not None:
            txt += f", vs pt SSE {r['cpu_ratio']:.2f}x"
        if r.get("writes_per_chunk") is not None:
            txt += (
                f"; write calls/chunk {r['writes_per_chunk']:.2f} (SSE {_f(r.get('sse_writes_per_chunk'), '.2f')}), "
                f"reads {_f(r.get('reads_per_chunk'), '.2f')} (SSE {_f(r.get('sse_reads_per_chunk'), '.2f')})"
            )
            d["writes_per_chunk"], d["sse_writes_per_chunk"] = r["writes_per_chunk"], r.get("sse_writes_per_chunk")
            d["reads_per_chunk"], d["sse_reads_per_chunk"] = r.get("reads_per_chunk"), r.get("sse_reads_per_chunk")
        if r.get("paced") and r.get("rss_kib_per_stream") is not None:
            k = r["rss_kib_per_stream"]
            txt += (
                f"; rss {k:.1f} KiB/socket (≤{BUDGETS['rss_kib_per_socket']:.0f}; SSE "
                f"{_f(r.get('sse_rss_kib_per_stream'), '.1f')} KiB/stream) "
                f"{verdict(k <= BUDGETS['rss_kib_per_socket'])}"
            )
            d["rss_kib_per_socket"] = k
            d["lat_p50_ms"], d["lat_p99_ms"] = r.get("lat_p50_ms"), r.get("lat_p99_ms")
            d["sse_lat_p50_ms"], d["sse_lat_p99_ms"] = r.get("sse_lat_p50_ms"), r.get("sse_lat_p99_ms")
        parts.append(txt)
        s[r["cell"]] = d
    if its:
        n = its[0]["sockets"]
        worst_cpu = max(its, key=lambda i: i["idle"]["cpu_ms"])
        conns = max(i["idle"]["crossfeed_upstream_conns"] for i in its)
        conns0 = max(i["control"]["crossfeed_upstream_conns"] for i in its)
        active = max(i["idle"]["upstream_active"] for i in its)
        wake = [i["idle"]["wakeups"] for i in its]
        wake0 = [i["control"]["wakeups"] for i in its]
        rss = med([i["rss_kib_per_idle_socket"] for i in its])
        all_ok = all(idle_ok(i) for i in its)
        parts.append(
            f"idle {n} sockets x {its[0]['idle']['seconds']:g} s ({len(its)} checks): upstream streams open "
            f"{active}, crossfeed->upstream connections {conns} (its keep-alive pool; before the sockets {conns0}; "
            f"turns {its[0]['turn_concurrency']} at a time), cpu ≤{worst_cpu['idle']['cpu_ms']:.2f} ms (no socket: ≤"
            f"{max(i['control']['cpu_ms'] for i in its):.2f} ms; ≤{BUDGETS['idle_cpu_ms']:g}), wake-ups "
            f"{'/'.join(map(str, wake))} (no socket: {'/'.join(map(str, wake0))}), rss {_f(rss, '.1f')} KiB/idle "
            f"socket {verdict(all_ok)}"
        )
        s["idle"] = {
            "sockets": n,
            "checks": len(its),
            "upstream_active": active,
            "crossfeed_upstream_conns": conns,
            "crossfeed_upstream_conns_before": conns0,
            "cpu_ms_max": worst_cpu["idle"]["cpu_ms"],
            "wakeups": wake,
            "control_wakeups": wake0,
            "rss_kib_per_idle_socket": rss,
            "ok": all_ok,
        }
    name = "" if label == "crossfeed" else f" ({label})"
    if not parts:
        return f"SUMMARY websocket{name}: no WebSocket cell ran", s
    s["within_budgets"] = ok
    return (
        f"SUMMARY websocket{name} forward vs SSE: "
        + "; ".join(parts)
        + f" => {'within budgets' if ok else 'OVER BUDGET'}"
    ), s


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
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "mem_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "aiohttp": aiohttp_v,
        **idle.idle_state(),
    }


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

    cells = quick_cells() if args.quick else full_cells(args.duration, args.paced_n or 200)
    if args.cells:
        rx = re.compile(args.cells)
        cells = [c for c in cells if rx.search(c.name)]
    if args.no_ws:
        cells = [c for c in cells if c.transport != "ws"]
    if args.quick:
        cells = [Cell(**{**asdict(c), "fresh": False}) for c in cells]
    directions = ["forward", "reverse"] if args.direction == "both" else [args.direction]
    labels = [x.strip() for x in args.targets.split(",") if x.strip()]
    if args.baseline_tree and "crossfeed-base" not in labels:
        labels.insert(labels.index("crossfeed") + 1 if "crossfeed" in labels else len(labels), "crossfeed-base")
    if "crossfeed-base" in labels and not args.baseline_tree:
        print("bench: the crossfeed-base target needs --baseline-tree DIR", file=sys.stderr)
        return 2
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    if args.idle_sockets is None:
        args.idle_sockets = 8 if args.quick else 256
    if args.idle_seconds is None:
        args.idle_seconds = 0.5 if args.quick else 2.0
    idle_on = (
        args.idle_sockets > 0
        and "forward" in directions
        and not args.no_ws
        and (not args.cells or any(c.transport == "ws" for c in cells))
    )

    print(
        f"# crossfeed bench: {len(cells)} cells x {len(labels)} targets x {len(directions)} directions "
        f"x {repeat} repeats; pinning: load generator+upstream cpu {gen_cpu}/{up_cpu}, targets cpu "
        f"{proxy_cpu}; load average {loadavg()}; logs {logdir}",
        flush=True,
    )
    print(f"# this tree: {REPO} ({git_describe(REPO)}); {idle.describe(idle.idle_state())}", flush=True)
    if args.baseline_tree:
        try:
            where = check_base_tree(args.python, args.baseline_tree)
        except StartError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        print(
            f"# crossfeed-base: {Path(args.baseline_tree).resolve()} ({git_describe(Path(args.baseline_tree))}; "
            f"imports {where})",
            flush=True,
        )
    up_port = free_port()
    up_argv = [args.python, str(HERE / "upstream.py"), "--port", str(up_port)]
    if args.upstream_stream_always:
        up_argv.append("--stream-always")
    env.upstream = Proc("upstream", up_argv, up_port, up_cpu, logdir / "upstream.log")
    runs: list[dict] = []
    idle_runs: list[dict] = []
    t_start = time.monotonic()
    try:
        env.upstream.start()
        await wait_ready(env.upstream, args.start_timeout)
        keys = []
        if "passthrough" in labels:
            keys.append("passthrough")
        for label in ("crossfeed", "crossfeed-base", "mintrans"):
            if label in labels:
                keys += [f"{label}-{d}" for d in directions]
        for key in keys:
            await env.start(key)
        if "forward" in directions and (any(c.transport == "ws" for c in cells) or idle_on):
            for label in WS_LABELS:
                if label in labels:
                    env.ws_ok[label] = await loadgen.ws_supported(make_target(env, label, "forward").url)
            print(
                "# websocket mode: "
                + ", ".join(
                    f"{k} {'yes' if v else 'no (its WebSocket cells are skipped)'}" for k, v in env.ws_ok.items()
                ),
                flush=True,
            )
            await ws_probe(env)
        for direction in directions:
            for label in labels:
                await warm(env, make_target(env, label, direction), args.quick)
        for rep in range(repeat):
            for ci, cell in enumerate(cells):
                for direction in directions:
                    order = labels if (rep + ci) % 2 == 0 else labels[::-1]
                    if cell.transport == "ws":
                        order = [x for x in order if direction == "forward" and env.ws_ok.get(x)]
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
                            print(
                                f"  rep {rep} {direction:7s} {cell.name:22s} {label:11s} "
                                f"{res['completed']:6d} streams {res['events_per_s']:9.0f} ev/s "
                                f"cpu {_f(res['cpu_us_per_chunk'], '.2f')} µs/chunk "
                                f"lat {_f(res['lat_p50_ms'], '.2f')}/{_f(res['lat_p99_ms'], '.2f')} ms "
                                f"err {res['errors']}",
                                flush=True,
                            )
                        if res["errors"] and not args.verbose:
                            print(
                                f"  errors: rep {rep} {direction} {cell.name} {label}: {res['error_kinds']}",
                                file=sys.stderr,
                                flush=True,
                            )
            if idle_on:
                for label in [x for x in labels if env.ws_ok.get(x)]:
                    if time.monotonic() - t_start > args.max_seconds:
                        raise TimeoutError(f"run exceeded --max-seconds {args.max_seconds}")
                    res = await idle_check(env, label, rep)
                    idle_runs.append(res)
                    if args.verbose or not idle_ok(res):
                        print(
                            f"  rep {rep} idle check {label}: {res}",
                            file=sys.stdout if args.verbose else sys.stderr,
                            flush=True,
                        )
        up_final = await upstream_stats(env)
    except StartError as exc:
        print(f"bench: target failed to start: {exc}", file=sys.stderr)
        env.stop_all()
        return 2
    except TimeoutError as exc:
        print(f"bench: {exc}; reporting the runs so far", file=sys.stderr)
        runs.append(
            {
                "target": "-",
                "direction": "-",
                "cell": "-",
                "errors": 1,
                "error_kinds": {"max_seconds": 1},
                "completed": 0,
            }
        )
        up_final = {}
    finally:
        env.stop_all()
    elapsed = time.monotonic() - t_start
    rows = aggregate(runs, cells, directions, labels)
    print()
    print(render_table(rows))
    print()
    summaries = []
    for label in ("crossfeed", "crossfeed-base", "mintrans"):
        for direction in directions:
            if label in labels and "passthrough" in labels:
                line, s = summarise(rows, direction, label)
                print(line)
                summaries.append(s)
    if "crossfeed-base" in labels and "crossfeed" in labels:
        for direction in directions:
            print()
            line, s = summarise_ab(rows, direction)
            print(line)
            summaries.append(s)
    for label in WS_LABELS:
        if label in labels and (
            any(r["target"] == label and r.get("transport") == "ws" for r in rows)
            or any(i["target"] == label for i in idle_runs)
        ):
            print()
            line, s = summarise_ws(rows, idle_runs, label)
            print(line)
            summaries.append(s)
    if up_final.get("unstreamed"):
        print(
            f'# WARNING: {up_final["unstreamed"]} upstream requests did not ask for a stream ("stream" not true)'
            + ("; --upstream-stream-always streamed them anyway" if args.upstream_stream_always else "")
        )
    info = machine_info()
    n_err = sum(r["errors"] for r in runs)
    hwm: dict[str, int] = {}
    for r in runs:
        if r.get("hwm_kib"):
            key = r["target"] if r["target"] == "passthrough" else f"{r['target']}-{r['direction']}"
            hwm[key] = max(hwm.get(key, 0), r["hwm_kib"])
    profiles = [r["profile"] for r in runs if r.get("profile")]
    if profiles:
        print(
            f"# {len(profiles)} py-spy profiles (collapsed stacks + .summary.txt) in {args.profile}; "
            "these runs were profiled: do not quote their figures"
        )
    if hwm:
        print("# peak RSS (VmHWM): " + ", ".join(f"{k} {v / 1024:.1f} MiB" for k, v in hwm.items()))
    bg = med([r.get("background_cpu") for r in runs])
    if bg is not None and bg > 0.10:
        print(
            f"# WARNING: other processes used {bg * 100:.0f}% of a CPU (median) during the runs: "
            "figures are noisy; rerun on a quiet machine"
        )
    steal = [r["steal_cpu"] for r in runs if r.get("steal_cpu") is not None]
    if steal:
        print(
            f"# steal (CPU time the hypervisor gave to other guests): median {(med(steal) or 0.0) * 100:.1f}%, max "
            f"{max(steal) * 100:.1f}% of a CPU per run" + ("; figures are noisy" if max(steal) > 0.05 else "")
        )
    print(
        f"# {len(runs)} runs in {elapsed:.0f}s, {n_err} failed streams; load average {loadavg()}; machine: {info['cpu']}, "
        f"{info['cpus']} cpus, {info['mem_gib']} GiB, Linux {info['kernel']}, Python {info['python']}, "
        f"aiohttp {info['aiohttp']}"
    )
    if args.json:
        doc = {
            "machine": info,
            "args": {k: v for k, v in vars(args).items()},
            "elapsed_s": elapsed,
            "tree": {"path": str(REPO), "describe": git_describe(REPO)},
            "baseline_tree": (
                {"path": str(Path(args.baseline_tree).resolve()), "describe": git_describe(Path(args.baseline_tree))}
                if args.baseline_tree
                else None
            ),
            "upstream_stats": up_final,
            "budgets": BUDGETS,
            "rows": rows,
            "summary": summaries,
            "idle_checks": idle_runs,
            "runs": runs,
        }
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    n_err += sum(i["errors"] + (i["sockets"] - i["still_open"]) + (0 if i["target_alive"] else 1) for i in idle_runs)
    if n_err:
        return 1
    if args.enforce_budgets and not all(s.get("within_budgets", True) for s in summaries if s["target"] == "crossfeed"):
        return 3
    return 0


async def warm_small(env: Env, target: Target, ws_conc: int = 8) -> None:
    """After a restart: exercise every path briefly so RSS starts from a warm process."""
    transports = ["sse", "ws"] if ws_capable(env, target) else ["sse"]
    for transport in transports:
        for v in ("text", "tool", "reasoning"):
            spec = loadgen.LoadSpec(
                url=target.url,
                model=upstream_mod.model_name(50, v=v),
                variant=v,
                transport=transport,
                concurrency=8 if transport == "sse" else ws_conc,
                duration=0.2,
                drain_timeout=10,
            )
            await loadgen.run_load(spec)
    await asyncio.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny counts, a few seconds (smoke test)")
    ap.add_argument("--direction", choices=["forward", "reverse", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=None, help="repeats per cell (default 3; --quick 1)")
    ap.add_argument("--cells", default=None, help="regex on cell names, e.g. 'n2000|tool|paced'")
    ap.add_argument(
        "--targets",
        default="passthrough,crossfeed",
        help="comma list of passthrough, crossfeed, mintrans (the issue's minimal translating "
        "proxy, for calibration), direct (load generator straight to the upstream), "
        "crossfeed-base (added by --baseline-tree)",
    )
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of launching streams per throughput run")
    ap.add_argument("--paced-n", type=int, default=None, help="deltas per paced stream (default 200)")
    ap.add_argument("--drain-timeout", type=float, default=60.0)
    ap.add_argument(
        "--write-batch",
        type=int,
        default=1,
        help="upstream frames per socket write when unpaced (default 1, like a real server)",
    )
    ap.add_argument(
        "--passthrough-loop",
        choices=["uvloop", "asyncio"],
        default="uvloop" if _has_uvloop() else "asyncio",
        help="event loop of the pass-through (default uvloop when installed, as crossfeed does)",
    )
    ap.add_argument(
        "--crossfeed-arg",
        action="append",
        default=[],
        help="extra argument for `python -m crossfeed serve` (repeatable; the base target gets them too)",
    )
    ap.add_argument(
        "--baseline-tree",
        default=None,
        metavar="DIR",
        help="A/B: add the target crossfeed-base, `python -m crossfeed serve` run from DIR (cwd and "
        "PYTHONPATH), e.g. an export of the commit before a change: "
        "mkdir -p /tmp/cf-base && git archive COMMIT | tar -x -C /tmp/cf-base",
    )
    ap.add_argument("--no-ws", action="store_true", help="leave out the WebSocket cells and the idle check")
    ap.add_argument(
        "--idle-sockets",
        type=int,
        default=None,
        help="idle-socket check: sockets opened per repeat (default 256; --quick 8; 0: no check)",
    )
    ap.add_argument(
        "--idle-seconds", type=float, default=None, help="idle-socket check: seconds watched (default 2; --quick 0.5)"
    )
    ap.add_argument(
        "--upstream-stream-always",
        action="store_true",
        help='the fake upstream streams even a request that says "stream": false (default: 400)',
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for the subprocesses")
    ap.add_argument(
        "--upstream-cpu",
        type=int,
        default=None,
        help="pin the upstream here (with --targets direct and the proxy's CPU: the upstream's capacity alone)",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    ap.add_argument(
        "--idle-poll-ns",
        type=int,
        default=None,
        metavar="NS",
        help="idle CPUs poll NS nanoseconds before they halt, for the run (the haltpoll cpuidle "
        "driver's guest_halt_poll_ns; Linux's default 200000; needs root; the old value is put back): "
        "a halted generator CPU charges each wake-up's interrupt to the target (bench/idle.py)",
    )
    ap.add_argument("--start-timeout", type=float, default=30.0)
    ap.add_argument("--max-seconds", type=float, default=1200.0, help="abort the run after this long")
    ap.add_argument("--json", default=None, help="write every run and the aggregated rows to this file")
    ap.add_argument("--logdir", default=None, help="where the subprocess logs go (default: a temp dir)")
    ap.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="record a py-spy profile of every non-baseline target run into DIR (figures of a "
        "profiled run are not for quoting)",
    )
    ap.add_argument("--enforce-budgets", action="store_true", help="exit 3 when a budget is missed")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")
    ap.add_argument(
        "--workers-cell",
        action="store_true",
        help="after the table, run `serve --workers 1` against `--workers 2` (bench/workers.py)",
    )
    import workers as workers_cell

    workers_cell.add_arguments(ap, prefix="workers-")
    args = ap.parse_args(argv)
    try:
        with idle.polling(args.idle_poll_ns):
            try:
                import uvloop
            except ImportError:
                rc = asyncio.run(run(args))
            else:
                rc = uvloop.run(run(args))
    except idle.IdleError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if args.workers_cell:
        cell = argparse.Namespace(
            concurrency=args.workers_concurrency,
            seconds=args.workers_seconds,
            repeat=args.workers_repeat,
            chunks=args.workers_chunks,
        )
        print("\n" + "\n".join(asyncio.run(workers_cell.run_cell(cell))))
    return rc


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
