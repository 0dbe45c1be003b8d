"""A redis-server of the test's own, on a free loopback port, that the test stops, pauses and
starts again (the shared one of CROSSFEED_TEST_REDIS_URL is never touched).

Its data lives in an append-only file under the test's directory, so a stop (SIGTERM: Redis
writes the file out) and a start on the same port keep every record, as a restarted production
Redis with persistence does. A missing ``redis-server`` skips locally and fails in CI
(tests/support/services.py ``require_service``).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support.services import require_service


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            require_service("redis-server", "install it (apt-get install redis-server) or run .ci/start-redis.sh")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        assert self.binary is not None
        log = (self.dir / "redis.log").open("ab")
        args = ["--bind", "127.0.0.1", "--port", str(self.port), "--protected-mode", "yes", "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir)]
        self.proc = subprocess.Popen([self.binary, *args], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: see {self.dir / 'redis.log'}")
            if self.answers():
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout:g}s")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """One command in Redis's inline protocol; the raw reply line."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall((" ".join(args) + "\r\n").encode())
            return s.recv(4096)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (Redis writes its data out and exits), waited for."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused one must run to exit
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers (a hung Redis)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
