"""A scripted, recording fake of the OpenAI Responses API, for driving the real Codex CLI.

It serves ``POST /v1/responses`` (streaming SSE, or JSON when ``stream`` is false) and answers
every other path with a logged 404 (``GET /v1/models`` gets an empty model list), recording
method, path, query, headers (minus ``authorization``) and the JSON body of every request.

Each ``POST /v1/responses`` consumes the next *step* of a script; when the script is exhausted
the reply is a plain message ``"done"``. A step is a dict:

- ``{"items": [ITEM, ...]}``: one successful response whose output is these items, in order;
- ``{"http_error": {"status": 400, "body": {...}, "headers": {...}}}``: a plain HTTP error;
- ``{"stream_error": {"code": "server_error", "message": "..."}}``: a 200 stream that sends
  ``response.created`` and then ``response.failed``;
- ``{"error_event": {"code": "...", "message": "..."}}``: a 200 stream that sends
  ``response.created``, an ``error`` event (nested ``error`` object plus flat fields) and then
  ``response.failed``;
- ``{"repeat": N, ...}``: the same step used for the next N requests (e.g. a 500 while Codex
  retries);
- ``"truncate_after": K`` on an ``items`` step: send only the first K events, then close the
  connection without a terminal event (a dropped stream);
- ``"delay_s": S`` on any step: wait S seconds before answering.

An ITEM is one of::

    {"type": "message", "text": "hello"}
    {"type": "function_call", "name": "exec_command", "arguments": "{...}" | {...}, "call_id"?}
    {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch ...", "call_id"?}
    {"type": "reasoning", "summary": ["..."], "encrypted_content"?: "...", "content"?: ["..."]}

Usable two ways:

- in-process: ``with FakeResponsesBackend(script) as fake: ... fake.url ... fake.requests``
  (the server runs on its own event loop in a daemon thread);
- as a program: ``python fake_responses_backend.py --script s.json --record out.jsonl``; it prints
  ``LISTENING http://127.0.0.1:PORT`` on stdout once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Self

from aiohttp import web

_DROP_HEADERS = {"authorization"}


def _now() -> int:
    return int(time.time())


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def next(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n:04d}"


class FakeResponsesBackend:
    """Scripted Responses API fake; records every request it receives."""

    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record_path: str | Path | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.script: list[dict[str, Any]] = list(script or [])
        self.host = host
        self.port = port
        self.record_path = Path(record_path) if record_path else None
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._ids = _Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    # ------------------------------------------------------------------ public API

    @property
    def url(self) -> str:
        """Base URL to put in a provider's ``base_url`` (ends in ``/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def responses_requests(self) -> list[dict[str, Any]]:
        """Recorded ``POST /v1/responses`` requests (each with ``body``)."""
        with self._lock:
            return [r for r in self.requests if r["method"] == "POST" and r["path"].endswith("/responses")]

    def add_steps(self, *steps: dict[str, Any]) -> None:
        with self._lock:
            self.script.extend(steps)

    def start(self) -> FakeResponsesBackend:
        self._thread = threading.Thread(target=self._thread_main, name="fake-responses", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake responses backend did not start in 10 s")
        if self._start_error is not None:
            raise RuntimeError(f"fake responses backend failed to start: {self._start_error!r}")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._cleanup(), loop)
        with contextlib.suppress(TimeoutError, RuntimeError, OSError):
            fut.result(10)  # best effort: the loop is stopped right after either way
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ server

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # reported to start()
            self._start_error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]

    async def _cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
        if self.record_path is not None:
            with self.record_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def _next_step(self) -> dict[str, Any]:
        with self._lock:
            if not self.script:
                return {"items": [{"type": "message", "text": "done"}]}
            step = self.script[0]
            rep = step.get("repeat", 1)
            if rep > 1:
                step["repeat"] = rep - 1
                return step
            return self.script.pop(0)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        entry = {
            "t": time.time(),
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "headers": {k.lower(): v for k, v in request.headers.items() if k.lower() not in _DROP_HEADERS},
            "has_authorization": "authorization" in {k.lower() for k in request.headers},
            "body": body,
        }
        self._record(entry)
        if request.method == "POST" and request.path.rstrip("/").endswith("/responses"):
            return await self._responses(request, body if isinstance(body, dict) else {})
        if request.method == "GET" and request.path.rstrip("/").endswith("/models"):
            return web.json_response({"object": "list", "data": [], "models": []})
        return web.json_response(
            {
                "error": {
                    "message": f"no route {request.method} {request.path}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "not_found",
                }
            },
            status=404,
        )

    # ------------------------------------------------------------------ responses

    def _response_obj(self, rid: str, req: dict[str, Any], status: str, output: list, usage: Any) -> dict:
        return {
            "id": rid,
            "object": "response",
            "created_at": _now(),
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": req.get("instructions"),
            "max_output_tokens": req.get("max_output_tokens"),
            "model": req.get("model", "fake"),
            "output": output,
            "parallel_tool_calls": req.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": req.get("reasoning") or {"effort": None, "summary": None},
            "store": req.get("store", False),
            "temperature": 1.0,
            "text": req.get("text") or {"format": {"type": "text"}},
            "tool_choice": req.get("tool_choice", "auto"),
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        }

    def _build_events(self, step: dict[str, Any], req: dict[str, Any]) -> list[dict[str, Any]]:
        rid = self._ids.next("resp")
        events: list[dict[str, Any]] = []
        events.append({"type": "response.created", "response": self._response_obj(rid, req, "in_progress", [], None)})
        events.append(
            {"type": "response.in_progress", "response": self._response_obj(rid, req, "in_progress", [], None)}
        )
        if "stream_error" in step or "error_event" in step:
            err = step.get("stream_error") or step["error_event"]
            if "error_event" in step:
                code, msg = err.get("code", "server_error"), err.get("message", "boom")
                events.append(
                    {
                        "type": "error",
                        "code": code,
                        "message": msg,
                        "param": None,
                        "error": {"type": "server_error", "code": code, "message": msg, "param": None},
                    }
                )
            failed = self._response_obj(rid, req, "failed", [], None)
            failed["error"] = {"code": err.get("code", "server_error"), "message": err.get("message", "boom")}
            events.append({"type": "response.failed", "response": failed})
            return events
        output: list[dict[str, Any]] = []
        for idx, spec in enumerate(step.get("items", [])):
            t = spec["type"]
            if t == "message":
                events.extend(self._message_events(idx, spec, output))
            elif t == "function_call":
                events.extend(self._function_call_events(idx, spec, output))
            elif t == "custom_tool_call":
                events.extend(self._custom_tool_call_events(idx, spec, output))
            elif t == "reasoning":
                events.extend(self._reasoning_events(idx, spec, output))
            else:
                raise ValueError(f"unknown scripted item type {t!r}")
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 5},
            "total_tokens": 120,
        }
        events.append(
            {"type": "response.completed", "response": self._response_obj(rid, req, "completed", output, usage)}
        )
        return events

    def _message_events(self, idx: int, spec: dict, output: list) -> list[dict]:
        iid = self._ids.next("msg")
        text = spec["text"]
        pieces = [text[i : i + 8] for i in range(0, len(text), 8)] or [""]
        item0 = {"id": iid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        part0 = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        done = {"id": iid, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        if spec.get("phase"):
            item0["phase"] = done["phase"] = spec["phase"]
        ev = [
            {"type": "response.output_item.added", "output_index": idx, "item": item0},
            {
                "type": "response.content_part.added",
                "item_id": iid,
                "output_index": idx,
                "content_index": 0,
                "part": part0,
            },
        ]
        for p in pieces:
            ev.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": iid,
                    "output_index": idx,
                    "content_index": 0,
                    "delta": p,
                    "logprobs": [],
                }
            )
        ev += [
            {
                "type": "response.output_text.done",
                "item_id": iid,
                "output_index": idx,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
            {
                "type": "response.content_part.done",
                "item_id": iid,
                "output_index": idx,
                "content_index": 0,
                "part": part,
            },
            {"type": "response.output_item.done", "output_index": idx, "item": done},
        ]
        output.append(done)
        return ev

    def _function_call_events(self, idx: int, spec: dict, output: list) -> list[dict]:
        iid = self._ids.next("fc")
        call_id = spec.get("call_id") or self._ids.next("call")
        args = spec["arguments"]
        if not isinstance(args, str):
            args = json.dumps(args)
        item0 = {
            "id": iid,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": spec["name"],
        }
        if spec.get("namespace"):
            item0["namespace"] = spec["namespace"]
        done = dict(item0, status="completed", arguments=args)
        ev = [{"type": "response.output_item.added", "output_index": idx, "item": item0}]
        for i in range(0, len(args), 10):
            ev.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": iid,
                    "output_index": idx,
                    "delta": args[i : i + 10],
                }
            )
        ev += [
            {"type": "response.function_call_arguments.done", "item_id": iid, "output_index": idx, "arguments": args},
            {"type": "response.output_item.done", "output_index": idx, "item": done},
        ]
        output.append(done)
        return ev

    def _custom_tool_call_events(self, idx: int, spec: dict, output: list) -> list[dict]:
        iid = self._ids.next("ctc")
        call_id = spec.get("call_id") or self._ids.next("call")
        text = spec["input"]
        item0 = {
            "id": iid,
            "type": "custom_tool_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": spec["name"],
            "input": "",
        }
        done = dict(item0, status="completed", input=text)
        ev = [{"type": "response.output_item.added", "output_index": idx, "item": item0}]
        for i in range(0, len(text), 16):
            ev.append(
                {
                    "type": "response.custom_tool_call_input.delta",
                    "item_id": iid,
                    "output_index": idx,
                    "delta": text[i : i + 16],
                }
            )
        ev += [
            {"type": "response.custom_tool_call_input.done", "item_id": iid, "output_index": idx, "input": text},
            {"type": "response.output_item.done", "output_index": idx, "item": done},
        ]
        output.append(done)
        return ev

    def _reasoning_events(self, idx: int, spec: dict, output: list) -> list[dict]:
        iid = self._ids.next("rs")
        summaries = spec.get("summary", [])
        item0: dict[str, Any] = {"id": iid, "type": "reasoning", "summary": []}
        if "encrypted_content" in spec:
            item0["encrypted_content"] = spec["encrypted_content"]
        ev = [{"type": "response.output_item.added", "output_index": idx, "item": item0}]
        for k, s in enumerate(summaries):
            ev += [
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": k,
                    "part": {"type": "summary_text", "text": ""},
                },
                {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": k,
                    "delta": s,
                },
                {
                    "type": "response.reasoning_summary_text.done",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": k,
                    "text": s,
                },
                {
                    "type": "response.reasoning_summary_part.done",
                    "item_id": iid,
                    "output_index": idx,
                    "summary_index": k,
                    "part": {"type": "summary_text", "text": s},
                },
            ]
        done = dict(item0, summary=[{"type": "summary_text", "text": s} for s in summaries])
        contents = spec.get("content") or []
        if contents:
            ev_c = []
            for k, c in enumerate(contents):
                ev_c += [
                    {
                        "type": "response.content_part.added",
                        "item_id": iid,
                        "output_index": idx,
                        "content_index": k,
                        "part": {"type": "reasoning_text", "text": ""},
                    },
                    {
                        "type": "response.reasoning_text.delta",
                        "item_id": iid,
                        "output_index": idx,
                        "content_index": k,
                        "delta": c,
                    },
                    {
                        "type": "response.reasoning_text.done",
                        "item_id": iid,
                        "output_index": idx,
                        "content_index": k,
                        "text": c,
                    },
                    {
                        "type": "response.content_part.done",
                        "item_id": iid,
                        "output_index": idx,
                        "content_index": k,
                        "part": {"type": "reasoning_text", "text": c},
                    },
                ]
            ev += ev_c
            done["content"] = [{"type": "reasoning_text", "text": c} for c in contents]
        ev.append({"type": "response.output_item.done", "output_index": idx, "item": done})
        output.append(done)
        return ev

    async def _responses(self, request: web.Request, req: dict[str, Any]) -> web.StreamResponse:
        step = copy.deepcopy(self._next_step())
        if step.get("delay_s"):
            await asyncio.sleep(float(step["delay_s"]))
        if "http_error" in step:
            he = step["http_error"]
            return web.json_response(he.get("body", {}), status=he.get("status", 500), headers=he.get("headers"))
        events = self._build_events(step, req)
        for n, e in enumerate(events):
            e["sequence_number"] = n
        if step.get("truncate_after") is not None:
            events = events[: int(step["truncate_after"])]
        if not req.get("stream", False):
            return web.json_response(events[-1]["response"])
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        for e in events:
            await resp.write(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode())
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", help="JSON file: a list of steps")
    ap.add_argument("--record", help="append every request as one JSON line to this file")
    ap.add_argument("--max-seconds", type=float, default=600.0, help="exit after this long (bounded run)")
    a = ap.parse_args(argv)
    script = json.loads(Path(a.script).read_text()) if a.script else []
    fake = FakeResponsesBackend(script, host=a.host, port=a.port, record_path=a.record).start()
    print(f"LISTENING http://{fake.host}:{fake.port}", flush=True)
    try:
        deadline = time.monotonic() + a.max_seconds
        while time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
