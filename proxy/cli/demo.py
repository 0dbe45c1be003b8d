"""``crossfeed demo``: see the forward translation work with nothing but this package.

Everything runs in one process on loopback ports chosen by the OS:

1. a scripted Chat Completions backend (``DemoBackend``) that streams realistic
   ``chat.completion.chunk`` replies: ``reasoning_content`` deltas, then a tool call when the
   request offers tools, or text when the request carries a tool result;
2. crossfeed itself (``proxy.app.create_app``) in front of it, with the built-in defaults;
3. a client that sends two streaming ``POST /v1/responses`` requests, the way an agent would:
   the question (the model calls ``get_weather``), then the tool's result (the model answers).
   The official ``openai`` SDK is used when installed (it is in the ``test`` extra), else aiohttp.

Each translated event is printed as it arrives (sequence number, type, a short excerpt), then
the final text and token usage. Bounded: the whole demo gives up after ``DEMO_TIMEOUT`` seconds.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from crossfeed.proxy.app import create_app
from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.logs import configure_logging
from crossfeed.translators.sse import SSEDecoder

DEMO_TIMEOUT = 60.0
MODEL = "demo-model"
QUESTION = "What's the weather in Paris right now? Answer in one sentence."
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TOOL_RESULT = '{"city": "Paris", "temperature_c": 18, "sky": "sunny", "wind_kmh": 9}'

_REASONING_CALL = (
    "The user wants the current weather in Paris. I cannot know it without looking it up, "
    "so I will call get_weather with the city."
)
_REASONING_ANSWER = "The tool says 18 degrees Celsius, sunny, light wind. One sentence is enough."
_ANSWER = "It is sunny in Paris right now, about 18 °C with a light breeze of 9 km/h."
_REASONING_PLAIN = "A simple question; answer briefly."
_PLAIN = "Hello! I am the crossfeed demo backend, a scripted chat completions server."


def _pieces(text: str) -> list[str]:
    """Split like a streaming server does: a few tokens (words with their leading space) per chunk."""
    tokens = re.findall(r"\s*[\w°/']+|\s*[^\w\s]", text)
    return ["".join(tokens[i : i + 3]) for i in range(0, len(tokens), 3)]


class DemoBackend:
    """A scripted Chat Completions server: ``POST /v1/chat/completions`` and ``GET /v1/models``."""

    def __init__(self, delay: float = 0.02) -> None:
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._n = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the one site's one socket

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "created": 1_700_000_000, "owned_by": "crossfeed-demo"}],
            }
        )

    def _script(self, body: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None]:
        """(reasoning, text, tool call) for this request."""
        messages = body.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if last.get("role") == "tool":
            return _REASONING_ANSWER, _ANSWER, None
        tools = [t for t in body.get("tools") or () if isinstance(t, dict)]
        if any((t.get("function") or {}).get("name") == "get_weather" for t in tools):
            return _REASONING_CALL, "", {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        return _REASONING_PLAIN, _PLAIN, None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self._n += 1
        reasoning, text, call = self._script(body)
        reply = _Reply(f"chatcmpl-demo{self._n}", int(time.time()), reasoning, text, call)
        prompt_tokens = sum(len(str(m.get("content") or "")) // 4 + 4 for m in body.get("messages") or ())
        usage = reply.usage(prompt_tokens)
        if not body.get("stream"):
            return web.json_response(reply.completion(usage))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for frame in reply.frames(usage):
            await resp.write(frame)
            if self.delay:
                await asyncio.sleep(self.delay)
        await resp.write_eof()
        return resp


@dataclass(frozen=True)
class _Reply:
    """One scripted answer, as a chat.completion body or as the chunks a streaming server sends."""

    cid: str
    created: int
    reasoning: str
    text: str
    call: dict[str, Any] | None

    @property
    def finish(self) -> str:
        return "tool_calls" if self.call else "stop"

    def usage(self, prompt_tokens: int) -> dict[str, Any]:
        r_pieces, t_pieces = _pieces(self.reasoning), _pieces(self.text)
        completion_tokens = len(r_pieces) + len(t_pieces) + (8 if self.call else 0)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": len(r_pieces)},
        }

    def completion(self, usage: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.text or None,
            "reasoning_content": self.reasoning,
        }
        if self.call:
            message["tool_calls"] = [{"id": "call_demo_weather", "type": "function", "function": self.call}]
        return {
            "id": self.cid,
            "object": "chat.completion",
            "created": self.created,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
            "usage": usage,
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        obj = {
            "id": self.cid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def frames(self, usage: dict[str, Any]) -> list[bytes]:
        chunk = self.chunk
        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"reasoning_content": p}) for p in _pieces(self.reasoning)]
        frames += [chunk({"content": p}) for p in _pieces(self.text)]
        if self.call:
            opening = {"index": 0, "id": "call_demo_weather", "type": "function"}
            frames.append(
                chunk({"tool_calls": [{**opening, "function": {"name": self.call["name"], "arguments": ""}}]})
            )
            args = self.call["arguments"]
            for piece in (args[:8], args[8:13], args[13:]):
                frames.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        frames.append(chunk({}, self.finish))
        usage_chunk = {
            "id": self.cid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": MODEL,
            "choices": [],
            "usage": usage,
        }
        frames.append(b"data: " + orjson.dumps(usage_chunk) + b"\n\n")
        frames.append(b"data: [DONE]\n\n")
        return frames


# -- clients: both yield plain event dicts --------------------------------------------------------


async def _sdk_events(base_url: str, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    import openai

    http = openai.DefaultAsyncHttpxClient(trust_env=False, timeout=30)  # loopback: never via a proxy
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-demo", http_client=http, max_retries=0)
    try:
        stream = await client.responses.create(**request)
        async for event in stream:
            yield event.to_dict() if hasattr(event, "to_dict") else event.model_dump(mode="json")
    finally:
        await client.close()


async def _aiohttp_events(base_url: str, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(base_url + "/responses", json=request, headers={"Authorization": "Bearer sk-demo"}) as resp,
    ):
        if resp.status != 200:
            raise RuntimeError(f"crossfeed answered {resp.status}: {(await resp.text())[:300]}")
        decoder = SSEDecoder()
        async for chunk in resp.content.iter_any():
            for _, data in decoder.feed(chunk):
                yield orjson.loads(data)
        for _, data in decoder.finish():
            yield orjson.loads(data)


# -- printing -------------------------------------------------------------------------------------


def _short(text: str, width: int = 48) -> str:
    s = orjson.dumps(text).decode()
    return s if len(s) <= width else s[: width - 4] + '..."'


def describe(event: dict[str, Any]) -> str:
    """One line per event: sequence number, type, and what matters about it."""
    t = str(event.get("type"))
    seq = event.get("sequence_number")
    head = f"  #{seq:<3} {t:<44}" if isinstance(seq, int) else f"  #--  {t:<44}"
    for key in ("delta", "text", "arguments"):
        if isinstance(event.get(key), str):
            return head + " " + _short(event[key])
    item = event.get("item")
    if isinstance(item, dict):
        what = item.get("type", "?")
        if item.get("name"):
            what += f" {item['name']}"
        if t.endswith(".done") and item.get("type") in ("function_call", "custom_tool_call"):
            what += f"({item.get('arguments', item.get('input', ''))})"
        status = f" [{item['status']}]" if item.get("status") else ""
        return head + f" {what} {item.get('id', '')}{status}"
    response = event.get("response")
    if isinstance(response, dict):
        return head + f" {response.get('id', '')} status={response.get('status')}"
    if t == "error":
        return head + f" {event.get('code')}: {event.get('message')}"
    part = event.get("part")
    if isinstance(part, dict):
        return head + f" {part.get('type')}"
    return head


def output_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output") or ()
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if part.get("type") == "output_text"
    )


# -- the demo -------------------------------------------------------------------------------------


EventSource = Callable[[str, dict[str, Any]], AsyncIterator[dict[str, Any]]]


def _client(use_sdk: bool, say: Callable[[str], None]) -> tuple[EventSource, str]:
    """The openai SDK when asked for and installed, else a plain aiohttp client; and its name."""
    if use_sdk:
        try:
            import openai

            return _sdk_events, f"the openai SDK {openai.__version__}"
        except ImportError:
            say(
                "the openai package is not installed (pip install openai, or pip install -e '.[test]' "
                "in the crossfeed checkout): using a plain aiohttp client instead"
            )
    return _aiohttp_events, "aiohttp (plain HTTP, no SDK)"


async def run(*, use_sdk: bool = True, delay: float = 0.02, write: Callable[[str], None] | None = None) -> int:
    say = write or (lambda line: print(line, flush=True))
    events_of, client_name = _client(use_sdk, say)
    backend = DemoBackend(delay)
    await backend.start()
    say(f"starting demo backend on {backend.base_url} (a scripted chat completions server, model {MODEL!r})")
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": backend.base_url,
            "upstream.api": "chat",
            "server.host": "127.0.0.1",
            "server.port": 0,
            "store.backend": "memory",
        },
    )  # the demo leaves no files behind
    app = create_app(config, environ={})
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]  # the one site's one socket
        base_url = f"http://127.0.0.1:{port}/v1"
        say(f"crossfeed on {base_url} -> {backend.base_url} (chat): Responses in front, Chat Completions behind")
        final = await _conversation(base_url, events_of, client_name, say)
        if final is None:
            return 1
        usage = final.get("usage") or {}
        reasoning = (usage.get("output_tokens_details") or {}).get("reasoning_tokens")
        say("")
        say(f"final text: {output_text(final)}")
        say(
            f"usage: input_tokens={usage.get('input_tokens')} output_tokens={usage.get('output_tokens')} "
            f"(reasoning {reasoning}) total_tokens={usage.get('total_tokens')}"
        )
        say(
            f"done: {len(backend.requests)} chat requests reached the backend; "
            "every event above was translated by crossfeed from chat.completion.chunk deltas."
        )
        return 0
    finally:
        await runner.cleanup()
        await backend.close()


async def _conversation(
    base_url: str, events_of: EventSource, client_name: str, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """The two turns (the question, then the tool's result), each event printed as it arrives.
    The last turn's final response, or None (the reason said) when a turn did not go as scripted."""
    conversation: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    final: dict[str, Any] | None = None
    for turn in (1, 2):
        request = {"model": MODEL, "input": conversation, "tools": [WEATHER_TOOL], "stream": True}
        say("")
        what = "the question" if turn == 1 else "the tool's result"
        say(f"sending {what}: POST {base_url}/responses (stream=true) with {client_name}")
        final = None
        async for event in events_of(base_url, request):
            say(describe(event))
            if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                final = event["response"]
        if final is None:
            say("demo failed: the stream ended without a terminal event")
            return None
        if final.get("status") != "completed":
            say(f"demo failed: the response ended {final.get('status')}: {final.get('error')}")
            return None
        calls = [i for i in final.get("output") or () if i.get("type") == "function_call"]
        if turn == 1:
            if not calls:
                say("demo failed: the model did not call get_weather")
                return None
            call = calls[0]
            say(
                f"-> the model called {call['name']}({call['arguments']}); "
                f"the demo runs the tool and sends back {TOOL_RESULT}"
            )
            conversation += [
                {
                    "type": "function_call",
                    "call_id": call["call_id"],
                    "name": call["name"],
                    "arguments": call["arguments"],
                },
                {"type": "function_call_output", "call_id": call["call_id"], "output": TOOL_RESULT},
            ]
    return final


def main(*, use_sdk: bool = True, delay: float = 0.02) -> int:
    configure_logging("warning", "console")  # keep crossfeed's own log lines out of the demo's output
    try:
        return asyncio.run(asyncio.wait_for(run(use_sdk=use_sdk, delay=delay), DEMO_TIMEOUT))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `crossfeed demo | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except TimeoutError:
        print(f"demo failed: gave up after {DEMO_TIMEOUT:g}s", file=sys.stderr)
        return 1
    except Exception as exc:  # a readable line, not a traceback, for a newcomer
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
