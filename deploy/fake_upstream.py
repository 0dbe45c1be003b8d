#!/usr/bin/env python3
"""A tiny Chat Completions server for deploy/smoke.sh: the standard library only, so any python3
on the host runs it (no venv, no crossfeed).

    python3 deploy/fake_upstream.py [--host 0.0.0.0] [--port 0]

Prints ``fake-upstream listening on HOST:PORT`` once it accepts connections (port 0: any free
one), then answers:

- ``GET /v1/models``: one model, ``fake-model`` (crossfeed's readiness probe asks for it);
- ``POST /v1/chat/completions``: with ``"stream": true``, a few SSE chunks (role, three pieces
  of text, finish_reason ``stop``, a usage chunk) and ``data: [DONE]``; otherwise one JSON
  completion with the same text.

Each request is logged on stderr. It stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
PIECES = ["Hello", " from the", " fake upstream."]
TEXT = "".join(PIECES)


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-upstream/1"

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write("fake-upstream: " + (format % args) + "\n")

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        if not request.get("stream"):
            self._json(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": MODEL,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}
                    ],
                    "usage": USAGE,
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the stream ends with the connection
        self.end_headers()
        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"content": piece}) for piece in PIECES]
        frames += [chunk({}, finish="stop"), chunk({}, usage=USAGE), b"data: [DONE]\n\n"]
        for frame in frames:
            self.wfile.write(frame)
            self.wfile.flush()
            time.sleep(0.02)
        self.close_connection = True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    print(f"fake-upstream listening on {host}:{port}", flush=True)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
