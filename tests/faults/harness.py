"""Shared pieces of the fault suite: crossfeed in-process (generous
timeouts, small ones only for the faults that must time out) or as a real subprocess
(``python -m crossfeed serve``), a raw HTTP client for malformed requests, and the checks every answer
must pass (envelope, stream validity, no Python leaks).

Directions: ``forward`` = Responses client -> crossfeed -> chat backend (POST /v1/responses);
``reverse`` = Chat client -> crossfeed -> Responses backend (POST /v1/chat/completions).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from crossfeed.proxy.runtime.config import Config, Timeouts, Upstream, load_config
from tests.faults.fault_upstream import closed_port
from tests.support.validators import accumulate_chat, validate_chat_sse, validate_responses_sse

REPO = Path(__file__).resolve().parents[2]
DIRECTIONS = ("forward", "reverse")
API = {"forward": "chat", "reverse": "responses"}  # the backend's API in each direction
ENDPOINT = {"forward": "/v1/responses", "reverse": "/v1/chat/completions"}

# Where an answer is expected, its timeouts are ones no slow machine comes near: upstream,
# crossfeed and client share one event loop here, and a 100,000-chunk or 10 MB answer takes
# seconds on a loaded 2-core CI machine. first_byte > idle as with the defaults (600 s / 300 s).
GENEROUS_TIMEOUTS = Timeouts(connect=10.0, first_byte=30.0, idle=20.0, total=300.0)

# The faults whose expected outcome is a timeout firing, each with only that timeout small (it
# fires long before the fault upstream's STALL_SECONDS = 30 s stall ends) and the others
# generous, so no other timeout can fire first on a slow machine. fault_config() routes each of
# these models to an upstream of its own with these timeouts; every other model, including the
# ``fault:ok`` request that follows each fault, gets GENEROUS_TIMEOUTS.
TIMEOUT_FAULT_TIMEOUTS = {
    "slow_first_byte": GENEROUS_TIMEOUTS.model_copy(update={"first_byte": 1.0}),  # no headers: 504
    "stall_mid": GENEROUS_TIMEOUTS.model_copy(update={"idle": 0.75}),  # silent mid-answer: idle timeout
}

# Python internals that must never reach a client.
LEAK_RE = re.compile(
    rb"Traceback|File \"|Exception|Error\(|aiohttp|asyncio|KeyError|AttributeError|TypeError|ValueError|"
    rb"orjson|pydantic|multidict|site-packages|\b\d{3}, message=|\.py\b|<[A-Za-z_.]*(?:Error|Exception)\b|"
    rb"\b(?:[A-Z][a-z0-9]+){1,5}(?:Error|Exception)\b"
)

SECRET_MARK = "SECRET-MARK"


def new_secrets() -> tuple[str, str]:
    """(client key, upstream key), both carrying SECRET_MARK."""
    tag = uuid.uuid4().hex[:12]
    return f"sk-client-{SECRET_MARK}-{tag}", f"sk-upstream-{SECRET_MARK}-{tag}"


# -- in-process crossfeed --------------------------------------------------------------------------


def fault_config(
    upstream_url: str, direction: str, *, timeouts: Timeouts = GENEROUS_TIMEOUTS, server: dict[str, Any] | None = None
) -> Config:
    """Upstreams speaking the direction's API: ``fault:refuse`` goes to a closed port; each
    model of TIMEOUT_FAULT_TIMEOUTS to the fault upstream with its small timeout; every other
    model to the fault upstream with ``timeouts`` (generous: those answers must not depend on
    the machine's speed)."""
    overrides: dict[str, Any] = {"store.backend": "memory"}
    for key, value in (server or {}).items():
        overrides[f"server.{key}"] = value
    base = load_config(None, {}, overrides)
    api = API[direction]
    dead = Upstream(
        name="dead",
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        api=api,
        models=("fault:refuse",),
        timeouts=timeouts,
    )
    timing_out = tuple(
        Upstream(
            name=f"fault-{fault.replace('_', '-')}",
            base_url=upstream_url,
            api=api,
            models=(f"fault:{fault}",),
            timeouts=t,
        )
        for fault, t in TIMEOUT_FAULT_TIMEOUTS.items()
    )
    live = Upstream(name="fault", base_url=upstream_url, api=api, models=("*",), default=True, timeouts=timeouts)
    return base.model_copy(update={"upstreams": (dead, *timing_out, live)})


# -- request bodies and outcome parsing -------------------------------------------------------------


def request_body(direction: str, model: str, stream: bool, **extra: Any) -> dict[str, Any]:
    if direction == "forward":
        body: dict[str, Any] = {"model": model, "input": "Say hello", "stream": stream}
    else:
        body = {"model": model, "messages": [{"role": "user", "content": "Say hello"}], "stream": stream}
    body.update(extra)
    return body


@dataclass
class Outcome:
    status: int
    kind: str  # success | failed | incomplete | http_error
    text: str | None = None
    error: dict[str, Any] | None = None
    raw: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


def check_envelope(raw: bytes, status: int) -> dict[str, Any]:
    """A non-2xx body must be OpenAI's envelope {error: {message, type, param, code}}."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise AssertionError(f"HTTP {status} body is not JSON (not OpenAI's envelope): {raw[:300]!r}") from None
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"HTTP {status}: no error object: {body!r}"
    err = body["error"]
    missing = {"message", "type", "param", "code"} - set(err)
    assert not missing, f"HTTP {status}: envelope lacks {sorted(missing)}: {err!r}"
    assert isinstance(err["message"], str) and err["message"], f"HTTP {status}: empty error message"
    assert isinstance(err["type"], str) and err["type"], f"HTTP {status}: empty error type"
    assert err["param"] is None or isinstance(err["param"], str)
    assert err["code"] is None or isinstance(err["code"], str)
    return err


def check_clean(raw: bytes) -> None:
    """Valid UTF-8, no Python exception text or class names."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AssertionError(f"client body is not valid UTF-8 at byte {exc.start}") from None
    m = LEAK_RE.search(raw)
    assert m is None, f"client body leaks Python internals: {raw[max(0, m.start() - 80) : m.end() + 80]!r}"


def parse_outcome(direction: str, stream: bool, status: int, headers: dict[str, str], raw: bytes) -> Outcome:
    """Check the answer's shape (envelope or a valid stream / body) and classify it."""
    check_clean(raw)
    ctype = headers.get("content-type", "")
    if status != 200:
        assert 400 <= status < 600, f"unexpected HTTP status {status}"
        assert "application/json" in ctype, f"HTTP {status} with content-type {ctype!r}"
        return Outcome(status, "http_error", error=check_envelope(raw, status), raw=raw, headers=headers)
    if stream:
        assert "text/event-stream" in ctype, f"200 stream answer with content-type {ctype!r}: {raw[:200]!r}"
        if direction == "forward":
            events = validate_responses_sse(raw)
            terminals = [
                e for e in events if e["type"] in ("response.completed", "response.incomplete", "response.failed")
            ]
            assert len(terminals) == 1 and terminals[0] is events[-1], "exactly one terminal event, last"
            text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
            last = events[-1]
            kind = {"response.completed": "success", "response.incomplete": "incomplete", "response.failed": "failed"}[
                last["type"]
            ]
            return Outcome(status, kind, text, last["response"].get("error"), raw, headers, events)
        chunks = validate_chat_sse(raw)
        acc = accumulate_chat(chunks)
        finishes = [c for c in chunks for ch in c.get("choices") or [] if ch.get("finish_reason")]
        if acc["error"] is not None:
            assert not finishes, "an error object after a finish_reason"
            return Outcome(status, "failed", acc["content"], acc["error"], raw, headers, chunks)
        assert len(finishes) == 1, f"{len(finishes)} finish_reason chunks"
        assert raw.rstrip().endswith(b"data: [DONE]"), "a successful chat stream ends with data: [DONE]"
        kind = "success" if acc["finish_reason"] in ("stop", "tool_calls") else "incomplete"
        return Outcome(status, kind, acc["content"] or "", None, raw, headers, chunks)
    assert "application/json" in ctype, f"200 non-stream answer with content-type {ctype!r}: {raw[:200]!r}"
    body = orjson.loads(raw)
    assert isinstance(body, dict)
    if direction == "forward":
        assert body.get("object") == "response", f"not a Response object: {raw[:300]!r}"
        text = "".join(
            p.get("text", "")
            for item in body.get("output", [])
            if item.get("type") == "message"
            for p in item.get("content", [])
            if p.get("type") == "output_text"
        )
        kind = {"completed": "success", "incomplete": "incomplete"}.get(body.get("status"), "failed")
        return Outcome(status, kind, text, body.get("error"), raw, headers, [body])
    assert body.get("object") == "chat.completion", f"not a chat.completion: {raw[:300]!r}"
    choice = body["choices"][0]
    kind = "success" if choice.get("finish_reason") in ("stop", "tool_calls") else "incomplete"
    return Outcome(status, kind, choice["message"].get("content") or "", None, raw, headers, [body])


# -- raw HTTP ---------------------------------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    head: bytes


async def raw_http(
    port: int,
    data: bytes | list[bytes],
    *,
    timeout: float = 10.0,
    shutdown_write: bool = False,
    read_limit: int = 1024 * 1024,
) -> RawResponse | None:
    """Send raw bytes, read one response (None if the server closed without answering)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024 * 1024)

    async def send() -> None:
        for piece in [data] if isinstance(data, bytes) else data:
            writer.write(piece)
            await writer.drain()
        if shutdown_write and writer.can_write_eof():
            writer.write_eof()

    async def receive() -> RawResponse | None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            more = await reader.read(65536)
            if not more:
                return None
            buf += more
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = headers.get("content-length")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while not body.endswith(b"0\r\n\r\n") and len(body) < read_limit:
                more = await reader.read(65536)
                if not more:
                    break
                body += more
            body = _dechunk(body)
        elif length is not None:
            while len(body) < int(length):
                more = await reader.read(65536)
                if not more:
                    break
                body += more
        return RawResponse(status, headers, body, head)

    sender = asyncio.ensure_future(send())
    try:
        return await asyncio.wait_for(receive(), timeout)
    except (ConnectionError, asyncio.IncompleteReadError):
        return None
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        writer.close()
        with contextlib.suppress(BaseException):
            await writer.wait_closed()


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        line, _, rest = data.partition(b"\r\n")
        try:
            size = int(line.split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


# -- crossfeed as a subprocess -----------------------------------------------------------------------


def _gone_is_zero(read: Callable[..., int], *args: Any) -> int:
    """A process that ended between listing and reading holds nothing."""
    try:
        return read(*args)
    except (FileNotFoundError, ProcessLookupError):
        return 0


def proc_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def proc_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def proc_inbound_connections(pid: int, port: int) -> int:
    """How many TCP connections the process holds that were accepted on ``port`` (its listening
    socket not counted): read from /proc/<pid>/net/tcp{,6}, kept only when the socket's inode is
    one of the process's own descriptors (the client's end and TIME_WAIT entries are not)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(int(link[len("socket:[") : -1]))
    count = 0
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()  # sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] != "0A" and int(fields[9]) in inodes:  # 0A = LISTEN
                count += 1
    return count


class ProxyProcess:
    """``python -m crossfeed serve --port 0`` with a TOML config; logs at debug level to a file."""

    KEY_ENV = "CF_FAULTS_UPSTREAM_KEY"

    def __init__(
        self,
        tmp: Path,
        upstream_url: str,
        *,
        api: str = "chat",
        drain: float = 20.0,
        timeouts: Timeouts | None = None,
        log_level: str = "debug",
        workers: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        self.env = env or {}  # more variables for the process (CROSSFEED_* settings among them)
        self.workers = workers  # > 1: ``serve --workers N``; the figures below are summed over the processes
        self.upstream_url = upstream_url
        self.api = api
        self.drain = drain
        self.timeouts = timeouts or GENEROUS_TIMEOUTS  # every answer here is expected; none may time out
        self.log_level = log_level
        self.client_key, self.upstream_key = new_secrets()
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self.log_path = tmp / f"crossfeed-{uuid.uuid4().hex[:6]}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.client_key}"}

    def _config(self) -> Path:
        t = self.timeouts
        path = self.tmp / "crossfeed.toml"
        path.write_text(
            f"[server]\ndrain_seconds = {self.drain}\n\n"
            f'[store]\nbackend = "sqlite"\ndata_dir = "{self.tmp / "data"}"\n\n'
            f'[[upstreams]]\nname = "main"\nbase_url = "{self.upstream_url}"\napi = "{self.api}"\n'
            f"default = true\n\n"
            f"[upstreams.timeouts]\nconnect = {t.connect}\nfirst_byte = {t.first_byte}\nidle = {t.idle}\n"
            f"total = {t.total}\n",
            encoding="utf-8",
        )
        return path

    async def start(self) -> ProxyProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSFEED_")}
        env[self.KEY_ENV] = self.upstream_key
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "crossfeed",
            "serve",
            "--config",
            str(self._config()),
            "--port",
            "0",
            "--upstream-api-key-env",
            self.KEY_ENV,
            "--log-level",
            self.log_level,
            "--log-format",
            "json",
            *(["--workers", str(self.workers)] if self.workers > 1 else []),
            cwd=str(REPO),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 20)
        m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
        assert m, f"no listening line from crossfeed: {line!r} / {self.logs()[-2000:]}"
        self.port = int(m.group(1))
        if self.workers > 1:
            assert line.rstrip().endswith(f"({self.workers} workers)".encode()), line
            assert len(self.pids()) == self.workers + 1, self.pids()
        self._stdout_rest = asyncio.ensure_future(self.proc.stdout.read())
        return self

    def pids(self) -> list[int]:
        """crossfeed's processes: the one started, and its workers under ``--workers``."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [self.pid, *(int(p) for p in children.read_text().split())] if self.workers > 1 else [self.pid]

    def rss_kb(self) -> int:
        return sum(_gone_is_zero(proc_rss_kb, pid) for pid in self.pids())

    def fds(self) -> int:
        return sum(_gone_is_zero(proc_fds, pid) for pid in self.pids())

    def client_connections(self) -> int:
        """Client connections crossfeed still holds open (accepted on its port)."""
        return sum(_gone_is_zero(proc_inbound_connections, pid, self.port) for pid in self.pids())

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        with contextlib.suppress(BaseException):
            self.stdout_tail = await asyncio.wait_for(self._stdout_rest, 5)
        self._log.close()
        return self.proc.returncode  # type: ignore[return-value]

    def logs(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace") if self.log_path.exists() else ""

    def assert_no_secrets(self) -> None:
        text = self.logs() + (getattr(self, "stdout_tail", b"") or b"").decode("utf-8", "replace")
        for secret in (self.client_key, self.upstream_key):
            for n, line in enumerate(text.splitlines()):
                assert secret not in line, f"secret in crossfeed's log, line {n}: {line[:300]}"
        assert SECRET_MARK not in text, "a marked secret (or part of it) reached crossfeed's log"


@contextlib.asynccontextmanager
async def proxy_process(tmp: Path, upstream_url: str, **kw: Any) -> AsyncIterator[ProxyProcess]:
    p = ProxyProcess(tmp, upstream_url, **kw)
    await p.start()
    try:
        yield p
    finally:
        await p.stop(signal.SIGTERM, timeout=15.0)
