"""Calibration target: the *minimal* translating proxy, the design the CPU budgets were set against.

Not a usable translator. It parses each upstream SSE frame once with orjson and writes one
delta event per upstream delta, with no lifecycle beyond a first and a last event, and one
socket write per upstream read. The budgets (docs/benchmark.md) assume this design costs a little
more than the pass-through per chunk (the figures are in the README's Benchmark section); running
it in the same harness (``bench/run.py --targets passthrough,mintrans,crossfeed``) tells whether
this machine and harness are in the regime where the budgets were set.

    python bench/mintrans.py --port 8103 --upstream http://127.0.0.1:8101/v1 [--upstream-api responses]

Forward (default): serves POST /v1/responses, calls <upstream>/chat/completions.
Reverse (--upstream-api responses): serves POST /v1/chat/completions, calls <upstream>/responses.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator

import orjson
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

SESSION = web.AppKey("session", ClientSession)
DONE = b"data: [DONE]"


def _frames(buf: bytes) -> tuple[list[bytes], bytes]:
    parts = buf.split(b"\n\n")
    return parts[:-1], parts[-1]


def make_app(upstream: str, upstream_api: str) -> web.Application:
    base = upstream.rstrip("/")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        app[SESSION] = ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None, sock_read=300))
        yield
        await app[SESSION].close()

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def forward(request: web.Request) -> web.StreamResponse:
        """Responses client -> chat upstream."""
        req = orjson.loads(await request.read())
        body = {
            "model": req["model"],
            "messages": [{"role": "user", "content": req.get("input", "")}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        seq = 0
        async with request.app[SESSION].post(
            base + "/chat/completions", data=orjson.dumps(body), headers={"Content-Type": "application/json"}
        ) as up:
            await resp.prepare(request)
            out = [
                b"event: response.created\ndata: "
                + orjson.dumps(
                    {
                        "type": "response.created",
                        "sequence_number": 0,
                        "response": {"id": "resp_min", "object": "response", "status": "in_progress", "output": []},
                    }
                )
                + b"\n\n"
            ]
            seq = 1
            tail = b""
            async for chunk in up.content.iter_any():
                frames, tail = _frames(tail + chunk)
                for fr in frames:
                    if not fr.startswith(b"data: ") or fr.startswith(DONE):
                        continue
                    obj = orjson.loads(fr[6:])
                    choices = obj.get("choices")
                    if not choices:
                        continue
                    delta = choices[0].get("delta") or {}
                    if delta.get("content"):
                        typ, text = "response.output_text.delta", delta["content"]
                    elif delta.get("reasoning_content"):
                        typ, text = "response.reasoning_summary_text.delta", delta["reasoning_content"]
                    elif delta.get("tool_calls"):
                        typ = "response.function_call_arguments.delta"
                        text = (delta["tool_calls"][0].get("function") or {}).get("arguments") or ""
                        if not text:
                            continue
                    else:
                        continue
                    out.append(
                        b"event: "
                        + typ.encode()
                        + b"\ndata: "
                        + orjson.dumps(
                            {
                                "type": typ,
                                "sequence_number": seq,
                                "item_id": "msg_min",
                                "output_index": 0,
                                "content_index": 0,
                                "delta": text,
                            }
                        )
                        + b"\n\n"
                    )
                    seq += 1
                if out:
                    await resp.write(b"".join(out))
                    out = []
            await resp.write(
                b"event: response.completed\ndata: "
                + orjson.dumps(
                    {
                        "type": "response.completed",
                        "sequence_number": seq,
                        "response": {"id": "resp_min", "object": "response", "status": "completed", "output": []},
                    }
                )
                + b"\n\n"
            )
        await resp.write_eof()
        return resp

    async def reverse(request: web.Request) -> web.StreamResponse:
        """Chat client -> Responses upstream."""
        req = orjson.loads(await request.read())
        text_in = (req.get("messages") or [{}])[-1].get("content", "")
        body = {"model": req["model"], "input": text_in, "stream": True}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        head = b'data: {"id":"chatcmpl-min","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":'
        async with request.app[SESSION].post(
            base + "/responses", data=orjson.dumps(body), headers={"Content-Type": "application/json"}
        ) as up:
            await resp.prepare(request)
            tail = b""
            async for chunk in up.content.iter_any():
                frames, tail = _frames(tail + chunk)
                out = []
                for fr in frames:
                    i = fr.find(b"data: ")
                    if i < 0:
                        continue
                    obj = orjson.loads(fr[i + 6 :])
                    typ = obj.get("type", "")
                    if typ.endswith(".delta"):
                        key = "reasoning_content" if "reasoning" in typ else "content"
                        out.append(head + orjson.dumps({key: obj["delta"]}) + b',"finish_reason":null}]}\n\n')
                    elif typ == "response.completed":
                        out.append(head + b'{},"finish_reason":"stop"}]}\n\n' + DONE + b"\n\n")
                if out:
                    await resp.write(b"".join(out))
        await resp.write_eof()
        return resp

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/healthz", healthz)
    if upstream_api == "chat":
        app.router.add_post("/v1/responses", forward)
    else:
        app.router.add_post("/v1/chat/completions", reverse)
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8103)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--upstream-api", choices=["chat", "responses"], default="chat")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--cpu", type=int, default=None)
    args = ap.parse_args(argv)
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(
        make_app(args.upstream, args.upstream_api),
        host=args.host,
        port=args.port,
        access_log=None,
        print=lambda *_: print(f"mintrans listening on http://{args.host}:{args.port}", flush=True),
    )


if __name__ == "__main__":
    main()
