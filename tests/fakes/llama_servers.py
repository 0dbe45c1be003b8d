"""Start the real llama.cpp servers (built by ``.ci/build-llama.sh``) on loopback with the tiny
scripted model (tests/fakes/tiny_model.py).

Both run one slot, greedy, no prompt cache: answers are exact and the same for the same request,
so a test asks the server itself for the reference answer and compares crossfeed's with it.

- ``llama-server --jinja``: the chat template in the model file picks its Qwen3-Coder tool-call
  parser; it also serves a native ``/v1/responses``.
- ``python -m llama_cpp.server`` (llama-cpp-python): renders the same template with Python's
  jinja2 and has no parser for that markup, so tool calls come back as text in ``content``
  unless the request names the tool (then a JSON grammar forces its arguments).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

ROOT = Path(__file__).resolve().parents[2]
LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # keep in sync with .ci/build-llama.sh
CONTEXT = 65536
BUILD_HINT = 'build them with: eval "$(bash .ci/build-llama.sh)"'


@dataclass(frozen=True)
class Binaries:
    llama_server: Path
    python: Path
    lib: Path


def binaries() -> Binaries | None:
    """Where ``.ci/build-llama.sh`` put the servers (its exports, else its default place)."""
    tools = ROOT / ".tools" / "llama"
    found = Binaries(
        Path(os.environ.get("CROSSFEED_LLAMA_SERVER") or tools / "build" / "bin" / "llama-server"),
        Path(os.environ.get("CROSSFEED_LLAMA_CPP_PYTHON") or tools / "pyenv" / "bin" / "python"),
        Path(os.environ.get("CROSSFEED_LLAMA_LIB") or tools / "build" / "bin"),
    )
    if found.llama_server.is_file() and found.python.is_file():
        return found
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningServer:
    name: str
    url: str  # the OpenAI base URL, ending in /v1
    log: Path
    pid: int = 0  # the server's process (a test may kill it)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{url}: the server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            with urlopen(url, timeout=2) as r:  # loopback, our own server
                if r.status == 200:
                    return
        except (URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not ready after {deadline_s:.0f}s:\n{log.read_text(errors='replace')[-3000:]}")


@contextmanager
def _serve(
    name: str, argv: list[str], env: dict[str, str], ready_path: str, port: int, log: Path
) -> Iterator[RunningServer]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        _wait_ready(proc, f"http://127.0.0.1:{port}{ready_path}", log)
        yield RunningServer(name, f"http://127.0.0.1:{port}/v1", log, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def llama_server(bins: Binaries, model: Path, log_dir: Path) -> Iterator[RunningServer]:
    port = free_port()
    argv = [
        str(bins.llama_server),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--jinja",
        "-np",
        "1",
        "-c",
        str(CONTEXT),
        "-b",
        "4096",
        "-ub",
        "4096",
        "--no-cache-prompt",
        "--temp",
        "0",
        "--no-webui",
        "-t",
        "2",
    ]
    with _serve("llama-server", argv, dict(os.environ), "/health", port, log_dir / "llama-server.log") as s:
        yield s


@contextmanager
def llama_cpp_python(bins: Binaries, model: Path, log_dir: Path) -> Iterator[RunningServer]:
    port = free_port()
    argv = [
        str(bins.python),
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "8192",
        "--n_batch",
        "4096",
        "--n_threads",
        "2",
        # By default a new request cuts the running one short: its stream ends [DONE] with no
        # finish_reason and no text (README, backend notes). Behind a proxy, queue instead.
        "--interrupt_requests",
        "False",
    ]
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(bins.lib)}
    with _serve("llama-cpp-python", argv, env, "/v1/models", port, log_dir / "llama-cpp-python.log") as s:
        yield s
