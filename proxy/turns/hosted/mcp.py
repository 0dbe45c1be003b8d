"""The hosted ``mcp`` tool on a chat backend: crossfeed lists and calls remote MCP servers.

A runner of the tool loop (proxy/turns/hosted/tool_loop.py). The MCP side is the official ``mcp`` package's
client (streamable HTTP; SSE for a ``server_url`` whose path ends in ``/sse``); nothing of the
protocol is written here.

- **Who may be called.** Only a ``server_url`` that one of ``[mcp] allowed_servers`` (shell-style
  patterns, the whole URL) matches; anything else is a 400 naming ``tools[i].server_url``. The
  tool's ``headers`` and ``authorization`` go to that server only, are never logged, and are not
  echoed on the Response.
- **Listing**, before the first leg: each server's tools (an ``mcp_list_tools`` item, with
  ``response.mcp_list_tools.in_progress`` and ``.completed`` or ``.failed``), filtered by
  ``allowed_tools``, offered as ``mcp__<label>__<tool>`` functions. A listing already in the
  conversation (the input or the stored history) is reused: no new item, no request.
- **Calls**: an ``mcp_call`` item (``response.mcp_call.in_progress``,
  ``response.mcp_call_arguments.delta``/``.done``, then ``response.mcp_call.completed`` or
  ``.failed``); the calls of one round run concurrently, each bounded by
  ``call_timeout_seconds``; the output (text parts, cut at ``max_output_bytes``) or the error
  goes back to the backend. A server down, slow, answering an MCP error: the item fails with the
  reason, the model is told, the Response goes on.
- **Approvals**: a call that ``require_approval`` says needs one is not made; the Response ends
  with an ``mcp_approval_request`` item. A later request whose input carries the
  ``mcp_approval_response`` makes the call first (its ``mcp_call`` item opens that Response) or
  tells the model it was refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
import structlog

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.runtime.config import Mcp
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.hosted.tool_loop import write
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.forward import mcp_items
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import HostedTools

log = structlog.get_logger("crossfeed")

REFUSED = "The user did not approve this call; it was not made."


@dataclass(slots=True)
class McpServer:
    label: str
    url: str
    headers: dict[str, str]
    allowed_tools: Any
    approval: Any
    tools: list[dict[str, Any]] = field(default_factory=list)
    listing: dict[str, Any] | None = None  # the mcp_list_tools item listed for this Response
    functions: dict[str, str] = field(default_factory=dict)  # chat function name -> tool name


def servers_of(turn: Turn, tools: Iterable[tuple[int, dict[str, Any]]]) -> list[McpServer]:
    """The request's ``mcp`` tools (``(i, tools[i])``: the request mapping's ``HostedTools.mcp``),
    checked (a 400 naming the field otherwise)."""
    cfg: Mcp = turn.config.mcp
    out: list[McpServer] = []
    for i, tool in tools:
        p = f"tools[{i}]"
        label = tool.get("server_label")
        if not isinstance(label, str) or not label:
            raise ClientRequestError(
                "an mcp tool needs its server_label (a string)",
                param=f"{p}.server_label",
                code="missing_required_parameter",
            )
        if any(s.label == label for s in out):
            raise ClientRequestError(
                f"two mcp tools have the server_label {label!r}", param=f"{p}.server_label", code="invalid_value"
            )
        if tool.get("connector_id") is not None and tool.get("server_url") is None:
            raise ClientRequestError(
                "connectors are OpenAI's own; crossfeed calls MCP servers by server_url",
                param=f"{p}.connector_id",
                code="unsupported_parameter",
            )
        url = tool.get("server_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ClientRequestError(
                "an mcp tool needs its server_url (an http or https URL)", param=f"{p}.server_url", code="invalid_value"
            )
        if not any(fnmatch.fnmatchcase(url, pattern) for pattern in cfg.allowed_servers):
            raise ClientRequestError(
                f"crossfeed may not call the MCP server at {url}: the operator allows MCP servers by URL pattern in "
                '[mcp] allowed_servers (for example "http://127.0.0.1:*" or "https://mcp.example.com/*"), '
                "and none matches",
                param=f"{p}.server_url",
                code="mcp_server_not_allowed",
                status=400,
            )
        headers = (
            {str(k): str(v) for k, v in (tool.get("headers") or {}).items()}
            if isinstance(tool.get("headers"), dict)
            else {}
        )
        auth = tool.get("authorization")
        if isinstance(auth, str) and auth:
            headers["Authorization"] = auth if auth.lower().startswith(("bearer ", "basic ")) else f"Bearer {auth}"
        out.append(McpServer(label, url, headers, tool.get("allowed_tools"), tool.get("require_approval")))
    return out


@contextlib.asynccontextmanager
async def _client(server: McpServer, cfg: Mcp) -> AsyncIterator[Any]:
    """An ``mcp`` client session with the server. The package (and its HTTP client) is imported
    here, when a request first uses MCP: a crossfeed that never does keeps its memory and its
    start-up time (about 25 MB of modules)."""
    import httpx2
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    headers = tracing.inject(server.headers)  # a traced turn's traceparent
    if server.url.rstrip("/").endswith("/sse"):
        async with Client(
            sse_client(
                server.url, headers=headers, timeout=cfg.call_timeout_seconds, sse_read_timeout=cfg.call_timeout_seconds
            )
        ) as c:
            yield c
        return
    timeout = httpx2.Timeout(cfg.call_timeout_seconds)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(server.url, http_client=http)) as c,
    ):
        yield c


def _why(exc: BaseException, cfg: Mcp) -> str:
    """A line about a failure, naming no header (nor any exception class)."""
    import httpx2

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"the MCP server did not answer within {cfg.call_timeout_seconds:g}s"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"the MCP server answered HTTP {exc.response.status_code}"
    if isinstance(exc, (httpx2.TransportError, OSError)):
        return "the MCP server could not be reached"
    message = getattr(exc, "message", None) or (exc.args[0] if exc.args and isinstance(exc.args[0], str) else "")
    return f"the MCP server failed: {message}"[:500] if message else "the MCP server failed to answer"


def _span(server: McpServer, tool: str | None) -> Any:
    """The span of one request to an MCP server (proxy/runtime/tracing.py): a tool's call, or
    (``tool`` None) the listing."""
    url = urlsplit(server.url)
    attributes = {"mcp.method.name": "tools/call" if tool else "tools/list", "mcp.server.label": server.label}
    if url.hostname:
        attributes["server.address"] = url.hostname
    if tool is None:
        return tracing.span("mcp tools/list", attributes)
    attributes |= {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.type": "extension"}
    return tracing.span(f"execute_tool {tool}", attributes)


async def list_tools(server: McpServer, cfg: Mcp) -> list[dict[str, Any]] | str:
    with _span(server, None) as span:
        try:
            async with asyncio.timeout(cfg.call_timeout_seconds), _client(server, cfg) as c:
                found = await c.list_tools()
        except Exception as exc:  # any failure of the server: this listing fails, not the Response
            span.fail(_why(exc, cfg))
            return _why(exc, cfg)
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema,
            "annotations": t.annotations.model_dump(exclude_none=True, by_alias=True) if t.annotations else None,
        }
        for t in found.tools
    ]


async def call_tool(server: McpServer, tool: str, arguments: str, cfg: Mcp) -> tuple[str | None, str | None]:
    """(output, None) or (None, error)."""
    try:
        args = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return None, "the call's arguments are not a JSON object"
    with _span(server, tool) as span:
        try:
            async with asyncio.timeout(cfg.call_timeout_seconds), _client(server, cfg) as c:
                result = await c.call_tool(tool, args)
        except Exception as exc:  # any failure of the server fails this call only
            span.fail(_why(exc, cfg))
            return None, _why(exc, cfg)
        if result.is_error:
            span.fail("the tool reported an error")
    parts = []
    for content in result.content:
        text = getattr(content, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(content, 'type', 'content')} omitted]")
    text = "\n".join(parts)
    raw = text.encode("utf-8")
    if len(raw) > cfg.max_output_bytes:
        text = raw[: cfg.max_output_bytes].decode("utf-8", "ignore") + f"\n[output cut at {cfg.max_output_bytes} bytes]"
    return (None, text or "the tool reported an error") if result.is_error else (text, None)


class McpRunner:
    """The MCP servers of one Response (a ``tool_loop.Runner``)."""

    def __init__(self, servers: list[McpServer], cfg: Mcp, ids: Any, taken: frozenset[Any]) -> None:
        self.servers = servers
        self.cfg = cfg
        self.ids = ids
        self.forced: str | None = None
        self.budget = cfg.max_calls
        self.used = 0
        self.stop = False
        self.done_first: list[dict[str, Any]] = []  # mcp_call items made before the first leg (approvals)
        self.tools: list[dict[str, Any]] = []
        self.by_name: dict[str, tuple[McpServer, str]] = {}
        names = set(taken)
        for server in servers:
            for tool in server.tools:
                name = mcp_items.function_name(server.label, tool["name"], names)
                names.add(name)
                server.functions[name] = tool["name"]
                self.by_name[name] = (server, tool["name"])
                self.tools.append(
                    {
                        "type": "function",
                        "function": {
                            "name": name,
                            "description": str(tool.get("description") or "")[:1024],
                            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
                        },
                    }
                )
        self.names = frozenset(self.by_name)

    def prelude(self, main: ChatToResponsesStream) -> list[Any]:
        out: list[Any] = []
        for server in self.servers:
            if server.listing is None:
                continue
            item = server.listing
            events, index = main.begin_item({**item, "tools": []}, then="response.mcp_list_tools.in_progress")
            kind = "failed" if item.get("error") else "completed"
            out += events + main.item_event(f"response.mcp_list_tools.{kind}", index, item["id"])
            out += main.finish_item(index, item)
        for item in self.done_first:
            events, index = self._begin(main, item)
            out += events + self._end(main, item, index)
        return out

    def _begin(self, main: ChatToResponsesStream, item: dict[str, Any]) -> tuple[list[Any], int]:
        opened = {**item, "status": "in_progress", "arguments": "", "output": None, "error": None}
        out, index = main.begin_item(opened, then="response.mcp_call.in_progress")
        out += main.item_event("response.mcp_call_arguments.delta", index, item["id"], delta=item["arguments"])
        out += main.item_event("response.mcp_call_arguments.done", index, item["id"], arguments=item["arguments"])
        return out, index

    def _end(self, main: ChatToResponsesStream, item: dict[str, Any], index: int) -> list[Any]:
        kind = "failed" if item.get("error") else "completed"
        return main.item_event(f"response.mcp_call.{kind}", index, item["id"]) + main.finish_item(index, item)

    async def run(
        self, turn: Turn, main: ChatToResponsesStream, calls: list[dict[str, str]], sink: Sink | None
    ) -> dict[str, str]:
        results: dict[str, str] = {}
        out: list[Any] = []
        making: list[tuple[dict[str, str], McpServer, str, dict[str, Any], int]] = []
        waiting: list[tuple[McpServer, str, dict[str, str]]] = []
        for call in calls:
            server, tool = self.by_name[call["name"]]
            if mcp_items.needs_approval(server.approval, tool):
                waiting.append((server, tool, call))
                continue
            item = {
                "id": self.ids.new("mcp_"),
                "type": "mcp_call",
                "server_label": server.label,
                "name": tool,
                "arguments": call["arguments"],
                "approval_request_id": None,
            }
            events, index = self._begin(main, item)
            out += events
            making.append((call, server, tool, item, index))
        await write(sink, out)
        made = await asyncio.gather(*(call_tool(s, t, c["arguments"], self.cfg) for c, s, t, _, _ in making))
        out = []
        for (call, _, _, item, index), (output, error) in zip(making, made, strict=True):
            done = {**item, "status": "failed" if error else "completed", "output": output, "error": error}
            if error:
                log.info("mcp.call_failed", server_label=item["server_label"], tool=item["name"], error=error)
            results[call["call_id"]] = f"Error: {error}" if error else output or ""
            out += self._end(main, done, index)
        for server, tool, call in waiting:  # not made: the Response ends asking the client
            item = {
                "id": self.ids.new("mcpr_"),
                "type": "mcp_approval_request",
                "server_label": server.label,
                "name": tool,
                "arguments": call["arguments"],
            }
            events, index = main.begin_item(item)
            out += events + main.finish_item(index, item)
            self.stop = True
        await write(sink, out)
        return results


async def plan_mcp(turn: Turn, hosted: HostedTools) -> tuple[McpRunner | None, dict[str, str] | None]:
    """The runner of a request with ``mcp`` tools (listings made or reused, approvals answered
    in this input acted on), and what came of each approval (request.with_mcp_results)."""
    servers = servers_of(turn, hosted.mcp)
    if not servers:
        return None, ({rid: REFUSED for rid in hosted.answers} if hosted.answers else None)
    cfg: Mcp = turn.config.mcp
    await _list(servers, hosted.listed, cfg, turn.ids)
    runner = McpRunner(servers, cfg, turn.ids, hosted.client_functions)
    results: dict[str, str] = {}
    for rid, approve in hosted.answers.items():
        results[rid] = await _answer(runner, hosted, rid, approve)
    return runner, results


async def _list(servers: list[McpServer], reuse: Mapping[str, list[dict[str, Any]]], cfg: Mcp, ids: Any) -> None:
    """Each server's tools: its listing in the conversation reused, else listed now (concurrently),
    each new listing an ``mcp_list_tools`` item for the Response's prelude."""
    fresh = [s for s in servers if s.label not in reuse]
    listed = await asyncio.gather(*(list_tools(s, cfg) for s in fresh))
    for server in servers:
        if server.label in reuse:
            server.tools = [t for t in reuse[server.label] if mcp_items.allowed(server.allowed_tools, t["name"], False)]
    for server, found in zip(fresh, listed, strict=True):
        item: dict[str, Any] = {
            "id": ids.new("mcpl_"),
            "type": "mcp_list_tools",
            "server_label": server.label,
            "tools": [],
            "error": None,
        }
        if isinstance(found, str):
            item["error"] = found
            log.info("mcp.list_failed", server_label=server.label, error=found)
        else:
            read_only = {t["name"]: bool((t.get("annotations") or {}).get("readOnlyHint")) for t in found}
            server.tools = [
                t for t in found if mcp_items.allowed(server.allowed_tools, t["name"], read_only[t["name"]])
            ]
            item["tools"] = [{k: v for k, v in t.items() if v is not None} for t in server.tools]
        server.listing = item


async def _answer(runner: McpRunner, hosted: HostedTools, rid: str, approve: bool) -> str:
    """What came of one approval this input answers: the call made (its ``mcp_call`` item opens
    the Response), the user's refusal, or why it could not be made."""
    asked = hosted.requests.get(rid)
    if asked is None:
        raise ClientRequestError(
            f"no mcp_approval_request with id {rid!r} in this conversation: answer the "
            "approval requests of the response it continues",
            param=hosted.answered_at[rid],
            code="invalid_value",
        )
    if not approve:
        return REFUSED
    target = next((s for s in runner.servers if s.label == asked.get("server_label")), None)
    if target is None:
        return "The MCP server of this call is not in this request's tools; the call was not made."
    arguments = str(asked.get("arguments") or "{}")
    output, error = await call_tool(target, str(asked.get("name")), arguments, runner.cfg)
    runner.used += 1
    runner.done_first.append(
        {
            "id": runner.ids.new("mcp_"),
            "type": "mcp_call",
            "server_label": target.label,
            "name": asked.get("name"),
            "arguments": arguments,
            "approval_request_id": rid,
            "status": "failed" if error else "completed",
            "output": output,
            "error": error,
        }
    )
    return f"Error: {error}" if error else output or ""
