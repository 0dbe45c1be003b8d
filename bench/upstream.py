"""A fast fake model upstream for the benchmark: Chat Completions and Responses streams.

Raw asyncio protocol (no aiohttp on the serving path) so it stays far below the cost of the
proxies under test. Serves on one port:

  POST /v1/chat/completions   chat.completion.chunk frames, a usage chunk, ``data: [DONE]``
  POST /v1/responses          the full Responses event sequence with sequence numbers
  GET  /healthz               200
  GET  /stats                 {"frames": ..., "streams": ..., "bytes": ...} since start, and
                              "open" (connections open now, this one included) and "active"
                              (streams being written now), "unstreamed" (requests whose body did
                              not say "stream": true)

Parameters travel in the ``model`` name, because the model is the one field every translating
proxy passes through in both directions::

    bench:n=200,b=24,d=20,v=tool

    n  delta frames per response (default 20)
    b  bytes per delta (default 24; >= 14 to carry the timestamp)
    d  inter-chunk delay in ms (default 0: write as fast as the socket takes it)
    v  text | tool | reasoning (default text)
    w  unpaced: frames per socket write (default 1, as a real server writes each frame)
    y  unpaced: yield to other streams every y frames (default 16)

An ``x-bench`` request header with the same ``k=v,...`` syntax overrides the model name.

Every delta (text, tool-argument fragment, reasoning) starts with ``T@`` and 12 digits: the
upstream's CLOCK_MONOTONIC in microseconds (mod 1e12) taken just before the frame is written.
The load generator reads it to measure the latency each event picked up on the way.

Run alone: ``python bench/upstream.py --port 8101`` (prints ``listening on ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import orjson

MARK = b"T@"
TS_DIGITS = 12
TS_MOD = 10**TS_DIGITS
MIN_DELTA_BYTES = len(MARK) + TS_DIGITS
FILLER = b" lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor" * 64
CREATED = 1_760_000_000

_mono_ns = time.monotonic_ns


def now_ts() -> bytes:
    return b"%012d" % (_mono_ns() // 1000 % TS_MOD)


class _ParamsKw(TypedDict, total=False):
    n: int
    b: int
    d: float
    v: str
    w: int
    y: int


@dataclass(frozen=True, slots=True)
class Params:
    n: int = 20
    b: int = 24
    d: float = 0.0
    v: str = "text"
    w: int = 1  # frames per socket write when unpaced (a real server writes each frame)
    y: int = 16  # unpaced: let other streams run after this many frames

    @classmethod
    def parse(cls, spec: str) -> Params:
        spec = spec.removeprefix("bench:")
        kw: _ParamsKw = {}
        for part in spec.split(","):
            if "=" not in part:
                continue
            k, _, val = part.partition("=")
            k = k.strip()
            if k == "n":
                kw["n"] = max(2, int(val))
            elif k == "b":
                kw["b"] = max(1, int(val))
            elif k == "d":
                kw["d"] = max(0.0, float(val))
            elif k == "w":
                kw["w"] = max(1, int(val))
            elif k == "y":
                kw["y"] = max(1, int(val))
            elif k == "v":
                if val not in ("text", "tool", "reasoning"):
                    raise ValueError(f"unknown variant {val!r}")
                kw["v"] = val
        return cls(**kw)


def model_name(n: int, b: int = 24, d: float = 0, v: str = "text", w: int = 1) -> str:
    return f"bench:n={n},b={b},d={d:g},v={v}" + (f",w={w}" if w != 1 else "")


def frames_per_stream(api: str, p: Params) -> int:
    """How many SSE frames one stream of these parameters writes (the CPU-per-chunk denominator)."""
    if api == "chat":
        # head (role) + n deltas + finish + usage + [DONE]; reasoning: n split, no extra frame
        return p.n + 4
    if p.v == "text":
        return p.n + 8
    if p.v == "tool":
        return p.n + 6
    return p.n + 13  # reasoning item (summary) + message item


# ---------------------------------------------------------------------------- frame plans
#
# A stream is a sequence of "steps". Each step yields one SSE frame body (without HTTP chunk
# framing). Constant frames are pre-encoded; delta frames are ``template % args`` where the
# args hold the timestamp (and the sequence number for Responses).


def _delta_text(p: Params) -> bytes:
    """The per-delta payload after the timestamp: filler to reach b bytes."""
    if p.b < MIN_DELTA_BYTES:
        return FILLER[: p.b]
    return FILLER[: p.b - MIN_DELTA_BYTES]


def _esc(b: bytes) -> bytes:
    """Escape % for use inside a bytes %-template."""
    return b.replace(b"%", b"%%")


def _j(obj: object) -> bytes:
    return orjson.dumps(obj)


SID = "SIDSIDSIDS"  # 10-character id placeholder in pre-built frames
SIDB = SID.encode()


def _sid(sid: int) -> bytes:
    return b"%010d" % sid


class ChatPlan:
    """chat.completion.chunk frames for one parameter set, pre-built once (ids patched per stream)."""

    def __init__(self, model: str, p: Params) -> None:
        self.p = p
        self.model = model
        self.use_ts = use_ts = p.b >= MIN_DELTA_BYTES
        common = {
            "id": f"chatcmpl-bench{SID}",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
        }

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {
                **common,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                "usage": None,
            }

        def frame(obj: dict) -> bytes:
            return b"data: " + _j(obj) + b"\n\n"

        def tmpl(key: str, before: bytes = b"", after: bytes = b"") -> bytes:
            """A %-template of one delta frame: ``% ts`` gives the frame (``% ()`` without ts)."""
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": PH}}]} if key == "tool" else {key: PH}
            payload = before + (b"T@%s" if use_ts else b"") + _esc(_delta_text(p)) + after
            return _esc(frame(chunk(delta))).replace(PHJ, payload, 1)

        v, n = p.v, p.n
        if v == "tool":
            self.head = frame(
                chunk(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": f"call_bench{SID}",
                                "type": "function",
                                "function": {"name": "lookup", "arguments": ""},
                            }
                        ],
                    }
                )
            )
            # the arguments are one JSON object split into n fragments: {"q":" ... "}
            self.seq = [
                (tmpl("tool", before=b'{\\"q\\":\\"'), 1),
                (tmpl("tool"), n - 2),
                (tmpl("tool", after=b'\\"}'), 1),
            ]
            finish = "tool_calls"
        else:
            self.head = frame(chunk({"role": "assistant", "content": "", "refusal": None}))
            if v == "reasoning":
                self.seq = [(tmpl("reasoning_content"), n // 2), (tmpl("content"), n - n // 2)]
            else:
                self.seq = [(tmpl("content"), n)]
            finish = "stop"
        if not use_ts:
            self.seq = [(t % (), k) for t, k in self.seq]
        self.tail = [
            frame(chunk({}, finish)),
            frame(
                {
                    **common,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 12,
                        "completion_tokens": n,
                        "total_tokens": 12 + n,
                        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                        "completion_tokens_details": {
                            "reasoning_tokens": n // 2 if v == "reasoning" else 0,
                            "audio_tokens": 0,
                            "accepted_prediction_tokens": 0,
                            "rejected_prediction_tokens": 0,
                        },
                    },
                }
            ),
            b"data: [DONE]\n\n",
        ]

    def frames(self, sid: int) -> Iterator[bytes | None]:
        s = _sid(sid)
        use_ts = self.use_ts
        yield self.head.replace(SIDB, s)
        for t, count in self.seq:
            t = t.replace(SIDB, s)
            for _ in range(count):
                yield None  # PACE: a paced stream waits here
                yield t % now_ts() if use_ts else t
        for f in self.tail:
            yield f.replace(SIDB, s)


PH = "\x00PH\x00"
PHJ = b"\\u0000PH\\u0000"  # how orjson writes PH


class ResponsesPlan:
    """The Responses event sequence for one parameter set.

    Every event before the last delta is pre-built once per plan (ids patched per stream); the
    closing events carry the full text and are encoded per stream, as a real server does.
    """

    def __init__(self, model: str, p: Params) -> None:
        self.p = p
        self.model = model
        self.tail = _delta_text(p)
        self.use_ts = p.b >= MIN_DELTA_BYTES
        # (frames before, delta template, count) per item, plus the item for closing events
        self.created = self._ev(
            0, {"type": "response.created", "response": self._response(f"resp_bench{SID}", "in_progress", [], None)}
        )
        self.in_progress = self._ev(
            1, {"type": "response.in_progress", "response": self._response(f"resp_bench{SID}", "in_progress", [], None)}
        )
        self.static: dict[str, bytes] = {}

    def _response(self, rid: str, status: str, output: list, usage: dict | None) -> dict:
        return {
            "id": rid,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "max_tool_calls": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "prompt_cache_key": None,
            "reasoning": {"effort": None, "summary": None},
            "safety_identifier": None,
            "service_tier": "default",
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    @staticmethod
    def _ev(seq: int, obj: dict) -> bytes:
        obj = {"type": obj["type"], "sequence_number": seq, **obj}
        return b"event: " + obj["type"].encode() + b"\ndata: " + _j(obj) + b"\n\n"

    def _delta_tmpl(self, obj: dict) -> bytes:
        """%-template: ``% (seq, ts)`` (``% (seq,)`` without timestamps)."""
        obj = {"type": obj["type"], "sequence_number": -424242, **obj, "delta": PH}
        raw = _esc(b"event: " + obj["type"].encode() + b"\ndata: " + _j(obj) + b"\n\n")
        raw = raw.replace(b"-424242", b"%d", 1)
        mid = (b"T@%s" if self.use_ts else b"") + _esc(self.tail)
        return raw.replace(PHJ, mid, 1)

    def frames(self, sid: int) -> Iterator[bytes | None]:
        p = self.p
        s = _sid(sid)
        real = s.decode()
        cache = self.static
        seq = 2
        yield self.created.replace(SIDB, s)
        yield self.in_progress.replace(SIDB, s)

        def st(key: str, build: Callable[[str], dict[str, Any]]) -> bytes:
            """A pre-built event (built once with the id placeholder), numbered `seq`."""
            nonlocal seq
            b = cache.get(key)
            if b is None:
                b = cache[key] = self._ev(seq, build(SID))
            seq += 1
            return b.replace(SIDB, s)

        def ev(obj: dict) -> bytes:
            nonlocal seq
            b = self._ev(seq, obj)
            seq += 1
            return b

        def tmpl(key: str, build: Callable[[str], dict[str, Any]]) -> bytes:
            b = cache.get(key)
            if b is None:
                b = cache[key] = self._delta_tmpl(build(SID))
            return b.replace(SIDB, s)

        tail = self.tail
        use_ts = self.use_ts

        def run_deltas(t: bytes, count: int, pieces: list[bytes]) -> Iterator[bytes | None]:
            nonlocal seq
            for _ in range(count):
                yield None  # PACE: a paced stream waits here
                if use_ts:
                    ts = now_ts()
                    pieces.append(ts)
                    yield t % (seq, ts)
                else:
                    yield t % (seq,)
                seq += 1

        def joined(pieces: list[bytes], count: int) -> str:
            if use_ts:
                return b"".join(MARK + ts + tail for ts in pieces).decode()
            return (tail * count).decode()

        output: list[dict] = []
        oi = 0
        n, v = p.n, p.v
        out_tokens = n
        reasoning_tokens = 0
        if v == "reasoning":
            nr = n // 2
            reasoning_tokens = nr
            item_id = f"rs_bench{real}"
            yield st(
                "r.added",
                lambda i: {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"id": f"rs_bench{i}", "type": "reasoning", "summary": []},
                },
            )
            yield st(
                "r.part",
                lambda i: {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": f"rs_bench{i}",
                    "output_index": 0,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                },
            )
            pieces: list[bytes] = []
            t = tmpl(
                "r.delta",
                lambda i: {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": f"rs_bench{i}",
                    "output_index": 0,
                    "summary_index": 0,
                },
            )
            yield from run_deltas(t, nr, pieces)
            text = joined(pieces, nr)
            yield ev(
                {
                    "type": "response.reasoning_summary_text.done",
                    "item_id": item_id,
                    "output_index": oi,
                    "summary_index": 0,
                    "text": text,
                }
            )
            yield ev(
                {
                    "type": "response.reasoning_summary_part.done",
                    "item_id": item_id,
                    "output_index": oi,
                    "summary_index": 0,
                    "part": {"type": "summary_text", "text": text},
                }
            )
            done_item = {"id": item_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
            yield ev({"type": "response.output_item.done", "output_index": oi, "item": done_item})
            output.append(done_item)
            oi += 1
            n = n - nr
        if v == "tool":
            item_id = f"fc_bench{real}"

            def fc_item(i: str) -> dict:
                return {
                    "id": f"fc_bench{i}",
                    "type": "function_call",
                    "status": "in_progress",
                    "arguments": "",
                    "call_id": f"call_bench{i}",
                    "name": "lookup",
                }

            yield st("f.added", lambda i: {"type": "response.output_item.added", "output_index": 0, "item": fc_item(i)})
            t_mid = tmpl(
                "f.delta",
                lambda i: {
                    "type": "response.function_call_arguments.delta",
                    "item_id": f"fc_bench{i}",
                    "output_index": 0,
                },
            )
            t_first = t_mid.replace(b'"delta":"', b'"delta":"{\\"q\\":\\"', 1)
            # the delta is the last key: end the last fragment with \"} inside the string
            t_last = t_mid[: t_mid.rindex(b'"}')] + b'\\"}"}\n\n'
            pieces = []
            yield from run_deltas(t_first, 1, pieces)
            yield from run_deltas(t_mid, n - 2, pieces)
            yield from run_deltas(t_last, 1, pieces)
            args = '{"q":"' + joined(pieces, n) + '"}'
            yield ev(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item_id,
                    "output_index": oi,
                    "arguments": args,
                }
            )
            done_item = {**fc_item(real), "status": "completed", "arguments": args}
            yield ev({"type": "response.output_item.done", "output_index": oi, "item": done_item})
            output.append(done_item)
        else:
            item_id = f"msg_bench{real}"
            key = f"m{oi}"
            yield st(
                key + ".added",
                lambda i: {
                    "type": "response.output_item.added",
                    "output_index": oi,
                    "item": {
                        "id": f"msg_bench{i}",
                        "type": "message",
                        "status": "in_progress",
                        "content": [],
                        "role": "assistant",
                    },
                },
            )
            yield st(
                key + ".part",
                lambda i: {
                    "type": "response.content_part.added",
                    "item_id": f"msg_bench{i}",
                    "output_index": oi,
                    "content_index": 0,
                    "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""},
                },
            )
            t = tmpl(
                key + ".delta",
                lambda i: {
                    "type": "response.output_text.delta",
                    "item_id": f"msg_bench{i}",
                    "output_index": oi,
                    "content_index": 0,
                    "logprobs": [],
                },
            )
            pieces = []
            yield from run_deltas(t, n, pieces)
            text = joined(pieces, n)
            yield ev(
                {
                    "type": "response.output_text.done",
                    "item_id": item_id,
                    "output_index": oi,
                    "content_index": 0,
                    "text": text,
                    "logprobs": [],
                }
            )
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
            yield ev(
                {
                    "type": "response.content_part.done",
                    "item_id": item_id,
                    "output_index": oi,
                    "content_index": 0,
                    "part": part,
                }
            )
            done_item = {
                "id": item_id,
                "type": "message",
                "status": "completed",
                "content": [part],
                "role": "assistant",
            }
            yield ev({"type": "response.output_item.done", "output_index": oi, "item": done_item})
            output.append(done_item)
        usage = {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": 12 + out_tokens,
        }
        yield ev(
            {"type": "response.completed", "response": self._response(f"resp_bench{real}", "completed", output, usage)}
        )


# ---------------------------------------------------------------------------- HTTP server

_plans: dict[tuple[str, str, str], ChatPlan | ResponsesPlan] = {}


def get_plan(api: str, model: str, spec: str) -> ChatPlan | ResponsesPlan:
    key = (api, model, spec)
    plan = _plans.get(key)
    if plan is None:
        p = Params.parse(spec)
        plan = ChatPlan(model, p) if api == "chat" else ResponsesPlan(model, p)
        if len(_plans) > 1000:
            _plans.clear()
        _plans[key] = plan
    return plan


class Stats:
    frames = 0
    streams = 0
    bytes = 0
    sid = 0
    open = 0  # client connections open now
    active = 0  # streams being written now
    unstreamed = 0  # requests whose body did not say "stream": true (streamed with --stream-always)


STREAM_ALWAYS = False  # --stream-always: answer "stream": false with a stream too


HEAD_SSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


def _simple(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\nContent-Type: "
        + ctype
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: keep-alive\r\n\r\n"
        + body
    )


class UpstreamProtocol(asyncio.Protocol):
    __slots__ = ("buf", "busy", "closed", "drain_waiter", "paused", "task", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.paused = False
        self.drain_waiter: asyncio.Future | None = None
        self.closed = False
        self.task: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's: a Transport
        Stats.open += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        Stats.open -= 1
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._try_request()

    def _try_request(self) -> None:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                self._close()
            return
        head = bytes(buf[:end]).decode("latin-1")
        lines = head.split("\r\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError:
            self._close()
            return
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        pos = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = bytearray()
            while True:
                le = buf.find(b"\r\n", pos)
                if le < 0:
                    return
                size = int(bytes(buf[pos:le]).split(b";")[0], 16)
                if len(buf) < le + 2 + size + 2:
                    return
                chunks += buf[le + 2 : le + 2 + size]
                pos = le + 2 + size + 2
                if size == 0:
                    break
            body = bytes(chunks)
        else:
            clen = int(headers.get("content-length", "0") or 0)
            if len(buf) < pos + clen:
                return
            body = bytes(buf[pos : pos + clen])
            pos += clen
        del buf[:pos]
        self.busy = True
        self.task = asyncio.ensure_future(self._serve(method, target, headers, body))

    def _close(self) -> None:
        if self.transport is not None:  # set by connection_made, before any data
            self.transport.close()

    def _done(self) -> None:
        self.busy = False
        self.task = None
        if self.buf and not self.closed:
            self._try_request()

    async def _serve(self, method: str, target: str, headers: dict, body: bytes) -> None:
        tr = self.transport
        assert tr is not None
        path = target.split("?", 1)[0]
        try:
            if method == "GET" and path in ("/healthz", "/v1/healthz"):
                tr.write(_simple("200 OK", b"ok", b"text/plain"))
            elif method == "GET" and path == "/stats":
                tr.write(
                    _simple(
                        "200 OK",
                        _j(
                            {
                                "frames": Stats.frames,
                                "streams": Stats.streams,
                                "bytes": Stats.bytes,
                                "open": Stats.open,
                                "active": Stats.active,
                                "unstreamed": Stats.unstreamed,
                            }
                        ),
                    )
                )
            elif method == "POST" and path in (
                "/v1/chat/completions",
                "/chat/completions",
                "/v1/responses",
                "/responses",
            ):
                api = "chat" if path.endswith("chat/completions") else "responses"
                try:
                    req = orjson.loads(body) if body else {}
                    model = str(req.get("model") or "bench")
                    spec = headers.get("x-bench") or model
                    plan = get_plan(api, model, spec)
                except Exception as exc:  # the error goes back to the client
                    err = {
                        "error": {
                            "message": f"bad bench request: {exc}",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": None,
                        }
                    }
                    tr.write(_simple("400 Bad Request", _j(err)))
                    return
                if req.get("stream") is not True:
                    Stats.unstreamed += 1
                if req.get("stream") is False and not STREAM_ALWAYS:
                    err = {
                        "error": {
                            "message": "the bench upstream only streams",
                            "type": "invalid_request_error",
                            "param": "stream",
                            "code": None,
                        }
                    }
                    tr.write(_simple("400 Bad Request", _j(err)))
                    return
                Stats.active += 1
                try:
                    await self._stream(plan)
                finally:
                    Stats.active -= 1
            else:
                tr.write(_simple("404 Not Found", b'{"error":{"message":"not found"}}'))
            if headers.get("connection", "").lower() == "close":
                tr.close()
        except asyncio.CancelledError:
            return
        finally:
            self._done()

    async def _drain(self) -> None:
        if self.paused and not self.closed:
            fut = self.drain_waiter = asyncio.get_running_loop().create_future()
            await fut
            self.drain_waiter = None

    async def _stream(self, plan: ChatPlan | ResponsesPlan) -> None:
        tr = self.transport
        assert tr is not None
        Stats.sid += 1
        Stats.streams += 1
        sid = Stats.sid
        delay = plan.p.d / 1000.0
        frames = plan.frames(sid)
        nbytes = 0
        if delay <= 0:
            # one socket write per w frames; the response head rides on the first write and the
            # end of the chunked body on the last (one frame is held back to know which is last)
            w, y = plan.p.w, plan.p.y
            batch: list[bytes] = [HEAD_SSE]
            held = 0  # frames in batch
            k = 0
            for f in frames:
                if f is None:
                    continue
                nbytes += len(f)
                batch.append(b"%x\r\n%b\r\n" % (len(f), f))
                held += 1
                if held > w:
                    last = batch.pop()
                    tr.write(b"".join(batch))
                    Stats.frames += held - 1
                    batch = [last]
                    held = 1
                    k += 1
                    if self.paused:
                        await self._drain()
                        k = 0
                    elif k >= y:
                        await asyncio.sleep(0)
                        k = 0
                    if self.closed:
                        return
            batch.append(b"0\r\n\r\n")
            tr.write(b"".join(batch))
            Stats.frames += held
        else:
            # only deltas are paced (one every `delay`, the first at once); the frames around
            # them go out in a burst, as a real model server sends them
            tr.write(HEAD_SSE)
            loop = asyncio.get_running_loop()
            t_next = 0.0
            for f in frames:
                if f is None:
                    now = loop.time()
                    if t_next == 0.0:
                        t_next = now
                    elif t_next > now:
                        await asyncio.sleep(t_next - now)
                    elif self.paused:
                        await self._drain()
                    if self.closed:
                        return
                    t_next += delay
                    continue
                tr.write(b"%x\r\n%b\r\n" % (len(f), f))
                Stats.frames += 1
                nbytes += len(f)
            tr.write(b"0\r\n\r\n")
        Stats.bytes += nbytes


async def serve(host: str, port: int, shared_port: int | None = None) -> None:
    loop = asyncio.get_running_loop()
    hosts = host.split(",")  # several loopback addresses: one server that a pool sees as several replicas
    server = await loop.create_server(
        UpstreamProtocol, hosts if len(hosts) > 1 else host, port, backlog=1024, reuse_address=True
    )
    sock = server.sockets[0]
    print(f"bench upstream listening on http://{hosts[0]}:{sock.getsockname()[1]} ({host})", flush=True)
    shared = None
    if shared_port is not None:  # one port several processes listen on: the kernel spreads connections
        shared = await loop.create_server(UpstreamProtocol, hosts[0], shared_port, backlog=1024, reuse_port=True)
    async with server:
        await server.serve_forever()
    if shared is not None:
        shared.close()


def install_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1", help="or several loopback addresses, comma-separated")
    ap.add_argument("--port", type=int, default=8101)
    ap.add_argument(
        "--shared-port",
        type=int,
        help="also listen here with SO_REUSEPORT: several processes behind one address, as a load balancer makes",
    )
    ap.add_argument("--no-uvloop", action="store_true")
    ap.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    ap.add_argument(
        "--stream-always",
        action="store_true",
        help='stream even when the body says "stream": false (default: 400); /stats counts them',
    )
    args = ap.parse_args(argv)
    global STREAM_ALWAYS
    STREAM_ALWAYS = args.stream_always
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if not args.no_uvloop:
        install_uvloop()
    try:
        asyncio.run(serve(args.host, args.port, args.shared_port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
