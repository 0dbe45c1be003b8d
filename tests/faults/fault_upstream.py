"""A fake backend on a raw asyncio server, told per request which fault to inject.

The request's ``model`` names the behaviour: ``fault:<name>`` (anything else is ``ok``). The same
fault is served in the shape the path asks for: ``/v1/chat/completions`` (chat chunks) or
``/v1/responses`` (Responses events), streamed when the body says ``"stream": true``, else one
JSON body. HTTP/1.1 is written by hand so a test controls every byte: chunked framing, a FIN or an
RST (``SO_LINGER`` 0) in the middle of a chunk, stalls with the socket open, writes split inside
multi-byte characters.

Counters for tests: ``open_connections`` (accepted sockets not yet closed), ``inflight``
(requests whose answer is not finished), ``peer_gone`` (answers cut short because the proxy
closed the connection). ``wait_idle()`` waits for ``inflight`` to return to zero.

Every loop here is bounded: the longest behaviour (``slow_stream``) ends after ``STREAM_MINUTE``
seconds, stalls end after ``STALL_SECONDS``; everything stops early when the peer goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from crossfeed.translators.responses.response_object import new_response
from tests.support import chat_chunks

TEXT = "Hello, wörld! Ünïcödé 日本語テキスト 🎉🚀 done."
ERROR_MESSAGE = "fault: the model is overloaded mid-stream"
LEAK = "LEAKED-AFTER-END"
STALL_SECONDS = 30.0
STREAM_MINUTE = 60.0
TINY_COUNT = 100_000
HUGE_BYTES = 10 * 1024 * 1024
MODEL = "fault-model"
RETRY_AFTER = "7"

HTML_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>"


class PeerGone(Exception):
    """The proxy closed the connection while we were answering."""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    raw_body: bytes
    body: Any = None

    @property
    def fault(self) -> str:
        model = self.body.get("model") if isinstance(self.body, dict) else None
        if isinstance(model, str) and model.startswith("fault:"):
            return model[len("fault:") :]
        return "ok"

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and self.body.get("stream") is True

    @property
    def shape(self) -> str:
        return "responses" if self.path.rstrip("/").endswith("/responses") else "chat"


# -- wire shapes ---------------------------------------------------------------------------------


def sse(obj: Any, event: str | None = None, eol: bytes = b"\n") -> bytes:
    head = b"event: " + event.encode() + eol if event else b""
    return head + b"data: " + orjson.dumps(obj) + eol + eol


# every chunk of the fault backend's chat streams: its id and model, ``logprobs: null`` on choices
chat_chunk = functools.partial(chat_chunks.chat_chunk, model=MODEL, id="chatcmpl-fault", logprobs=None)


def chat_usage_chunk(completion: int = 9) -> dict[str, Any]:
    return chat_chunk(None, usage=(5, completion))


def chat_completion(
    text: str = TEXT, *, reasoning: str | None = None, tool: tuple[str, str] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning_content"] = reasoning
    finish = "stop"
    if tool:
        message["tool_calls"] = [
            {"id": "call_fault1", "type": "function", "function": {"name": tool[0], "arguments": tool[1]}}
        ]
        finish = "tool_calls"
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
    }


def pieces_of(text: str, n: int = 6) -> list[str]:
    size = max(1, len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


def chat_stream_events(
    text: str = TEXT,
    *,
    finish: str | None = "stop",
    usage: bool = True,
    reasoning: str | None = None,
    tool: tuple[str, str] | None = None,
    pieces: list[str] | None = None,
) -> list[dict[str, Any]]:
    out = [chat_chunk({"role": "assistant", "content": ""})]
    if reasoning:
        out += [chat_chunk({"reasoning_content": p}) for p in pieces_of(reasoning, 3)]
    out += [chat_chunk({"content": p}) for p in (pieces if pieces is not None else pieces_of(text))]
    if tool:
        name, args = tool
        out.append(
            chat_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_fault1",
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        out += [chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in pieces_of(args, 3)]
        finish = "tool_calls" if finish else None
    if finish:
        out.append(chat_chunk({}, finish))
        if usage:
            out.append(chat_usage_chunk())
    return out


def _usage(output_tokens: int = 9) -> dict[str, Any]:
    return {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 5 + output_tokens,
    }


def response_object(
    status: str, output: list[dict[str, Any]], *, error: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A whole Response, every field as OpenAI's API sends it."""
    return {
        **new_response({}, response_id="resp_fault", created_at=1, model=MODEL),
        "status": status,
        "completed_at": 2 if status == "completed" else None,
        "output": output,
        "error": error,
        "usage": _usage() if status != "in_progress" else None,
    }


def message_item(text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": "msg_fault",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def reasoning_item(text: str) -> dict[str, Any]:
    return {
        "id": "rs_fault",
        "type": "reasoning",
        "status": "completed",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def call_item(name: str, args: str) -> dict[str, Any]:
    return {
        "id": "fc_fault",
        "type": "function_call",
        "call_id": "call_fault1",
        "name": name,
        "arguments": args,
        "status": "completed",
    }


def responses_body(
    text: str = TEXT, *, reasoning: str | None = None, tool: tuple[str, str] | None = None
) -> dict[str, Any]:
    output = []
    if reasoning:
        output.append(reasoning_item(reasoning))
    output.append(message_item(text))
    if tool:
        output.append(call_item(*tool))
    return response_object("completed", output)


class _Seq:
    def __init__(self) -> None:
        self.n = 0
        self.events: list[dict[str, Any]] = []

    def __call__(self, ev: dict[str, Any]) -> None:
        ev["sequence_number"] = self.n
        self.n += 1
        self.events.append(ev)


def responses_stream_events(
    text: str = TEXT,
    *,
    terminal: bool = True,
    close_items: bool = True,
    reasoning: str | None = None,
    tool: tuple[str, str] | None = None,
    pieces: list[str] | None = None,
) -> list[dict[str, Any]]:
    emit = _Seq()
    emit({"type": "response.created", "response": response_object("in_progress", [])})
    emit({"type": "response.in_progress", "response": response_object("in_progress", [])})
    output: list[dict[str, Any]] = []
    index = 0
    if reasoning:
        rs = reasoning_item(reasoning)
        emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**rs, "status": "in_progress", "content": []},
            }
        )
        emit(
            {
                "type": "response.content_part.added",
                "item_id": rs["id"],
                "output_index": index,
                "content_index": 0,
                "part": {"type": "reasoning_text", "text": ""},
            }
        )
        for p in pieces_of(reasoning, 3):
            emit(
                {
                    "type": "response.reasoning_text.delta",
                    "item_id": rs["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": p,
                }
            )
        emit(
            {
                "type": "response.reasoning_text.done",
                "item_id": rs["id"],
                "output_index": index,
                "content_index": 0,
                "text": reasoning,
            }
        )
        emit(
            {
                "type": "response.content_part.done",
                "item_id": rs["id"],
                "output_index": index,
                "content_index": 0,
                "part": {"type": "reasoning_text", "text": reasoning},
            }
        )
        emit({"type": "response.output_item.done", "output_index": index, "item": rs})
        output.append(rs)
        index += 1
    msg = message_item(text)
    emit(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**msg, "status": "in_progress", "content": []},
        }
    )
    emit(
        {
            "type": "response.content_part.added",
            "item_id": msg["id"],
            "output_index": index,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        }
    )
    for p in pieces if pieces is not None else pieces_of(text):
        emit(
            {
                "type": "response.output_text.delta",
                "item_id": msg["id"],
                "output_index": index,
                "content_index": 0,
                "delta": p,
                "logprobs": [],
            }
        )
    if not close_items:
        return emit.events
    emit(
        {
            "type": "response.output_text.done",
            "item_id": msg["id"],
            "output_index": index,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        }
    )
    emit(
        {
            "type": "response.content_part.done",
            "item_id": msg["id"],
            "output_index": index,
            "content_index": 0,
            "part": msg["content"][0],
        }
    )
    emit({"type": "response.output_item.done", "output_index": index, "item": msg})
    output.append(msg)
    index += 1
    if tool:
        fc = call_item(*tool)
        emit(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**fc, "arguments": "", "status": "in_progress"},
            }
        )
        for a in pieces_of(tool[1], 3):
            emit(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": fc["id"],
                    "output_index": index,
                    "delta": a,
                }
            )
        emit(
            {
                "type": "response.function_call_arguments.done",
                "item_id": fc["id"],
                "output_index": index,
                "arguments": tool[1],
            }
        )
        emit({"type": "response.output_item.done", "output_index": index, "item": fc})
        output.append(fc)
    if terminal:
        emit({"type": "response.completed", "response": response_object("completed", output)})
    return emit.events


def frames(shape: str, events: list[dict[str, Any]], *, done: bool = True, eol: bytes = b"\n") -> list[bytes]:
    """SSE frames for events; chat streams end with ``[DONE]`` when ``done``."""
    if shape == "chat":
        out = [sse(ev, eol=eol) for ev in events]
        if done:
            out.append(b"data: [DONE]" + eol + eol)
        return out
    return [sse(ev, ev["type"], eol=eol) for ev in events]


def ok_frames(shape: str, **kw: Any) -> list[bytes]:
    if shape == "chat":
        return frames(shape, chat_stream_events(**kw))
    return frames(shape, responses_stream_events(**kw))


def ok_body(shape: str, **kw: Any) -> dict[str, Any]:
    return chat_completion(**kw) if shape == "chat" else responses_body(**kw)


def error_object(shape: str) -> tuple[bytes, dict[str, Any]]:
    err = {"message": ERROR_MESSAGE, "type": "server_error", "param": None, "code": "overloaded"}
    if shape == "chat":
        return sse({"error": err}), {"error": err}
    return sse(
        {"type": "error", "code": "overloaded", "message": ERROR_MESSAGE, "param": None, "error": err}, "error"
    ), {"error": err}


# -- HTTP plumbing -------------------------------------------------------------------------------


class Conn:
    """One accepted connection: request parsing, hand-made responses, peer-close detection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = bytearray()
        self.gone = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None

    async def _fill(self) -> bool:
        data = await self.reader.read(65536)
        if not data:
            return False
        self.buf += data
        return True

    async def read_request(self, max_body: int = 128 * 1024 * 1024) -> Request | None:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 1024 * 1024 or not await self._fill():
                return None
        head, _, rest = bytes(self.buf).partition(b"\r\n\r\n")
        self.buf = bytearray(rest)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = [*lines[0].split(" ", 2), "", ""][:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._read_chunked()
        else:
            if length > max_body:
                return None
            while len(self.buf) < length:
                if not await self._fill():
                    return None
            body, self.buf = bytes(self.buf[:length]), self.buf[length:]
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        return Request(method, path, headers, body, parsed)

    async def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            while b"\r\n" not in self.buf:
                if not await self._fill():
                    return bytes(out)
            line, _, rest = bytes(self.buf).partition(b"\r\n")
            size = int(line.split(b";")[0] or b"0", 16)
            self.buf = bytearray(rest)
            while len(self.buf) < size + 2:
                if not await self._fill():
                    return bytes(out)
            out += self.buf[:size]
            self.buf = self.buf[size + 2 :]
            if size == 0:
                return bytes(out)

    # peer-close detection while answering ----------------------------------------------------

    def watch(self) -> None:
        self.gone.clear()
        self._watch = asyncio.ensure_future(self._watcher())

    async def _watcher(self) -> None:
        try:
            while await self._fill():
                pass  # a client never sends during an answer; keep bytes for the next request
        except (ConnectionError, OSError):
            pass
        self.gone.set()

    async def unwatch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
            self._watch = None

    # writing ------------------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        if self.gone.is_set() or self.writer.is_closing():
            raise PeerGone
        self.writer.write(data)
        try:
            await self.writer.drain()
        except (ConnectionError, OSError):
            raise PeerGone from None

    async def sleep(self, seconds: float) -> None:
        """Sleep, but stop at once (PeerGone) when the proxy hangs up."""
        if seconds <= 0:
            return
        try:
            await asyncio.wait_for(self.gone.wait(), seconds)
        except TimeoutError:
            return
        raise PeerGone

    async def head(
        self,
        status: int,
        content_type: str | None,
        *,
        length: int | None = None,
        chunked: bool = False,
        close: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
            502: "Bad Gateway",
            503: "Service Unavailable",
        }.get(status, "X")
        lines = [f"HTTP/1.1 {status} {reason}"]
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        if length is not None:
            lines.append(f"Content-Length: {length}")
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        lines.append("Connection: close" if close else "Connection: keep-alive")
        for k, v in (extra or {}).items():
            lines.append(f"{k}: {v}")
        await self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def chunk(self, data: bytes) -> None:
        if data:
            await self.send(b"%x\r\n" % len(data) + data + b"\r\n")

    async def end_chunks(self) -> None:
        await self.send(b"0\r\n\r\n")

    async def json(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        raw = orjson.dumps(body)
        await self.head(status, "application/json", length=len(raw), extra=extra)
        await self.send(raw)

    async def flush_pause(self) -> None:
        """Let the bytes written so far reach the peer before a reset destroys the send queue."""
        await self.sleep(0.05)

    def rst(self) -> None:
        sock = self.writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def fin(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()
        self.writer.close()


Handler = Callable[[Conn, Request], Awaitable[bool]]  # returns: keep the connection open


@dataclass
class Seen:
    method: str
    path: str
    fault: str
    stream: bool
    headers: dict[str, str] = field(default_factory=dict)


class FaultUpstream:
    def __init__(self) -> None:
        self.open_connections = 0
        self.inflight = 0
        self.peer_gone = 0
        self.requests: list[Seen] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[Any]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> FaultUpstream:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            if self._conns:
                await asyncio.wait(list(self._conns), timeout=5)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def __aenter__(self) -> FaultUpstream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_idle(self, timeout: float = 5.0, *, connections: int | None = None) -> bool:
        """Wait until no request is in flight (and, if given, at most ``connections`` are open)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if self.inflight == 0 and (connections is None or self.open_connections <= connections):
                return True
            await asyncio.sleep(0.02)
        return self.inflight == 0 and (connections is None or self.open_connections <= connections)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        self.open_connections += 1
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(reader, writer)
        try:
            for _ in range(100_000):  # keep-alive: bounded number of requests per connection
                req = await conn.read_request()
                if req is None:
                    break
                self.requests.append(Seen(req.method, req.path, req.fault, req.stream, req.headers))
                self.inflight += 1
                conn.watch()
                try:
                    keep = await self._answer(conn, req)
                except PeerGone:
                    self.peer_gone += 1
                    keep = False
                except (ConnectionError, OSError):
                    keep = False
                finally:
                    await conn.unwatch()
                    self.inflight -= 1
                if not keep or writer.is_closing():
                    break
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.open_connections -= 1
            self._conns.discard(task)
            if not writer.is_closing():
                writer.close()

    async def _answer(self, conn: Conn, req: Request) -> bool:
        if req.method == "GET" and req.path.rstrip("/").endswith("/models"):
            await conn.json(
                200,
                {"object": "list", "data": [{"id": "fault:ok", "object": "model", "created": 0, "owned_by": "fault"}]},
            )
            return True
        if req.method != "POST":
            await conn.json(
                404,
                {
                    "error": {
                        "message": f"no route {req.method} {req.path}",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "not_found",
                    }
                },
            )
            return True
        if req.body is None or not isinstance(req.body, dict):
            await conn.json(
                400,
                {
                    "error": {
                        "message": "fault upstream: body is not a JSON object",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return True
        handler = FAULTS.get(req.fault)
        if handler is None:
            await conn.json(
                404,
                {
                    "error": {
                        "message": f"unknown fault {req.fault}",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )
            return True
        return await handler(conn, req)


# -- behaviours ------------------------------------------------------------------------------------


async def _stream_frames(conn: Conn, parts: list[bytes], *, end: bool = True) -> None:
    await conn.head(200, "text/event-stream", chunked=True, extra={"Cache-Control": "no-cache"})
    for p in parts:
        await conn.chunk(p)
    if end:
        await conn.end_chunks()


async def f_ok(conn: Conn, req: Request) -> bool:
    if req.stream:
        await _stream_frames(conn, ok_frames(req.shape))
    else:
        await conn.json(200, ok_body(req.shape))
    return True


TOOL = ("get_weather", '{"city": "Zürich", "unit": "c"}')
REASONING = "Let me think about this carefully… 考える."


async def f_tools(conn: Conn, req: Request) -> bool:
    if req.stream:
        await _stream_frames(conn, ok_frames(req.shape, tool=TOOL))
    else:
        await conn.json(200, ok_body(req.shape, tool=TOOL))
    return True


async def f_reasoning(conn: Conn, req: Request) -> bool:
    if req.stream:
        await _stream_frames(conn, ok_frames(req.shape, reasoning=REASONING))
    else:
        await conn.json(200, ok_body(req.shape, reasoning=REASONING))
    return True


def _http_error(
    status: int,
    message: str,
    etype: str,
    code: str | None,
    param: str | None = None,
    extra: dict[str, str] | None = None,
) -> Handler:
    async def handler(conn: Conn, req: Request) -> bool:
        await conn.json(status, {"error": {"message": message, "type": etype, "param": param, "code": code}}, extra)
        return True

    return handler


async def f_http_400_split(conn: Conn, req: Request) -> bool:
    """A JSON error envelope whose body arrives in three writes, 20 ms apart."""
    raw = orjson.dumps(
        {
            "error": {
                "message": "fault: this request is invalid",
                "type": "invalid_request_error",
                "param": "input",
                "code": "bad_input",
            }
        }
    )
    await conn.head(400, "application/json", length=len(raw))
    third = len(raw) // 3
    for piece in (raw[:third], raw[third : 2 * third], raw[2 * third :]):
        await conn.send(piece)
        await asyncio.sleep(0.02)
    return True


async def f_http_502_html(conn: Conn, req: Request) -> bool:
    await conn.head(502, "text/html", length=len(HTML_PAGE))
    await conn.send(HTML_PAGE)
    return True


async def f_http_503_empty(conn: Conn, req: Request) -> bool:
    await conn.head(503, None, length=0)
    return True


async def f_reset_before(conn: Conn, req: Request) -> bool:
    conn.rst()
    return False


async def f_close_before(conn: Conn, req: Request) -> bool:
    await conn.fin()
    return False


async def f_slow_first_byte(conn: Conn, req: Request) -> bool:
    await conn.sleep(STALL_SECONDS)
    return await f_ok(conn, req)


def _half(shape: str) -> tuple[list[bytes], list[bytes]]:
    parts = ok_frames(shape)
    return parts[: len(parts) // 2], parts[len(parts) // 2 :]


async def f_stall_mid(conn: Conn, req: Request) -> bool:
    if req.stream:
        first, _ = _half(req.shape)
        await _stream_frames(conn, first, end=False)
    else:
        raw = orjson.dumps(ok_body(req.shape))
        await conn.head(200, "application/json", length=len(raw))
        await conn.send(raw[: len(raw) // 2])
    await conn.sleep(STALL_SECONDS)
    return False


def _cut(rst: bool) -> Handler:
    async def handler(conn: Conn, req: Request) -> bool:
        if req.stream:
            first, rest = _half(req.shape)
            await _stream_frames(conn, first, end=False)
            nxt = rest[0]
            # announce the whole next HTTP chunk, send half of it (and half an SSE frame)
            await conn.send(b"%x\r\n" % len(nxt) + nxt[: len(nxt) // 2])
        else:
            raw = orjson.dumps(ok_body(req.shape))
            await conn.head(200, "application/json", length=len(raw))
            await conn.send(raw[: len(raw) // 2])
        await conn.flush_pause()
        if rst:
            conn.rst()
        else:
            await conn.fin()
        return False

    return handler


async def f_invalid_utf8(conn: Conn, req: Request) -> bool:
    bad = b"caf\xc3 \xff\xfe broken"
    marker = "@@BAD@@"
    if req.stream:
        pieces = ["Hello ", marker, " world"]
        if req.shape == "chat":
            parts = frames("chat", chat_stream_events("", pieces=pieces))
        else:
            parts = frames("responses", responses_stream_events("Hello " + marker + " world", pieces=pieces))
        parts = [p.replace(marker.encode(), bad) for p in parts]
        await _stream_frames(conn, parts)
    else:
        raw = orjson.dumps(ok_body(req.shape, text="Hello " + marker)).replace(marker.encode(), bad)
        await conn.head(200, "application/json", length=len(raw))
        await conn.send(raw)
    return True


def _split_inside_multibyte(data: bytes) -> list[bytes]:
    """Cut right after the first byte of every multi-byte UTF-8 character."""
    out, start = [], 0
    for i, b in enumerate(data):
        if b >= 0xC0 and i + 1 > start:  # lead byte of a multi-byte character
            out.append(data[start : i + 1])
            start = i + 1
    out.append(data[start:])
    return [p for p in out if p]


async def f_split_multibyte(conn: Conn, req: Request) -> bool:
    if req.stream:
        data = b"".join(ok_frames(req.shape))
        await conn.head(200, "text/event-stream", chunked=True)
        for piece in _split_inside_multibyte(data):
            await conn.chunk(piece)
            await asyncio.sleep(0.002)  # separate reads on the other side
        await conn.end_chunks()
    else:
        raw = orjson.dumps(ok_body(req.shape))
        await conn.head(200, "application/json", length=len(raw))
        for piece in _split_inside_multibyte(raw):
            await conn.send(piece)
            await asyncio.sleep(0.002)
    return True


async def f_crlf(conn: Conn, req: Request) -> bool:
    if req.stream:
        if req.shape == "chat":
            parts = frames("chat", chat_stream_events(), eol=b"\r\n")
        else:
            parts = frames("responses", responses_stream_events(), eol=b"\r\n")
        await _stream_frames(conn, parts)
    else:
        raw = orjson.dumps(ok_body(req.shape), option=orjson.OPT_INDENT_2).replace(b"\n", b"\r\n")
        await conn.head(200, "application/json", length=len(raw))
        await conn.send(raw)
    return True


HUGE_TEXT = ("0123456789abcdef" * (HUGE_BYTES // 16 + 1))[:HUGE_BYTES]


async def f_huge_line(conn: Conn, req: Request) -> bool:
    if req.stream:
        await _stream_frames(conn, list(_huge_frames(req.shape)))
    else:
        await conn.json(200, ok_body(req.shape, text=HUGE_TEXT))
    return True


async def f_error_midstream(conn: Conn, req: Request) -> bool:
    frame, body = error_object(req.shape)
    if req.stream:
        text_part = "Partial answer "
        if req.shape == "chat":
            parts = [*frames("chat", chat_stream_events(text_part, finish=None), done=False), frame]
            parts.append(b"data: [DONE]\n\n")
        else:
            events = responses_stream_events(text_part, close_items=False)
            parts = [*frames("responses", events), frame]
            failed = response_object("failed", [], error={"code": "overloaded", "message": ERROR_MESSAGE})
            parts.append(
                sse(
                    {"type": "response.failed", "response": failed, "sequence_number": len(events) + 1},
                    "response.failed",
                )
            )
        await _stream_frames(conn, parts)
    else:
        if req.shape == "chat":
            await conn.json(200, body)
        else:
            await conn.json(200, response_object("failed", [], error={"code": "overloaded", "message": ERROR_MESSAGE}))
    return True


async def f_eof_finish_no_done(conn: Conn, req: Request) -> bool:
    """Chat: finish_reason and usage but no [DONE]. Responses: every item closed, no terminal event.
    Not streamed: a whole body delimited by the connection's close (no Content-Length)."""
    if req.stream:
        if req.shape == "chat":
            parts = frames("chat", chat_stream_events(), done=False)
        else:
            parts = frames("responses", responses_stream_events(terminal=False))
        await _stream_frames(conn, parts)
        return True
    raw = orjson.dumps(ok_body(req.shape))
    await conn.head(200, "application/json", close=True)
    await conn.send(raw)
    await conn.fin()
    return False


async def f_eof_no_finish(conn: Conn, req: Request) -> bool:
    """Text only, then a clean end of the HTTP body: no finish_reason / no terminal event.
    Not streamed: half a body, then a clean close (no Content-Length)."""
    if req.stream:
        if req.shape == "chat":
            parts = frames("chat", chat_stream_events(finish=None), done=False)
        else:
            parts = frames("responses", responses_stream_events(close_items=False))
        await _stream_frames(conn, parts)
        return True
    raw = orjson.dumps(ok_body(req.shape))
    await conn.head(200, "application/json", close=True)
    await conn.send(raw[: len(raw) // 2])
    await conn.fin()
    return False


async def f_after_done(conn: Conn, req: Request) -> bool:
    if req.stream:
        if req.shape == "chat":
            extra = frames("chat", [chat_chunk({"content": LEAK}), chat_chunk({}, "stop")])
        else:
            leak = responses_stream_events(LEAK)
            extra = frames("responses", leak[2:])
        await _stream_frames(conn, ok_frames(req.shape) + extra)
        return True
    raw = orjson.dumps(ok_body(req.shape))
    await conn.head(200, "application/json", length=len(raw))
    await conn.send(raw + orjson.dumps(ok_body(req.shape, text=LEAK)))  # bytes past Content-Length
    return True


TINY_TEXT = ("abcdefghij" * (TINY_COUNT // 10 + 1))[:TINY_COUNT]


_TINY_WIRE: dict[str, list[bytes]] = {}


def _tiny_wire(shape: str) -> Iterator[bytes]:
    """100,000 one-character events, each its own HTTP chunk, grouped into writes of 500 chunks.
    Built batch by batch (and kept), so the first bytes go out at once even on the first call."""
    done = _TINY_WIRE.get(shape)
    if done is not None:
        yield from done
        return
    built: list[bytes] = []
    events = (
        chat_stream_events(TINY_TEXT, pieces=[]) if shape == "chat" else responses_stream_events(TINY_TEXT, pieces=[])
    )
    split_at = 1 if shape == "chat" else 4  # where the text deltas go
    head, tail = frames(shape, events[:split_at], done=False), frames(shape, events[split_at:])
    if shape == "responses":  # renumber: the deltas are inserted before the closing events
        tail = frames(shape, [{**e, "sequence_number": e["sequence_number"] + TINY_COUNT} for e in events[split_at:]])

    def delta(n: int, ch: str) -> bytes:
        if shape == "chat":
            return sse(chat_chunk({"content": ch}))
        return sse(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_fault",
                "output_index": 0,
                "content_index": 0,
                "delta": ch,
                "logprobs": [],
                "sequence_number": split_at + n,
            },
            "response.output_text.delta",
        )

    def framed(parts: list[bytes]) -> bytes:
        return b"".join(b"%x\r\n" % len(p) + p + b"\r\n" for p in parts)

    batch = framed(head)
    built.append(batch)
    yield batch
    for start in range(0, TINY_COUNT, 500):
        batch = framed([delta(n, TINY_TEXT[n]) for n in range(start, min(start + 500, TINY_COUNT))])
        built.append(batch)
        yield batch
    batch = framed(tail)
    built.append(batch)
    yield batch
    _TINY_WIRE[shape] = built


@functools.lru_cache(maxsize=4)
def _huge_frames(shape: str) -> tuple[bytes, ...]:
    return tuple(ok_frames(shape, text=HUGE_TEXT, pieces=[HUGE_TEXT]))


async def f_tiny_chunks(conn: Conn, req: Request) -> bool:
    if req.stream:
        await conn.head(200, "text/event-stream", chunked=True)
        for write in _tiny_wire(req.shape):
            await conn.send(write)
        await conn.end_chunks()
    else:
        raw = orjson.dumps(ok_body(req.shape, text=TINY_TEXT))
        await conn.head(200, "application/json", chunked=True)
        step = max(1, len(raw) // TINY_COUNT + 1)
        batch = []
        for n, i in enumerate(range(0, len(raw), step), 1):
            piece = raw[i : i + step]
            batch.append(b"%x\r\n" % len(piece) + piece + b"\r\n")
            if n % 2000 == 0:
                await conn.send(b"".join(batch))
                batch = []
        batch.append(b"0\r\n\r\n")
        await conn.send(b"".join(batch))
    return True


async def f_unparsable(conn: Conn, req: Request) -> bool:
    if req.stream:
        first, rest = _half(req.shape)
        bad = (
            b"data: {this is not json at all\n\n"
            if req.shape == "chat"
            else b"event: response.output_text.delta\ndata: {this is not json at all\n\n"
        )
        await _stream_frames(conn, [*first, bad, *rest])
    else:
        raw = b"{this is not json at all"
        await conn.head(200, "application/json", length=len(raw))
        await conn.send(raw)
    return True


async def f_wrong_type_json(conn: Conn, req: Request) -> bool:
    """A stream request answered with one JSON body; a non-stream request answered with SSE."""
    if req.stream:
        await conn.json(200, ok_body(req.shape))
    else:
        await _stream_frames(conn, ok_frames(req.shape))
    return True


async def f_wrong_type_html(conn: Conn, req: Request) -> bool:
    await conn.head(200, "text/html; charset=utf-8", length=len(HTML_PAGE))
    await conn.send(HTML_PAGE)
    return True


async def f_bad_shape(conn: Conn, req: Request) -> bool:
    """Valid JSON of the wrong shape. Chat: an extra chunk with ``choices: [null]``; Responses: a
    text delta that is a number. Not streamed: the message's ``content`` is a number."""
    if req.stream:
        if req.shape == "chat":
            events = chat_stream_events()
            events.insert(2, {**chat_chunk({}), "choices": [None]})
            parts = frames("chat", events)
        else:
            events = responses_stream_events()
            deltas = [ev for ev in events if ev["type"] == "response.output_text.delta"]
            deltas[1]["delta"] = 5  # a text delta that is a number
            parts = frames("responses", events)
        await _stream_frames(conn, parts)
        return True
    body = ok_body(req.shape)
    if req.shape == "chat":
        body["choices"][0]["message"]["content"] = 5
    else:
        body["output"][0]["content"] = 5
    await conn.json(200, body)
    return True


async def f_slow_stream(conn: Conn, req: Request) -> bool:
    """A paced stream that would last a minute: one text event every 0.25 s."""
    interval = 0.25
    count = int(STREAM_MINUTE / interval)
    if not req.stream:
        await conn.sleep(STREAM_MINUTE)
        return await f_ok(conn, req)
    pieces = [f"tick{n} " for n in range(count)]
    parts = ok_frames(req.shape, text="".join(pieces), pieces=pieces)
    await conn.head(200, "text/event-stream", chunked=True, extra={"Cache-Control": "no-cache"})
    head_n = len(parts) - count - (3 if req.shape == "chat" else 4)  # frames before the first text delta
    for n, p in enumerate(parts):
        await conn.chunk(p)
        if n >= head_n:
            await conn.sleep(interval)
    await conn.end_chunks()
    return True


def paced(interval: float, count: int) -> Handler:
    """A stream of ``count`` text events, ``interval`` seconds apart, that ends normally."""

    async def handler(conn: Conn, req: Request) -> bool:
        pieces = [f"p{n} " for n in range(count)]
        parts = ok_frames(req.shape, text="".join(pieces), pieces=pieces)
        if not req.stream:
            await conn.sleep(interval * count)
            await conn.json(200, ok_body(req.shape, text="".join(pieces)))
            return True
        await conn.head(200, "text/event-stream", chunked=True)
        for p in parts:
            await conn.chunk(p)
            await conn.sleep(interval)
        await conn.end_chunks()
        return True

    return handler


async def f_echo_auth_401(conn: Conn, req: Request) -> bool:
    """A careless backend that echoes the key it got in its error message."""
    got = req.headers.get("authorization", "")
    await conn.json(
        401,
        {
            "error": {
                "message": f"Incorrect API key provided: {got}",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        },
    )
    return True


FAULTS: dict[str, Handler] = {
    "ok": f_ok,
    "tools": f_tools,
    "reasoning": f_reasoning,
    "http_400": _http_error(400, "fault: this request is invalid", "invalid_request_error", "bad_input", "input"),
    "http_401": _http_error(401, "fault: incorrect API key provided", "invalid_request_error", "invalid_api_key"),
    "http_404": _http_error(404, "fault: the model does not exist", "invalid_request_error", "model_not_found"),
    "http_429": _http_error(
        429,
        "fault: rate limit reached, slow down",
        "rate_limit_error",
        "rate_limit_exceeded",
        extra={"Retry-After": RETRY_AFTER},
    ),
    "http_500": _http_error(500, "fault: the server had an error", "server_error", None),
    "http_400_split": f_http_400_split,
    "http_502_html": f_http_502_html,
    "http_503_empty": f_http_503_empty,
    "reset_before": f_reset_before,
    "close_before": f_close_before,
    "slow_first_byte": f_slow_first_byte,
    "stall_mid": f_stall_mid,
    "cut_fin": _cut(rst=False),
    "cut_rst": _cut(rst=True),
    "invalid_utf8": f_invalid_utf8,
    "split_multibyte": f_split_multibyte,
    "crlf": f_crlf,
    "huge_line": f_huge_line,
    "error_midstream": f_error_midstream,
    "eof_finish_no_done": f_eof_finish_no_done,
    "eof_no_finish": f_eof_no_finish,
    "after_done": f_after_done,
    "tiny_chunks": f_tiny_chunks,
    "unparsable": f_unparsable,
    "wrong_type_json": f_wrong_type_json,
    "wrong_type_html": f_wrong_type_html,
    "bad_shape": f_bad_shape,
    "slow_stream": f_slow_stream,
    "paced": paced(0.1, 300),
    "paced_short": paced(0.05, 10),
    "echo_auth_401": f_echo_auth_401,
}


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if __name__ == "__main__":  # a standalone fake for manual runs: prints its base URL

    async def _main() -> None:
        async with FaultUpstream() as up:
            print(up.base_url, flush=True)
            await asyncio.sleep(3600)

    asyncio.run(_main())
