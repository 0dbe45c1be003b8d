"""Codex's unusual request shapes through crossfeed (docs/wire-facts.md, "Codex's request shapes"), with the official SDK.

Codex (docs/codex.md, recorded requests in tests/fixtures/codex/) sends request shapes that
chat backends reject when they are passed on as they are: hosted tools (`web_search`,
`tool_search`, `image_generation`), `namespace` tools, `additional_tools` input items that declare
tools inside `input`, `tool_choice` shapes with no chat equivalent, Codex-only top-level keys
(`client_metadata`, `include`, `prompt_cache_key`, `generate: false` prewarms), and probe requests
with empty input and `max_output_tokens: 1` (ikawrakow/ik_llama.cpp#1964).

Each shape goes through crossfeed on a real port with ``client`` (conftest: every SSE body the SDK
reads is validated by the strict validator) and the fake chat backend, and each test asserts:

- never a 5xx: either a 200 whose stream is valid (counted with ``validate_captured``, so an
  empty or unread body cannot pass unnoticed), or a 400 naming the ``param`` where a chat backend
  cannot be given the request at all (then nothing reaches the backend);
- the request the backend received is one a strict chat backend accepts (``strict_chat_problems``):
  only Chat Completions keys, function tools only, consistent tools / tool_choice / tool messages.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.fakes.upstream import FakeUpstream, JSONReply, SSEReply
from tests.support.chat_chunks import DONE, chunk, usage_chunk
from tests.support.clients import Captured, validate_captured

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
RECORDED = sorted(p.name for p in FIXTURES.glob("*.request.json"))
REASONING_FIELD = "reasoning_content"  # the default upstream reasoning_field

# Chat Completions create parameters, as docs/wire-facts.md, Requests, maps them: a strict
# chat backend (OpenAI itself: "Unrecognized request argument") rejects any other top-level key.
CHAT_KEYS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "verbosity",
        "reasoning_effort",
        "stream",
        "stream_options",
        "store",
        "metadata",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
    }
)
# Keys each chat message role takes (docs/wire-facts.md, Deltas and Requests); the reasoning field is the one
# non-standard key, sent back on assistant messages because DeepSeek-style backends require it.
MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", REASONING_FIELD},
    "tool": {"role", "content", "tool_call_id"},
}
USER_PARTS = {"text", "image_url", "file"}
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
FUNCTION_KEYS = {"name", "description", "parameters", "strict"}
HOSTED_TOOL_TYPES = {
    "web_search",
    "web_search_preview",
    "tool_search",
    "image_generation",
    "file_search",
    "code_interpreter",
    "mcp",
    "local_shell",
    "shell",
    "computer_use_preview",
    "apply_patch",
    "namespace",
    "custom",
}


def strict_chat_problems(body: dict[str, Any]) -> list[str]:
    """What a strict Chat Completions backend would reject in ``body`` (empty list: nothing)."""
    problems = [f"unknown top-level key {k!r}" for k in sorted(set(body) - CHAT_KEYS)]
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model must be a non-empty string")
    tools = body.get("tools")
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            problems.append("tools must be a non-empty array when present")
            tools = []
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type") != "function" or set(tool) != {"type", "function"}:
                problems.append(f"tools[{i}] is not a plain function tool: {str(tool)[:120]}")
            if not isinstance(fn, dict) or not FUNCTION_NAME.match(str(fn.get("name", ""))):
                problems.append(f"tools[{i}].function.name invalid")
                continue
            if set(fn) - FUNCTION_KEYS:
                problems.append(f"tools[{i}].function has unknown keys {sorted(set(fn) - FUNCTION_KEYS)}")
            if "parameters" in fn and not isinstance(fn["parameters"], dict):
                problems.append(f"tools[{i}].function.parameters is not an object")
            names.append(fn["name"])
        if len(set(names)) != len(names):
            problems.append(f"duplicate tool names {names}")
    for key in ("tool_choice", "parallel_tool_calls"):  # OpenAI: "only allowed when 'tools' are specified"
        if key in body and not names:
            problems.append(f"{key} without tools")
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or choice.get("function", {}).get("name") not in names:
            problems.append(f"tool_choice {choice} names no declared function")
    elif choice is not None and choice not in ("none", "auto", "required"):
        problems.append(f"tool_choice {choice!r}")
    if "stream_options" in body:
        if body.get("stream") is not True:
            problems.append("stream_options without stream: true")
        elif set(body["stream_options"]) - {"include_usage", "include_obfuscation"}:
            problems.append(f"stream_options keys {sorted(body['stream_options'])}")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"{key} {value!r}")
    problems += _message_problems(body.get("messages"), set(names))
    return problems


def _message_problems(messages: Any, names: set[str]) -> list[str]:
    if not isinstance(messages, list) or not messages:
        return ["messages must be a non-empty array"]
    problems: list[str] = []
    awaiting: list[str] = []  # tool_call ids the next messages must answer, in order
    for i, msg in enumerate(messages):
        p = f"messages[{i}]"
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in MESSAGE_KEYS:
            problems.append(f"{p}.role {role!r}")
            continue
        if set(msg) - MESSAGE_KEYS[role]:
            problems.append(f"{p} has keys a {role} message does not take: {sorted(set(msg) - MESSAGE_KEYS[role])}")
        if role == "tool":
            if msg.get("tool_call_id") not in awaiting:
                problems.append(f"{p} answers {msg.get('tool_call_id')!r}, which no assistant message asked for")
            else:
                awaiting.remove(msg["tool_call_id"])
        elif awaiting:
            problems.append(f"{p}: tool calls {awaiting} are not followed by their tool messages")
            awaiting = []
        content = msg.get("content")
        if role == "assistant":
            calls = msg.get("tool_calls") or []
            if content is None and not calls:
                problems.append(f"{p}: assistant message with neither content nor tool_calls")
            if content is not None and not isinstance(content, str):
                problems.append(f"{p}.content is not a string")
            for j, call in enumerate(calls):
                fn = call.get("function") or {}
                if (
                    call.get("type") != "function"
                    or not isinstance(call.get("id"), str)
                    or not isinstance(fn.get("arguments"), str)
                    or not FUNCTION_NAME.match(str(fn.get("name", "")))
                ):
                    problems.append(f"{p}.tool_calls[{j}] malformed: {str(call)[:120]}")
                awaiting.append(call.get("id"))
            continue
        if isinstance(content, str):
            continue
        if not isinstance(content, list) or not content:
            problems.append(f"{p}.content must be a string or a non-empty array")
            continue
        allowed = USER_PARTS if role == "user" else {"text"}
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in allowed:
                problems.append(f"{p}.content[{j}].type {kind!r} in a {role} message")
            elif kind == "image_url" and part["image_url"].get("detail", "auto") not in ("auto", "low", "high"):
                problems.append(f"{p}.content[{j}].image_url.detail {part['image_url']['detail']!r}")
    if awaiting:
        problems.append(f"tool calls {awaiting} are never answered")
    return problems


def test_the_strict_chat_check_catches_what_backends_reject() -> None:
    """The checker itself: each rule fires on a request that breaks it."""
    good = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
    }
    assert strict_chat_problems(good) == []
    broken = [
        {**good, "client_metadata": {}},
        {**good, "input": "hi"},
        {**good, "tools": [{"type": "web_search"}]},
        {**good, "tools": [{"type": "custom", "custom": {"name": "c"}}]},
        {**good, "tools": [{"type": "function", "function": {"name": "a.b"}}]},
        {**good, "tool_choice": {"type": "function", "function": {"name": "g"}}},
        {**good, "tool_choice": "always"},
        {k: v for k, v in good.items() if k != "tools"},
        {**{k: v for k, v in good.items() if k not in ("tools", "tool_choice")}, "parallel_tool_calls": True},
        {**good, "stream": False},
        {**good, "max_tokens": 0},
        {**good, "messages": []},
        {**good, "messages": [{"role": "developer", "content": "x"}]},
        {**good, "messages": [{"type": "additional_tools", "role": "developer", "tools": []}]},
        {**good, "messages": [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}]},
        {
            **good,
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": "original"}}]}
            ],
        },
        {**good, "messages": [{"role": "user", "content": "x", "id": "msg_1"}]},
        {
            **good,
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            ],
        },
        {
            **good,
            "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c9", "content": "r"}],
        },
    ]
    for body in broken:
        assert strict_chat_problems(body), body


# ---------------------------------------------------------------- upstream replies and helpers

USAGE = usage_chunk(7, 1)


def text_reply(text: str = "ok") -> SSEReply:
    return SSEReply(
        chunk({"role": "assistant", "content": ""}) + chunk({"content": text}) + chunk({}, "stop") + USAGE + DONE,
        seed=3,
        max_piece=41,
    )


def calls_reply(*calls: tuple[str, str, str]) -> SSEReply:
    deltas = [
        {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        for i, (cid, name, args) in enumerate(calls)
    ]
    return SSEReply(chunk({"role": "assistant", "tool_calls": deltas}) + chunk({}, "tool_calls") + USAGE + DONE)


def recorded(name: str) -> dict[str, Any]:
    return orjson.loads((FIXTURES / name).read_bytes())


async def send(client: openai.AsyncOpenAI, body: dict[str, Any]) -> Any:
    """POST ``body`` to /v1/responses with the SDK, every key as given (unknown ones through
    ``extra_body``). Streams are read to the end and returned as events. A 5xx is a failure."""
    rest = copy.deepcopy(body)
    model, stream = rest.pop("model"), rest.pop("stream", None)
    try:
        if stream:
            return [e async for e in await client.responses.create(model=model, stream=True, extra_body=rest)]
        kw: dict[str, Any] = {} if stream is None else {"stream": stream}
        return await client.responses.create(model=model, extra_body=rest, **kw)
    except openai.APIStatusError as exc:
        assert exc.status_code < 500, f"crossfeed answered {exc.status_code}: {exc.message}"
        raise


def sent(upstream: FakeUpstream) -> dict[str, Any]:
    """The one chat request the backend received, checked against the strict chat rules."""
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"]
    body = upstream.requests[0].body
    assert strict_chat_problems(body) == []
    return body


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


def expected_tool_names(request: dict[str, Any]) -> list[str]:
    """Chat function names for a Codex request, by the README's rule: function and custom tools
    keep their name, namespace members become ``<namespace>__<member>``, hosted tools are left
    out; tools declared by ``additional_tools`` input items come after ``tools``; a ``tool_search``
    Codex runs itself (``execution: "client"``) is the last function, ``tool_search``."""
    declared = list(request.get("tools") or [])
    for item in request.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            declared += item["tools"]
    names = []
    for tool in declared:
        if tool["type"] in ("function", "custom"):
            names.append(tool["name"])
        elif tool["type"] == "namespace":
            names += [f"{tool['name']}__{m['name']}" for m in tool["tools"] if m["type"] in ("function", "custom")]
    if any(t["type"] == "tool_search" and t.get("execution") == "client" for t in declared):
        names.append("tool_search")
    return names


EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
        "additionalProperties": False,
    },
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
MULTI_AGENT = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "wait_agent",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {"timeout_ms": {"type": "number"}},
                "additionalProperties": False,
            },
        }
    ],
}
WEB_SEARCH = {"type": "web_search", "external_web_access": True, "search_content_types": ["text", "image"]}
TOOL_SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Tool discovery.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
SERVER_TOOL_SEARCH = {**TOOL_SEARCH, "execution": "server"}  # crossfeed searches: offers nothing without deferred tools
IMAGE_GENERATION = {"type": "image_generation", "output_format": "png"}
CODEX_TOOLS = [EXEC, APPLY_PATCH, MULTI_AGENT, TOOL_SEARCH, WEB_SEARCH]
# Codex's tool_search runs in Codex (execution "client"): the backend gets a search function for it
CODEX_TOOL_NAMES = ["exec_command", "apply_patch", "multi_agent_v1__wait_agent", "tool_search"]


def codex_body(**kw: Any) -> dict[str, Any]:
    """The top-level keys every recorded Codex request carries (docs/codex.md, "Top-level keys")."""
    body = {
        "model": "gpt-5.5",
        "stream": True,
        "store": False,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "medium"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a-session",
        "text": {"verbosity": "low"},
        "client_metadata": {"session_id": "019a-session", "x-codex-window-id": "019a-session:0"},
        "input": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex."}],
            },
            {"type": "message", "id": "msg_2", "role": "user", "content": [{"type": "input_text", "text": "say hi"}]},
        ],
    }
    body.update(kw)
    return body


def completed(events: list[Any], captured: list[Captured]) -> Any:
    """The stream ended with response.completed and is the one body that was validated."""
    assert events[-1].type == "response.completed"
    assert validate_captured(captured) == 1
    return events[-1].response


# ---------------------------------------------------------------- recorded Codex requests


@pytest.mark.parametrize("name", RECORDED)
async def test_recorded_codex_request(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured], name: str
) -> None:
    """Every request Codex 0.171.0 was recorded sending (three model families, tool turns,
    reasoning replay, images, additional_tools) reaches the backend as a strict chat request."""
    request = recorded(name)
    upstream.reply(text_reply("hi from the backend"))
    response = completed(await send(client, request), captured)
    assert response.output_text == "hi from the backend"
    body = sent(upstream)
    expected_keys = {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options"}
    expected_keys |= {"reasoning_effort"} if (request.get("reasoning") or {}).get("effort") else set()
    expected_keys |= {"verbosity"} if (request.get("text") or {}).get("verbosity") else set()
    assert set(body) == expected_keys  # client_metadata, include, prompt_cache_key, store, ... not sent
    assert tool_names(body) == expected_tool_names(request)
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is request["parallel_tool_calls"]
    assert body["stream_options"] == {"include_usage": True}
    # Replayed calls use the names their tools were declared under (namespace calls flattened).
    called = [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []]
    assert set(called) <= set(tool_names(body))
    # Every user text Codex sent is in the chat messages (nothing was lost on the way).
    user_texts = [
        p["text"]
        for i in request["input"]
        if i.get("role") == "user"
        for p in i["content"]
        if p["type"] == "input_text"
    ]
    chat_text = orjson.dumps(body["messages"]).decode()
    assert all(orjson.dumps(t).decode()[1:-1] in chat_text for t in user_texts)


# ---------------------------------------------------------------- probe requests


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "input": [], "max_output_tokens": 1, "stream": True},
        {"model": "m", "input": [], "max_output_tokens": 1, "stream": False},
        {"model": "m", "input": [], "max_output_tokens": 1},
        {"model": "m", "max_output_tokens": 1, "stream": True},
        codex_body(input=[], max_output_tokens=1, tools=CODEX_TOOLS),
        codex_body(input=[{"type": "additional_tools", "id": "at_1", "role": "developer", "tools": [MULTI_AGENT]}]),
    ],
    ids=["empty-stream", "empty-nonstream", "empty-default", "no-input", "empty-codex-tools", "only-additional-tools"],
)
async def test_empty_input_probe_is_a_400_naming_input(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, body: dict
) -> None:
    """A probe with nothing to say (ik_llama.cpp#1964's empty-input probe) cannot become a chat
    request: no messages at all. Documented answer (docs/request-mapping.md): 400 `input`."""
    with pytest.raises(openai.BadRequestError) as info:
        await send(client, body)
    assert info.value.status_code == 400
    assert info.value.body["param"] == "input" and info.value.code == "missing_required_parameter"
    assert upstream.requests == []  # the backend never sees it


@pytest.mark.parametrize("text", ["ping", ""])
async def test_one_token_probe_streams_an_incomplete_response(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured], text: str
) -> None:
    """A connectivity probe: minimal input, `max_output_tokens: 1`, streamed, no tools."""
    upstream.reply(SSEReply(chunk({"role": "assistant", "content": "p"}) + chunk({}, "length") + USAGE + DONE))
    events = await send(client, {"model": "m", "input": text, "max_output_tokens": 1, "stream": True})
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert validate_captured(captured) == 1
    body = sent(upstream)
    assert body["messages"] == [{"role": "user", "content": text}]
    assert body["max_tokens"] == 1 and body["max_completion_tokens"] == 1  # max_tokens_field "both"
    assert set(body) == {"model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options"}


async def test_one_token_probe_without_stream(client: openai.AsyncOpenAI, upstream: FakeUpstream) -> None:
    upstream.reply(
        JSONReply(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "p"}}],
            }
        )
    )
    response = await send(client, {"model": "m", "input": "ping", "max_output_tokens": 1})
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    body = sent(upstream)
    assert body["stream"] is False and "stream_options" not in body


async def test_instructions_only_probe_sends_one_system_message(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    upstream.reply(text_reply())
    completed(
        await send(
            client, {"model": "m", "instructions": "Answer OK.", "input": [], "max_output_tokens": 1, "stream": True}
        ),
        captured,
    )
    assert sent(upstream)["messages"] == [{"role": "system", "content": "Answer OK."}]


@pytest.mark.parametrize("tokens", [0, -1])
async def test_zero_output_tokens_is_a_400_naming_it(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, tokens: int
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await send(client, {"model": "m", "input": "ping", "max_output_tokens": tokens, "stream": True})
    assert info.value.body["param"] == "max_output_tokens"
    assert upstream.requests == []


async def test_prewarm_generate_false_is_not_sent_upstream(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    """Codex's WebSocket prewarm carries `generate: false` (router-for-me/CLIProxyAPI#1901: an
    upstream answered "Unsupported parameter: generate"). Over HTTP crossfeed must not pass it on."""
    upstream.reply(text_reply())
    completed(await send(client, codex_body(generate=False, tools=CODEX_TOOLS)), captured)
    body = sent(upstream)
    assert "generate" not in body
    assert tool_names(body) == CODEX_TOOL_NAMES


# ---------------------------------------------------------------- no tools, hosted tools


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"tools": []},
        {"tools": [WEB_SEARCH, SERVER_TOOL_SEARCH]},
        {"tools": [WEB_SEARCH, SERVER_TOOL_SEARCH], "tool_choice": "required"},
        {"tools": [WEB_SEARCH], "tool_choice": {"type": "web_search"}},
        {"tools": [SERVER_TOOL_SEARCH], "tool_choice": {"type": "image_generation"}},
        {"tools": [{"type": "namespace", "name": "ns", "tools": [WEB_SEARCH]}]},
    ],
    ids=[
        "no-tools-key",
        "empty-tools",
        "only-hosted",
        "hosted-required",
        "hosted-choice-web-search",
        "hosted-choice-image-generation",
        "namespace-of-hosted",
    ],
)
async def test_stream_without_function_tools(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured], extra: dict
) -> None:
    """Codex always sends `tool_choice: "auto"` and `parallel_tool_calls`; with no function tool
    left (responses-lite names have no `tools` key; hosted tools are dropped) neither may reach
    the backend: OpenAI rejects both without `tools`."""
    upstream.reply(text_reply())
    response = completed(await send(client, codex_body(**extra)), captured)
    assert response.output_text == "ok"
    body = sent(upstream)
    assert set(body) == {"model", "messages", "stream", "stream_options", "reasoning_effort", "verbosity"}
    assert body["messages"] == [{"role": "system", "content": "You are Codex."}, {"role": "user", "content": "say hi"}]


@pytest.mark.parametrize(
    "hosted",
    [
        WEB_SEARCH,
        {"type": "web_search", "external_web_access": True},
        {"type": "web_search_preview", "search_context_size": "low"},
        SERVER_TOOL_SEARCH,  # Codex's own (execution "client") is offered: test_tool_choice_shapes
        # image_generation is not left out: crossfeed runs it on its [images] backend, or answers
        # 400 naming it when it has none (below, and tests/integration/test_image_generation.py)
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        # {"type": "mcp", ...} is not left out: crossfeed runs it, or answers 400 for a server the
        # operator did not allow (tests/integration/test_mcp.py)
        {"type": "local_shell"},
        {"type": "shell"},
        {"type": "apply_patch"},
        {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"},
        {"type": "namespace", "name": "mixed", "tools": [WEB_SEARCH, IMAGE_GENERATION]},
    ],
    ids=lambda t: t["type"] + ("-" + t["name"] if "name" in t and t["type"] == "namespace" else ""),
)
async def test_hosted_tool_is_left_out(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured], hosted: dict
) -> None:
    upstream.reply(text_reply())
    completed(await send(client, codex_body(tools=[EXEC, hosted])), captured)
    body = sent(upstream)
    assert tool_names(body) == ["exec_command"]
    assert not any(t["type"] in HOSTED_TOOL_TYPES - {"custom"} for t in body["tools"])
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True


async def test_image_generation_without_an_images_backend_is_a_400(
    client: openai.AsyncOpenAI, upstream: FakeUpstream
) -> None:
    """Codex's image_generation tool on a crossfeed with no [images] backend: refused, naming
    the tool, never dropped silently (the user would get text where they asked for an image)."""
    with pytest.raises(openai.BadRequestError) as info:
        await send(client, codex_body(tools=[EXEC, IMAGE_GENERATION]))
    body = info.value.body
    assert isinstance(body, dict) and body["param"] == "tools[1]" and body["code"] == "image_generation_not_configured"
    assert upstream.requests == []


# ---------------------------------------------------------------- tool_choice shapes


@pytest.mark.parametrize(
    "choice, expected, names",
    [
        ("auto", "auto", CODEX_TOOL_NAMES),
        ("required", "required", CODEX_TOOL_NAMES),
        ("none", "none", CODEX_TOOL_NAMES),
        (
            {"type": "function", "name": "exec_command"},
            {"type": "function", "function": {"name": "exec_command"}},
            CODEX_TOOL_NAMES,
        ),
        (
            {"type": "custom", "name": "apply_patch"},
            {"type": "function", "function": {"name": "apply_patch"}},
            CODEX_TOOL_NAMES,
        ),
        (
            {"type": "function", "name": "wait_agent", "namespace": "multi_agent_v1"},
            {"type": "function", "function": {"name": "multi_agent_v1__wait_agent"}},
            CODEX_TOOL_NAMES,
        ),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}],
            },
            "required",
            ["exec_command"],
        ),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "custom", "name": "apply_patch"}]},
            "auto",
            ["apply_patch"],
        ),
        ({"type": "web_search"}, "auto", CODEX_TOOL_NAMES),
        ({"type": "image_generation"}, "auto", CODEX_TOOL_NAMES),
        ({"type": "tool_search"}, "auto", CODEX_TOOL_NAMES),
    ],
    ids=[
        "auto",
        "required",
        "none",
        "function",
        "custom",
        "namespaced",
        "allowed-required",
        "allowed-custom",
        "hosted-web-search",
        "hosted-image-generation",
        "hosted-tool-search",
    ],
)
async def test_tool_choice_shapes(
    client: openai.AsyncOpenAI,
    upstream: FakeUpstream,
    captured: list[Captured],
    choice: Any,
    expected: Any,
    names: list[str],
) -> None:
    upstream.reply(text_reply())
    completed(await send(client, codex_body(tools=CODEX_TOOLS, tool_choice=choice)), captured)
    body = sent(upstream)
    assert body["tool_choice"] == expected
    assert tool_names(body) == names


@pytest.mark.parametrize(
    "choice, param",
    [
        ({"type": "function", "name": "not_declared"}, "tool_choice.name"),
        ({"type": "custom", "name": "wait_agent"}, "tool_choice.name"),  # a namespace member needs its namespace
        ("always", "tool_choice"),
        ({"type": "allowed_tools", "mode": "any", "tools": []}, "tool_choice.mode"),
    ],
)
async def test_tool_choice_that_cannot_be_kept_is_a_400(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, choice: Any, param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await send(client, codex_body(tools=CODEX_TOOLS, tool_choice=choice))
    assert info.value.body["param"] == param
    assert upstream.requests == []


# ---------------------------------------------------------------- additional_tools input items

LITE_TOOLS = {
    "type": "additional_tools",
    "id": "at_01",
    "role": "developer",
    "tools": [
        {
            "type": "namespace",
            "name": "functions",
            "description": "Code mode.",
            "tools": [
                {
                    "type": "custom",
                    "name": "exec",
                    "description": "Run JavaScript.",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "start: SOURCE\nSOURCE: /[\\s\\S]+/"},
                },
                {
                    "type": "function",
                    "name": "wait",
                    "strict": False,
                    "parameters": {
                        "type": "object",
                        "properties": {"cell_id": {"type": "string"}},
                        "required": ["cell_id"],
                        "additionalProperties": False,
                    },
                },
            ],
        },
        {
            "type": "namespace",
            "name": "clock",
            "description": "Time.",
            "tools": [
                {
                    "type": "function",
                    "name": "sleep",
                    "strict": False,
                    "parameters": {
                        "type": "object",
                        "properties": {"duration_ms": {"type": "number"}},
                        "required": ["duration_ms"],
                        "additionalProperties": False,
                    },
                }
            ],
        },
        WEB_SEARCH,
    ],
}


async def test_additional_tools_item_declares_tools_and_calls_come_back_namespaced(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    """Responses-lite Codex names send no `tools`: an `additional_tools` input item declares them.
    The item is not a message; its tools become chat functions; calls come back with the member
    name and the `namespace` Codex matches on (docs/codex.md, "Calls Codex accepts")."""
    request = codex_body(
        model="gpt-6-sol", parallel_tool_calls=False, reasoning={"effort": "medium", "context": "all_turns"}
    )
    request["input"] = [LITE_TOOLS, *request["input"]]
    upstream.reply(
        calls_reply(
            ("call_a", "functions__exec", '{"input": "console.log(1)\\n"}'),
            ("call_b", "clock__sleep", '{"duration_ms": 5}'),
        )
    )
    response = completed(await send(client, request), captured)
    body = sent(upstream)
    assert tool_names(body) == ["functions__exec", "functions__wait", "clock__sleep"]
    assert tool_names(body) == expected_tool_names(request)
    assert body["messages"] == [{"role": "system", "content": "You are Codex."}, {"role": "user", "content": "say hi"}]
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is False
    calls = [(o.type, o.namespace, o.name) for o in response.output]
    assert calls == [("custom_tool_call", "functions", "exec"), ("function_call", "clock", "sleep")]
    assert response.output[0].input == "console.log(1)\n"


async def test_additional_tools_next_to_tools_are_merged(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    request = codex_body(tools=[EXEC, WEB_SEARCH])
    request["input"] = [LITE_TOOLS, *request["input"]]
    upstream.reply(text_reply())
    completed(await send(client, request), captured)
    assert tool_names(sent(upstream)) == ["exec_command", "functions__exec", "functions__wait", "clock__sleep"]


# ---------------------------------------------------------------- replayed hosted-tool items


async def test_replayed_hosted_tool_items_never_reach_the_backend(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    """A history from a session with OpenAI's hosted tools carries their call items; a chat
    backend has no message for them, so they are left out (the answer text around them stays)."""
    request = codex_body(tools=[EXEC, WEB_SEARCH])
    request["input"] += [
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "weather oslo"},
        },
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBORw0KGgo="},
        {
            "type": "message",
            "id": "msg_3",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "It is sunny.", "annotations": [], "logprobs": []}],
        },
        {"type": "message", "id": "msg_4", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
    ]
    upstream.reply(text_reply())
    completed(await send(client, request), captured)
    assert sent(upstream)["messages"] == [
        {"role": "system", "content": "You are Codex."},
        {"role": "user", "content": "say hi"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "thanks"},
    ]


# ---------------------------------------------------------------- view_image output (an image in a tool result)

PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


async def test_view_image_output_with_original_detail(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    """Codex's `view_image` tool answers with an image part (`detail: "original"`, as Codex sends
    for images). Chat tool messages take text only and `detail` has no "original": the image
    moves to a user message after the tool message, with a detail chat knows."""
    view_image = {
        "type": "function",
        "name": "view_image",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    }
    request = codex_body(tools=[EXEC, view_image, WEB_SEARCH])
    request["input"] += [
        {
            "type": "function_call",
            "status": "completed",
            "id": "fc_1",
            "name": "view_image",
            "arguments": '{"path": "pixel.png"}',
            "call_id": "call_v",
        },
        {
            "type": "function_call_output",
            "id": "fco_1",
            "call_id": "call_v",
            "output": [{"type": "input_image", "image_url": PIXEL, "detail": "original"}],
        },
    ]
    upstream.reply(text_reply("a white pixel"))
    completed(await send(client, request), captured)
    messages = sent(upstream)["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[3]["tool_call_id"] == "call_v" and isinstance(messages[3]["content"], str)
    assert messages[4]["content"] == [{"type": "image_url", "image_url": {"url": PIXEL, "detail": "high"}}]


# ---------------------------------------------------------------- known gap

LONG_NAMESPACE = {
    "type": "namespace",
    "name": "mcp__google_workspace__",
    "description": "MCP server.",
    "tools": [
        {
            "type": "function",
            "name": "list_calendar_event_attendees_with_response_status",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {"event_id": {"type": "string"}},
                "required": ["event_id"],
                "additionalProperties": False,
            },
        }
    ],
}


async def test_flattened_namespace_names_fit_the_chat_name_limit(
    client: openai.AsyncOpenAI, upstream: FakeUpstream, captured: list[Captured]
) -> None:
    """A joined name over 64 characters is shortened for the backend (it was sent as 73), and a
    call to the short name comes back as the member of its namespace; replaying that call in
    the next turn uses the same short name."""
    upstream.reply(text_reply())
    completed(await send(client, codex_body(tools=[EXEC, LONG_NAMESPACE])), captured)
    body = upstream.requests[0].body
    names = [t["function"]["name"] for t in body["tools"]]
    assert all(FUNCTION_NAME.match(name) for name in names), names
    short = next(n for n in names if n.startswith("mcp__google_workspace__"))
    assert len(short) <= 64 and short != "mcp__google_workspace__list_calendar_event_attendees_with_response_status"
    captured.clear()
    upstream.reply(calls_reply(("call_1", short, '{"event_id":"e1"}')))
    response = completed(await send(client, codex_body(tools=[EXEC, LONG_NAMESPACE])), captured)
    call = next(item for item in response.output if item.type == "function_call")
    assert (call.name, call.namespace, call.arguments) == (
        "list_calendar_event_attendees_with_response_status",
        "mcp__google_workspace__",
        '{"event_id":"e1"}',
    )
    captured.clear()
    upstream.reply(text_reply())
    replay = codex_body(
        tools=[EXEC, LONG_NAMESPACE],
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "who comes?"}]},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": call.name,
                "namespace": call.namespace,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "two people"},
        ],
    )
    completed(await send(client, replay), captured)
    assistant = next(m for m in upstream.requests[-1].body["messages"] if m.get("tool_calls"))
    assert assistant["tool_calls"][0]["function"]["name"] == short
