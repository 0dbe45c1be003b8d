"""Several worker processes on one port: ``crossfeed serve --workers N`` (``[server] workers``).

The process started by the operator becomes a supervisor that serves nothing itself:

- It binds the port first, so a port in use fails at once and ``--port 0`` resolves to one port
  for every worker. On Linux each worker then binds the same port with ``SO_REUSEPORT`` and the
  kernel spreads new connections over them evenly; elsewhere the supervisor listens and the
  workers accept on the socket they inherit.
- Workers are this same program started again (``python -m crossfeed serve`` with the operator's own
  arguments and environment, so each loads the same configuration) with three hidden flags: its
  index, a pipe to say it listens, and a pipe whose end tells it the supervisor is gone (a worker
  never outlives its supervisor, however the supervisor ended).
- Metrics: the workers record into prometheus-client's multiprocess files in a directory the
  supervisor makes (``PROMETHEUS_MULTIPROC_DIR``), and any worker's ``/metrics`` sums them all,
  so a scrape sees one target. A dead worker's gauges are dropped when it is replaced.
- The store is shared the way replicas share it: SQLite in WAL mode (several processes on one
  file) or Redis. The memory store is refused with more than one worker (proxy/runtime/config.py).
- Without a configured ``[reasoning]`` key the supervisor makes one random key for all its
  workers, so what one worker seals (reasoning, compaction items) the others open. State kept in
  a process's memory (Codex's standalone-search references) stays per worker, as per replica.
- SIGTERM (or SIGINT) goes to every worker; each drains as a single process does; the supervisor
  exits 0 once all have exited 0. A worker that dies otherwise is restarted, with a log line,
  after a pause that grows while it keeps dying young.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from crossfeed.proxy.runtime.config import Config

log = structlog.get_logger("crossfeed")

READY_SECONDS = 60.0  # the longest a worker may take to open its store and listen
STOP_GRACE = 15.0  # beyond drain_seconds, before a worker that will not stop is killed
YOUNG = 10.0  # a worker that dies sooner than this after its start is restarted after a pause
MAX_PAUSE = 10.0
REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes]
    started: float
    ready_fd: int | None = None  # read end: a byte arrives once the worker listens


@dataclass
class Supervisor:
    config: Config
    argv: list[str]
    count: int
    port: int = 0
    listener: socket.socket | None = None
    metrics_dir: str = ""
    life_w: int = -1  # write end of the pipe the workers watch: closed when the supervisor ends
    life_r: int = -1
    workers: dict[int, Worker] = field(default_factory=dict)
    stopping: bool = False
    deaths: dict[int, int] = field(default_factory=dict)  # index -> young deaths in a row
    restart_at: dict[int, float] = field(default_factory=dict)
    shared_env: dict[str, str] = field(default_factory=dict)  # what every worker gets beyond ours

    # -- start ----------------------------------------------------------------------------------

    def bind(self) -> None:
        host, port = self.config.server.host, self.config.server.port
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if REUSE_PORT:
            # Bound, never listening: it holds the port (and resolves port 0) for the workers,
            # which bind it too; the kernel only hands connections to listening sockets.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(info[4])
        if not REUSE_PORT:
            sock.listen(1024)
            sock.set_inheritable(True)
        self.listener = sock
        self.port = sock.getsockname()[1]

    def spawn(self, index: int, *, announce: bool) -> Worker:
        """Start worker ``index``; ``announce``: it tells when it listens (start-up waits for that;
        a replacement's own log line says it)."""
        args = [
            sys.executable,
            "-m",
            "crossfeed",
            *self.argv,
            "--port",
            str(self.port),
            "--worker-index",
            str(index),
            "--parent-fd",
            str(self.life_r),
        ]
        fds = [self.life_r]
        ready_r = ready_w = -1
        if announce:
            ready_r, ready_w = os.pipe()
            args += ["--ready-fd", str(ready_w)]
            fds.append(ready_w)
        if not REUSE_PORT:
            assert self.listener is not None
            args += ["--listen-fd", str(self.listener.fileno())]
            fds.append(self.listener.fileno())
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": self.metrics_dir, **self.shared_env}
        proc = subprocess.Popen(args, env=env, pass_fds=fds)
        if announce:
            os.close(ready_w)
        worker = Worker(index, proc, time.monotonic(), ready_r if announce else None)
        self.workers[index] = worker
        return worker

    def wait_ready(self) -> int | None:
        """None once every worker listens; else the exit code of the first that failed to start
        (it printed why) or 1 when one did not answer in time."""
        pending = {w.ready_fd: w for w in self.workers.values() if w.ready_fd is not None}
        deadline = time.monotonic() + READY_SECONDS
        while pending and not self.stopping:
            ready, _, _ = select.select(list(pending), [], [], 0.2)
            for fd in ready:
                worker = pending.pop(fd)
                got = os.read(fd, 1)
                os.close(fd)
                worker.ready_fd = None
                if not got:  # the pipe closed without a word: the worker ended while starting
                    return worker.proc.wait() or 1
            for fd, worker in list(pending.items()):
                if worker.proc.poll() is not None:
                    os.close(fd)
                    return worker.proc.returncode or 1
            if time.monotonic() > deadline:
                print(f"crossfeed: a worker did not start listening within {READY_SECONDS:g}s", file=sys.stderr)
                return 1
        return None

    # -- run ------------------------------------------------------------------------------------

    def run(self) -> int:
        self.metrics_dir = tempfile.mkdtemp(prefix="crossfeed-metrics-")
        key_env = self.config.reasoning.key_env
        if not os.environ.get(key_env):
            # One process makes a random sealing key of its own; the workers of one server must
            # share it, or a token sealed by one (reasoning, compaction) would not open on another.
            self.shared_env[key_env] = secrets.token_hex(32)
        self.life_r, self.life_w = os.pipe()
        os.set_inheritable(self.life_r, True)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for i in range(self.count if not self.stopping else 0):
                self.spawn(i, announce=True)
            failed = self.wait_ready()
            if failed is not None:
                self._stop_all()
                return failed
            if not self.stopping:
                self._announce()
                self._watch()
            return self._stop_all()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for fd in (self.life_r, self.life_w):
                _close(fd)
            if self.listener is not None:
                self.listener.close()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _announce(self) -> None:
        from crossfeed.proxy.cli.startup import announce

        announce(
            self.config,
            self.port,
            os.environ,
            self.count,
            pids=[w.proc.pid for w in self.workers.values()],
            balancing="SO_REUSEPORT" if REUSE_PORT else "shared socket",
        )

    def _watch(self) -> None:
        while not self.stopping:
            now = time.monotonic()
            for index, worker in list(self.workers.items()):
                code = worker.proc.poll()
                if code is None:
                    continue
                del self.workers[index]
                self._bury(worker)
                lived = now - worker.started
                self.deaths[index] = self.deaths.get(index, 0) + 1 if lived < YOUNG else 0
                pause = min(MAX_PAUSE, 0.5 * 2 ** (self.deaths[index] - 1)) if self.deaths[index] else 0.0
                log.warning(
                    "server.worker.died",
                    worker=index,
                    pid=worker.proc.pid,
                    exit_code=code,
                    lived_s=round(lived, 1),
                    restart_in_s=pause,
                )
                self.restart_at[index] = now + pause
            for index, when in list(self.restart_at.items()):
                if now >= when and not self.stopping:
                    del self.restart_at[index]
                    new = self.spawn(index, announce=False)
                    log.warning("server.worker.restarted", worker=index, pid=new.proc.pid)
            time.sleep(0.1)

    def _bury(self, worker: Worker) -> None:
        """A worker's live gauges go with it (its counters stay in the sums, as they happened)."""
        try:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(worker.proc.pid, self.metrics_dir)
        except OSError:
            pass

    def _stop_all(self) -> int:
        """SIGTERM to every worker, then wait for their drains; 0 when each exited 0."""
        live = [w for w in self.workers.values() if w.proc.poll() is None]
        log.info("server.stopping", workers=len(live))
        for w in live:
            w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.server.drain_seconds + STOP_GRACE
        codes = []
        for w in self.workers.values():
            try:
                codes.append(w.proc.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                log.warning("server.worker.killed", worker=w.index, pid=w.proc.pid)
                w.proc.kill()
                codes.append(w.proc.wait())
            if w.ready_fd is not None:
                _close(w.ready_fd)
        log.info("server.stopped", workers=len(codes), exit_codes=codes)
        # A worker ended by the signal itself was still starting (from its first line on, a stop
        # is a drain and exit 0): it never listened, so nothing was cut.
        return 0 if all(c in (0, -signal.SIGTERM) for c in codes) else 1


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def supervise(config: Config, argv: list[str], *, stopped: bool = False) -> int:
    """Run ``config.server.worker_count`` workers until SIGTERM; the process's exit code.
    ``stopped``: a stop was asked for while starting (the workers start, then stop at once)."""
    sup = Supervisor(config, argv, config.server.worker_count, stopping=stopped)
    try:
        sup.bind()
    except OSError as exc:
        print(f"crossfeed: cannot listen on {config.server.host}:{config.server.port}: {exc.strerror}", file=sys.stderr)
        return 1
    return sup.run()
