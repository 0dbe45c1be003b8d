"""Load generator: hold C concurrent SSE streams for T seconds (or N requests) and measure them.

A raw asyncio HTTP/1.1 client (keep-alive, chunked or length-delimited bodies), so the load
generator costs a few microseconds per event and the proxy under test stays the bottleneck.

WebSocket mode (``transport="ws"``, Responses clients only): each of the C workers opens one
socket (``GET /v1/responses`` upgraded, aiohttp's client) and sends its turns one after another
on it, each a ``{"type": "response.create", ...}`` text frame; every event arrives as one JSON
text frame and a turn ends with ``response.completed``. ``IdleSockets`` opens N sockets, runs
one turn on each and keeps them open, idle (the runner's idle-socket check).

For every stream it reads every SSE event and records:
  - time to first event (request written -> first complete SSE event read);
  - for each event carrying exactly one upstream timestamp (``T@`` + 12 digits, written by
    bench/upstream.py into every delta), the latency upstream-write -> client-read;
  - whether the stream ended properly: ``data: [DONE]`` for Chat output, ``response.completed``
    for Responses output, no ``error`` / ``response.failed`` event, HTTP 200.

Both ends use CLOCK_MONOTONIC (system-wide on Linux), so the two processes share a clock.

Usage (prints one JSON object)::

    python bench/loadgen.py --url http://127.0.0.1:8102/v1/responses \
        --model bench:n=200,b=24,d=0,v=text -c 16 -t 5
    python bench/loadgen.py --ws --url http://127.0.0.1:8102/v1/responses -c 16 -t 5   # WebSocket mode
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

import orjson

if TYPE_CHECKING:  # imported where used: the SSE-only load needs no aiohttp
    import aiohttp

MARK = b"T@"
TS_DIGITS = 12
TS_MOD = 10**TS_DIGITS
_mono_ns = time.monotonic_ns

TOOL_PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def request_body(api: str, model: str, variant: str = "text") -> bytes:
    """The client request: a Chat Completions or a Responses create body, streaming."""
    if api == "chat":
        body: dict = {
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if variant == "tool":
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": "lookup", "description": "look up", "parameters": TOOL_PARAMS},
                }
            ]
    else:
        body = {"model": model, "input": "hi", "stream": True, "store": False}
        if variant == "tool":
            body["tools"] = [
                {
                    "type": "function",
                    "name": "lookup",
                    "description": "look up",
                    "parameters": TOOL_PARAMS,
                    "strict": False,
                }
            ]
    return orjson.dumps(body)


def ws_create_frame(model: str, variant: str = "text") -> str:
    """A WebSocket ``response.create`` frame: the Responses body without ``stream``."""
    body = orjson.loads(request_body("responses", model, variant))
    del body["stream"]
    return orjson.dumps({"type": "response.create", **body}).decode()


def http_request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nAuthorization: Bearer bench\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@dataclass
class Totals:
    """Shared accumulators for one load run (one event loop, no locking)."""

    lat_us: array = field(default_factory=lambda: array("q"))
    ttfe_us: array = field(default_factory=lambda: array("q"))
    events: int = 0
    completed: int = 0
    bytes: int = 0
    errors: dict = field(default_factory=dict)
    open_streams: int = 0
    max_open: int = 0

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


class StreamClient(asyncio.Protocol):
    """One keep-alive connection; one streaming request at a time."""

    def __init__(self, totals: Totals, out_api: str) -> None:
        self.t = totals
        self.chat = out_api == "chat"
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.fut: asyncio.Future | None = None
        self.lead_skip = 0  # CRLF of the previous response's last chunk not yet seen
        self._reset()

    def _reset(self) -> None:
        self.buf = bytearray()
        self.head_done = False
        self.status = 0
        self.chunked = False
        self.clen = -1  # -1: until close
        self.chunk_left = 0
        self.skip = 0  # CRLF bytes still to skip after a chunk
        self.sse = b""
        self.t0 = 0
        self.first = False
        self.terminal = False
        self.failed: str | None = None

    # -- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's: a Transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.fut is not None and not self.fut.done():
            if self.head_done and self.clen == -1 and not self.chunked:
                self._finish()  # body delimited by close
            else:
                self.fut.set_result("conn_lost")

    def request(self, req: bytes) -> asyncio.Future:
        self._reset()
        self.fut = asyncio.get_running_loop().create_future()
        self.t0 = _mono_ns()
        assert self.transport is not None
        self.transport.write(req)
        return self.fut

    def data_received(self, data: bytes) -> None:
        if self.lead_skip:
            take = min(self.lead_skip, len(data))
            self.lead_skip -= take
            data = data[take:]
        if self.fut is None or self.fut.done():
            return
        self.t.bytes += len(data)
        if not self.head_done:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            try:
                self.status = int(head[0].split(" ", 2)[1])
            except (IndexError, ValueError):
                self.fut.set_result("bad_status_line")
                return
            for line in head[1:]:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if k == "transfer-encoding" and "chunked" in v.lower():
                    self.chunked = True
                elif k == "content-length":
                    self.clen = int(v.strip())
            self.head_done = True
            data = bytes(self.buf[end + 4 :])
            self.buf = bytearray()
            if self.status != 200:
                self.failed = f"http_{self.status}"
        if self.chunked:
            self._chunked(data)
        else:
            self._feed(data)
            if self.clen >= 0:
                self.clen -= len(data)
                if self.clen <= 0:
                    self._finish()

    def _chunked(self, data: bytes) -> None:
        if self.buf:
            self.buf += data
            data = bytes(self.buf)
            self.buf = bytearray()
        pos = 0
        n = len(data)
        parts = []
        while pos < n:
            if self.skip:
                take = min(self.skip, n - pos)
                pos += take
                self.skip -= take
                continue
            if self.chunk_left:
                take = min(self.chunk_left, n - pos)
                parts.append(data[pos : pos + take])
                pos += take
                self.chunk_left -= take
                if not self.chunk_left:
                    self.skip = 2
                continue
            le = data.find(b"\r\n", pos)
            if le < 0:
                self.buf += data[pos:]
                break
            size = int(data[pos:le].split(b";", 1)[0], 16)
            pos = le + 2
            if size == 0:
                # last chunk; no trailers expected (the final CRLF may trail)
                if parts:
                    self._feed(b"".join(parts))
                self.lead_skip = max(0, 2 - (n - pos))
                self._finish()
                return
            self.chunk_left = size
        if parts:
            self._feed(parts[0] if len(parts) == 1 else b"".join(parts))

    def _feed(self, data: bytes) -> None:
        if self.failed:
            return
        if self.sse:
            data = self.sse + data
        start = 0
        now_us = -1
        t = self.t
        while True:
            end = data.find(b"\n\n", start)
            if end < 0:
                break
            ev = data[start:end]
            start = end + 2
            if not ev or ev[:1] == b":":
                continue
            t.events += 1
            if not self.first:
                self.first = True
                t.ttfe_us.append((_mono_ns() - self.t0) // 1000)
            if ev.count(MARK) == 1:
                if now_us < 0:
                    now_us = _mono_ns() // 1000 % TS_MOD
                i = ev.find(MARK) + 2
                try:
                    t.lat_us.append((now_us - int(ev[i : i + TS_DIGITS])) % TS_MOD)
                except ValueError:
                    pass
                continue
            head = ev[:120]
            if self.chat:
                if head.startswith(b"data: [DONE]"):
                    self.terminal = True
                elif b'"error"' in head[:30]:
                    self.failed = "error_event"
            elif b"response.completed" in head:
                self.terminal = True
            elif (
                b"response.failed" in head
                or b"response.incomplete" in head
                or head.startswith(b"event: error")
                or b'"type":"error"' in head
            ):
                self.failed = "error_event"
        self.sse = data[start:] if start < len(data) else b""

    def _finish(self) -> None:
        fut = self.fut
        if fut is None or fut.done():
            return
        if self.failed:
            fut.set_result(self.failed)
        elif not self.terminal:
            fut.set_result("no_terminal_event")
        else:
            fut.set_result(None)


WS_MARK = MARK.decode()
WS_TERMINAL_OK = '"response.completed"'
WS_FAILED = ('"response.failed"', '"response.incomplete"', '"type":"error"')


async def ws_connect(session: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    return await session.ws_connect(
        url, autoping=True, heartbeat=None, compress=0, max_msg_size=0, headers={"Authorization": "Bearer bench"}
    )


async def ws_turn(ws: aiohttp.ClientWebSocketResponse, frame: str, t: Totals) -> str | None:
    """One turn on an open socket: send the create frame, read frames to the terminal one."""
    from aiohttp import WSMsgType

    text = WSMsgType.TEXT
    t0 = _mono_ns()
    await ws.send_str(frame)
    first = True
    receive = ws.receive
    while True:
        msg = await receive()
        if msg.type is not text:
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return "conn_lost"
            return "binary_frame"
        data = msg.data
        t.events += 1
        t.bytes += len(data)
        if first:
            first = False
            t.ttfe_us.append((_mono_ns() - t0) // 1000)
        if data.count(WS_MARK) == 1:
            i = data.find(WS_MARK) + 2
            try:
                t.lat_us.append((_mono_ns() // 1000 % TS_MOD - int(data[i : i + TS_DIGITS])) % TS_MOD)
            except ValueError:
                pass
            continue
        head = data[:120]
        if WS_TERMINAL_OK in head:
            return None
        if any(k in head for k in WS_FAILED):
            return "error_event"


async def ws_supported(url: str, timeout: float = 5.0) -> bool:
    """Does the target upgrade ``GET <url>`` to a WebSocket?"""
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        try:
            ws = await ws_connect(session, url)
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False
        await ws.close()
        return True


class IdleSockets:
    """N sockets that each complete one turn (at most ``concurrency`` turns at once), then idle."""

    def __init__(self, url: str, model: str, n: int, concurrency: int = 16, variant: str = "text") -> None:
        self.url, self.model, self.n, self.concurrency, self.variant = url, model, n, concurrency, variant
        self.session: aiohttp.ClientSession | None = None
        self.sockets: list[aiohttp.ClientWebSocketResponse] = []
        self.totals = Totals()

    async def open(self) -> dict:
        import aiohttp

        session = self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        frame = ws_create_frame(self.model, self.variant)
        sem = asyncio.Semaphore(self.concurrency)
        t = self.totals

        async def one() -> None:
            async with sem:
                try:
                    ws = await ws_connect(session, self.url)
                except (aiohttp.ClientError, OSError):
                    t.error("connect")
                    return
                self.sockets.append(ws)
                try:
                    res = await asyncio.wait_for(ws_turn(ws, frame, t), 60)
                except TimeoutError:
                    res = "timeout"
                if res is None:
                    t.completed += 1
                else:
                    t.error(res)

        await asyncio.gather(*(one() for _ in range(self.n)))
        return {
            "sockets": len(self.sockets),
            "completed": t.completed,
            "errors": sum(t.errors.values()),
            "error_kinds": dict(t.errors),
        }

    def open_count(self) -> int:
        return sum(1 for ws in self.sockets if not ws.closed)

    async def close(self) -> None:
        await asyncio.gather(*(ws.close() for ws in self.sockets), return_exceptions=True)
        if self.session is not None:
            await self.session.close()


@dataclass
class LoadSpec:
    url: str  # http://host:port/v1/chat/completions or /v1/responses
    model: str
    variant: str = "text"
    transport: str = "sse"  # sse | ws (WebSocket mode, Responses clients: url .../v1/responses)
    concurrency: int = 1
    duration: float = 5.0  # seconds of launching new streams
    requests: int | None = None  # stop launching after this many (whichever comes first)
    drain_timeout: float = 30.0  # after the launch window, wait this long for open streams
    stream_timeout: float = 120.0
    stagger: float = 0.0  # spread the first C starts over this many seconds


def pct(sorted_vals: list[int] | array, q: float) -> float | None:
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return float(sorted_vals[i])


async def run_load(spec: LoadSpec) -> dict:
    u = urlsplit(spec.url)
    host, port, path = u.hostname or "127.0.0.1", u.port or 80, u.path
    out_api = "chat" if path.endswith("chat/completions") else "responses"
    req = http_request(host, port, path, request_body(out_api, spec.model, spec.variant))
    loop = asyncio.get_running_loop()
    t = Totals()
    stop = False
    launched = 0
    cpu0 = time.process_time()
    t_start = loop.time()

    async def worker(k: int) -> None:
        nonlocal launched
        if spec.stagger > 0:
            await asyncio.sleep(spec.stagger * k / max(1, spec.concurrency))
        conn: StreamClient | None = None
        try:
            while not stop and (spec.requests is None or launched < spec.requests):
                launched += 1
                if conn is None or conn.closed:
                    try:
                        _, conn = await loop.create_connection(lambda: StreamClient(t, out_api), host, port)
                    except OSError:
                        t.error("connect")
                        conn = None
                        await asyncio.sleep(0.05)
                        continue
                t.open_streams += 1
                t.max_open = max(t.max_open, t.open_streams)
                try:
                    res = await asyncio.wait_for(conn.request(req), spec.stream_timeout)
                except TimeoutError:
                    res = "timeout"
                finally:
                    t.open_streams -= 1
                if res is None:
                    t.completed += 1
                else:
                    t.error(res)
                    if conn.transport is not None:
                        conn.transport.close()
                    conn = None
        except asyncio.CancelledError:
            if conn is not None and conn.fut is not None and not conn.fut.done():
                t.error("cut_at_drain_timeout")
            raise
        finally:
            if conn is not None and conn.transport is not None:
                conn.transport.close()

    session = None
    if spec.transport == "ws":
        import aiohttp

        if out_api != "responses":
            raise ValueError("WebSocket mode is a Responses transport: the url must end in /responses")
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        frame = ws_create_frame(spec.model, spec.variant)

    async def ws_worker(k: int) -> None:
        """One socket per worker; its turns one after another on it (a new socket after a failure)."""
        nonlocal launched
        assert session is not None  # made above for the ws transport, the only one with these workers
        if spec.stagger > 0:
            await asyncio.sleep(spec.stagger * k / max(1, spec.concurrency))
        ws = None
        in_turn = False
        try:
            while not stop and (spec.requests is None or launched < spec.requests):
                launched += 1
                if ws is None or ws.closed:
                    try:
                        ws = await ws_connect(session, spec.url)
                    except aiohttp.WSServerHandshakeError as exc:
                        t.error(f"ws_handshake_{exc.status}")
                        ws = None
                        await asyncio.sleep(0.05)
                        continue
                    except (aiohttp.ClientError, OSError):
                        t.error("connect")
                        ws = None
                        await asyncio.sleep(0.05)
                        continue
                t.open_streams += 1
                t.max_open = max(t.max_open, t.open_streams)
                in_turn = True
                try:
                    res = await asyncio.wait_for(ws_turn(ws, frame, t), spec.stream_timeout)
                except TimeoutError:
                    res = "timeout"
                finally:
                    t.open_streams -= 1
                in_turn = False  # (still True when the drain timeout cancels the turn)
                if res is None:
                    t.completed += 1
                else:
                    t.error(res)
                    await ws.close()
                    ws = None
        except asyncio.CancelledError:
            if in_turn:
                t.error("cut_at_drain_timeout")
            raise
        finally:
            if ws is not None and not ws.closed:
                await ws.close()

    run_worker = ws_worker if spec.transport == "ws" else worker
    tasks = [asyncio.ensure_future(run_worker(k)) for k in range(spec.concurrency)]
    done_all = asyncio.gather(*tasks, return_exceptions=True)
    try:
        await asyncio.wait_for(asyncio.shield(done_all), spec.duration)
    except TimeoutError:
        pass
    stop = True
    t_launch_end = loop.time()
    if not done_all.done():
        try:
            await asyncio.wait_for(asyncio.shield(done_all), spec.drain_timeout)
        except TimeoutError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    t_end = loop.time()
    if session is not None:
        await session.close()
    cpu = time.process_time() - cpu0
    wall = t_end - t_start
    lat = sorted(t.lat_us)
    ttfe = sorted(t.ttfe_us)
    n_err = sum(t.errors.values())
    return {
        "url": spec.url,
        "model": spec.model,
        "concurrency": spec.concurrency,
        "transport": spec.transport,
        "wall_s": round(wall, 4),
        "launch_s": round(t_launch_end - t_start, 4),
        "completed": t.completed,
        "errors": n_err,
        "error_kinds": dict(t.errors),
        "streams_per_s": t.completed / wall if wall > 0 else 0.0,
        "events": t.events,
        "events_per_s": t.events / wall if wall > 0 else 0.0,
        "bytes": t.bytes,
        "max_open": t.max_open,
        "ttfe_p50_ms": _ms(pct(ttfe, 0.50)),
        "ttfe_p99_ms": _ms(pct(ttfe, 0.99)),
        "lat_samples": len(lat),
        "lat_p50_ms": _ms(pct(lat, 0.50)),
        "lat_p99_ms": _ms(pct(lat, 0.99)),
        "lat_max_ms": _ms(float(lat[-1]) if lat else None),
        "loadgen_cpu_s": round(cpu, 4),
    }


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="bench:n=200,b=24,d=0,v=text")
    ap.add_argument("--variant", default=None, help="text|tool|reasoning (default: from the model)")
    ap.add_argument("--ws", action="store_true", help="WebSocket mode (url .../v1/responses)")
    ap.add_argument("-c", "--concurrency", type=int, default=16)
    ap.add_argument("-t", "--duration", type=float, default=5.0)
    ap.add_argument("-n", "--requests", type=int, default=None)
    ap.add_argument("--drain-timeout", type=float, default=30.0)
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if not args.no_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    variant = args.variant or (
        "tool" if "v=tool" in args.model else "reasoning" if "v=reasoning" in args.model else "text"
    )
    spec = LoadSpec(
        url=args.url,
        model=args.model,
        variant=variant,
        transport="ws" if args.ws else "sse",
        concurrency=args.concurrency,
        duration=args.duration,
        requests=args.requests,
        drain_timeout=args.drain_timeout,
    )
    res = asyncio.run(run_load(spec))
    sys.stdout.write(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0 if res["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
