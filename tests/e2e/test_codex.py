"""The real Codex CLI through crossfeed, in front of a fake chat-only backend that streams.

Codex (pinned in .ci/install-codex.sh) runs non-interactively (``codex exec``) with a throwaway
CODEX_HOME; everything it could reach outside is switched off (tests/e2e/codex_support.py). Every
scenario runs in both of Codex's configurations:

- ``provider``: a ``[model_providers]`` block pointing at crossfeed (``wire_api = "responses"``):
  HTTP and SSE only;
- ``openai_base_url``: only the base URL of the built-in provider changed, the setup most users
  have. That provider speaks WebSocket mode: a ``generate: false`` prewarm, then every request of
  the session as a frame on one socket, chained with ``previous_response_id`` (docs/codex.md).
  Each scenario must then run over the socket from start to end: no "Reconnecting" line, no
  "Falling back" line, no ``POST /v1/responses`` at all.

The fake backend plays the model: replies are scripted, and the ones after a tool call are
computed from the tool output crossfeed delivered, so a passing test proves the whole round trip.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from crossfeed.proxy.http.websocket import ROUTE
from crossfeed.proxy.runtime.config import load_config
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.translators.forward.compaction import COMPACTION_PROMPT, is_summary
from crossfeed.translators.ids import SequentialIds
from tests.e2e import codex_support as cx
from tests.fakes.search import FakeSearch
from tests.fakes.upstream import FakeUpstream, JSONReply, Recorded, SSEReply
from tests.support.app_server import running_proxy
from tests.support.chat_chunks import DONE, chunk, usage_chunk

pytestmark = [pytest.mark.codex, pytest.mark.timeout(300)]


codex_bin = pytest.fixture(autouse=True)(cx.codex_binary_or_skip)

USAGE = usage_chunk(100, 20)


def text(answer: str, reasoning: str = "") -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    if reasoning:
        body += chunk({"reasoning_content": reasoning})
    words = answer.split(" ")
    for i, w in enumerate(words):
        body += chunk({"content": w + (" " if i < len(words) - 1 else "")})
    return SSEReply(body + chunk({}, "stop") + USAGE + DONE, max_piece=23)


def calls(*specs: tuple[str, str, dict], reasoning: str = "") -> SSEReply:
    body = chunk({"role": "assistant", "content": ""})
    if reasoning:
        for piece in reasoning.split(" "):
            body += chunk({"reasoning_content": piece + " "})
    for index, (call_id, name, args) in enumerate(specs):
        raw = orjson.dumps(args).decode()
        body += chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": raw[:7]},
                    }
                ]
            }
        )
        for k in range(7, len(raw), 9):
            body += chunk({"tool_calls": [{"index": index, "function": {"arguments": raw[k : k + 9]}}]})
    return SSEReply(body + chunk({}, "tool_calls") + USAGE + DONE, max_piece=31)


def tool_outputs(req: Recorded) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in req.body["messages"] if m.get("role") == "tool"}


@pytest.fixture(params=["provider", "openai_base_url"])
def setup(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def run_codex(
    proxy, tmp_path: Path, prompt: str, setup: str, *, model: str = cx.FALLBACK_MODEL, extra: dict | None = None
):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir(exist_ok=True)
    write = cx.write_codex_home if setup == "provider" else cx.write_codex_home_builtin
    env = write(home, base_url=proxy.base_url, model=model, extra=extra)
    proc = await asyncio.to_thread(cx.run_codex_exec, prompt, cwd=work, env=env, timeout=180)
    return proc, cx.parse_events(proc.stdout), work


def requests_on(proxy, route: str, status: str | None = None) -> int:
    """Requests (WebSocket turns, for the WebSocket route) the proxy counted on ``route``."""
    total = 0.0
    for metric in proxy.app[METRICS].registry.collect():
        if metric.name == "crossfeed_requests":
            total += sum(
                s.value
                for s in metric.samples
                if s.name.endswith("_total") and s.labels["route"] == route and status in (None, s.labels["status"])
            )
    return int(total)


def check_transport(proxy, proc, setup: str, upstream_calls: int) -> None:
    """``provider``: every backend call was a POST. ``openai_base_url``: every one was a
    WebSocket turn (plus Codex's ``generate: false`` prewarm), with no retry and no fallback."""
    if setup == "provider":
        assert requests_on(proxy, "/v1/responses") == upstream_calls and requests_on(proxy, ROUTE) == 0
        return
    out = proc.stdout + proc.stderr
    assert "Reconnecting" not in out and "Falling back" not in out, out[-3000:]
    assert requests_on(proxy, "/v1/responses") == 0
    assert requests_on(proxy, ROUTE) == upstream_calls + 1


async def test_plain_answer(proxy, upstream: FakeUpstream, tmp_path: Path, setup: str) -> None:
    upstream.reply(text("Hello from a chat-only backend.", reasoning="The user greets me."))
    proc, events, _ = await run_codex(proxy, tmp_path, "say hi", setup)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Hello from a chat-only backend."
    sent = upstream.requests[0].body
    assert sent["stream"] is True and sent["messages"][0]["role"] == "system"
    assert all(m["role"] != "developer" for m in sent["messages"])
    assert "generate" not in sent
    check_transport(proxy, proc, setup, 1)


async def test_shell_command_and_answer_using_its_output(
    proxy, upstream: FakeUpstream, tmp_path: Path, setup: str
) -> None:
    upstream.reply(
        calls(("call_sh", "exec_command", {"cmd": "echo crossfeed-$((6*7))"})),
        lambda req: text(f"The command printed {tool_outputs(req)['call_sh'].split('crossfeed-')[1][:2]}."),
    )
    proc, events, _ = await run_codex(proxy, tmp_path, "run the command", setup)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any("crossfeed-42" in c.get("aggregated_output", "") for c in cx.command_executions(events))
    assert cx.agent_messages(events)[-1] == "The command printed 42."
    # the second request continues the first (over a socket: previous_response_id and the
    # call's output only); the backend got the whole conversation either way
    second = upstream.requests[1].body["messages"]
    assert second[0]["role"] == "system" and any(m.get("tool_calls") for m in second)
    check_transport(proxy, proc, setup, 2)


async def test_reasoning_then_tool_call_is_replayed(proxy, upstream: FakeUpstream, tmp_path: Path, setup: str) -> None:
    upstream.reply(
        calls(("call_r", "exec_command", {"cmd": "echo ok"}), reasoning="I should run echo first."), text("Done.")
    )
    proc, _events, _ = await run_codex(proxy, tmp_path, "think, then run echo", setup)
    assert proc.returncode == 0, proc.stderr[-2000:]
    second = upstream.requests[1].body["messages"]
    assistant = next(m for m in second if m.get("tool_calls"))
    assert assistant["reasoning_content"].strip() == "I should run echo first."
    assert assistant["tool_calls"][0]["id"] == "call_r"
    assert tool_outputs(upstream.requests[1])["call_r"]
    check_transport(proxy, proc, setup, 2)


async def test_two_parallel_tool_calls(proxy, upstream: FakeUpstream, tmp_path: Path, setup: str) -> None:
    upstream.reply(
        calls(("call_a", "exec_command", {"cmd": "echo alpha"}), ("call_b", "exec_command", {"cmd": "echo beta"})),
        lambda req: text(
            "Got " + " and ".join("alpha" if "alpha" in out else "beta" for out in tool_outputs(req).values()) + "."
        ),
    )
    proc, events, _ = await run_codex(proxy, tmp_path, "run both", setup)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Got alpha and beta."
    second = upstream.requests[1].body["messages"]
    assistant = next(m for m in second if m.get("tool_calls"))
    assert [tc["id"] for tc in assistant["tool_calls"]] == ["call_a", "call_b"]
    check_transport(proxy, proc, setup, 2)


async def test_apply_patch_through_the_custom_tool(proxy, upstream: FakeUpstream, tmp_path: Path, setup: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello world\n")
    patch = (
        '*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello world\n+hello "crossfeed" \u00e9\n'
        "*** Add File: new.txt\n+created through a chat backend\n*** End Patch\n"
    )
    upstream.reply(calls(("call_p", "apply_patch", {"input": patch})), text("Patched."))
    proc, _events, _ = await run_codex(proxy, tmp_path, "edit hello.txt", setup, model=cx.APPLY_PATCH_MODEL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / "hello.txt").read_text() == 'hello "crossfeed" \u00e9\n'
    assert (work / "new.txt").read_text() == "created through a chat backend\n"
    tool = next(t for t in upstream.requests[0].body["tools"] if t["function"]["name"] == "apply_patch")
    assert tool["function"]["parameters"]["required"] == ["input"]
    assert "Begin Patch" in tool["function"]["description"]  # the grammar travels in the description
    assert tool_outputs(upstream.requests[1])["call_p"]
    check_transport(proxy, proc, setup, 2)


async def test_upstream_error_is_shown(proxy, upstream: FakeUpstream, tmp_path: Path, setup: str) -> None:
    upstream.reply(
        JSONReply(
            {
                "error": {
                    "message": "context too long for model qwen-test",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": None,
                }
            },
            status=400,
        )
    )
    proc, _events, _ = await run_codex(proxy, tmp_path, "hello", setup)
    assert proc.returncode != 0
    assert any("context too long for model qwen-test" in m for m in cx.error_messages(proc))
    check_transport(proxy, proc, setup, 1)
    assert len(upstream.requests) == 1  # a 400, in-band or not, is not retried


def shell_steps(req: Recorded) -> SSEReply:
    """A model that runs two commands, one per request, then answers; it reads what is done from
    the tool outputs and from the summary of a compaction (what replaces them after one). Every
    call reports a large usage, so Codex's low auto-compact limit is passed at each step."""
    messages = req.body["messages"]
    if messages[-1] == {"role": "user", "content": COMPACTION_PROMPT}:
        seen = [str(m["content"]) for m in messages if m["role"] in ("tool", "user")]
        done = [w for w in ("alpha-42", "beta-42") if any(w in text for text in seen)]
        return text("Handoff: commands already run printed " + (" and ".join(done) or "nothing") + ".")
    known = " ".join(str(m["content"]) for m in messages if m["role"] == "tool" or is_summary(m))
    for step, cmd in (("alpha-42", "echo alpha-$((6*7))"), ("beta-42", "echo beta-$((6*7))")):
        if step not in known:
            reply = calls((f"call_{step[:4]}", "exec_command", {"cmd": cmd}))
            reply.data = reply.data.replace(b'"total_tokens":120', b'"total_tokens":5000')
            return reply
    return text("Both commands ran: alpha-42 and beta-42.")


async def test_long_task_compacts_remotely_and_finishes(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    """The built-in provider with a low ``model_auto_compact_token_limit`` compacts remotely
    (a ``compaction_trigger`` request) between the steps of one task; crossfeed asks the backend
    for a summary and answers with one sealed compaction item, and the requests after it carry
    the summary instead of the history it replaced."""
    upstream.default = shell_steps
    proc, events, _ = await run_codex(
        proxy,
        tmp_path,
        "run the two commands, then tell me what they printed",
        "openai_base_url",
        extra={"model_auto_compact_token_limit": 200},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert cx.agent_messages(events)[-1] == "Both commands ran: alpha-42 and beta-42."
    assert "compact" not in " ".join(cx.error_messages(proc)).lower(), out[-3000:]
    bodies = [r.body["messages"] for r in upstream.requests]
    asked = [i for i, m in enumerate(bodies) if m[-1] == {"role": "user", "content": COMPACTION_PROMPT}]
    assert asked, "the backend was never asked for a summary"
    after = bodies[asked[0] + 1]
    assert after[-1]["content"] != COMPACTION_PROMPT and any(is_summary(x) for x in after)
    assert not any(x.get("tool_call_id") == "call_alph" for x in after)  # the history it replaced is gone
    assert all(m["role"] != "system" for msgs in bodies for m in msgs[1:])  # templates' "system first"
    assert requests_on(proxy, "/v1/responses") == 0 and "Reconnecting" not in out


@pytest.fixture
async def search_proxy(upstream: FakeUpstream, tmp_path: Path):
    """crossfeed with hosted web search on a fake SearXNG (tests/fakes/search.py)."""
    fake = FakeSearch(
        pages={"*": [(RUST_URL, "Announcing Rust 1.80.0", "Rust 1.80.0 stabilises LazyCell and LazyLock.")]}
    )
    await fake.start()
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": upstream.base_url,
            "store.data_dir": str(tmp_path / "data"),
            "web_search.backend": "searxng",
            "web_search.url": fake.url,
        },
    )
    async with running_proxy(config, ids=SequentialIds(), clock=lambda: 1_700_000_000) as handle:
        yield handle, fake
    await fake.close()


RUST_URL = "https://blog.rust-lang.org/2024/07/25/Rust-1.80.0.html"


def rollout_items(home: Path) -> list[dict]:
    """The response items of every session rollout Codex wrote under ``home``."""
    items = []
    for path in sorted(home.glob("sessions/**/*.jsonl")):
        for line in path.read_text().splitlines():
            entry = orjson.loads(line)
            if entry.get("type") == "response_item":
                items.append(entry["payload"])
    return items


async def test_live_web_search_runs_inside_the_response(search_proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    """The built-in provider with ``web_search = "live"``: Codex declares the hosted tool;
    crossfeed offers the backend a search function, runs the search on SearXNG inside the
    Response, and Codex records the ``web_search_call`` item and shows the answer."""
    proxy, search = search_proxy

    def model(req: Recorded) -> SSEReply:
        last = req.body["messages"][-1]
        if last["role"] == "tool":
            found = "LazyCell" if "LazyCell" in last["content"] else "nothing"
            return text(f"The search says Rust 1.80 stabilised {found}: [the announcement]({RUST_URL}).")
        return calls(("call_ws", "web_search", {"query": "rust 1.80 release notes"}))

    upstream.default = model
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = cx.write_codex_home_builtin(
        home, base_url=proxy.base_url, model=cx.FALLBACK_MODEL, extra={"web_search": "live"}
    )
    proc = await asyncio.to_thread(
        cx.run_codex_exec, "what is new in rust 1.80? search the web", cwd=work, env=env, timeout=180, ephemeral=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = cx.parse_events(proc.stdout)
    assert "stabilised LazyCell" in cx.agent_messages(events)[-1]
    assert [r.query["q"] for r in search.requests] == ["rust 1.80 release notes"]
    first = upstream.requests[0].body
    assert any(t["function"]["name"] == "web_search" for t in first["tools"])
    searched = [i for i in rollout_items(home) if i.get("type") == "web_search_call"]
    assert searched and searched[0]["action"]["query"] == "rust 1.80 release notes", rollout_items(home)[-5:]
    assert searched[0]["status"] == "completed"
    assert requests_on(proxy, "/v1/responses") == 0  # all of it over the socket


async def test_standalone_web_search_for_a_custom_provider(
    search_proxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A provider with ``supports_standalone_web_search``: Codex gives the model ``web.run`` and
    runs it through ``POST /v1/alpha/search``, which crossfeed answers from SearXNG."""
    proxy, search = search_proxy

    def model(req: Recorded) -> SSEReply:
        last = req.body["messages"][-1]
        if last["role"] == "tool":
            return text("Found: " + ("LazyCell" if "LazyCell" in last["content"] else "nothing") + ".")
        return calls(
            ("call_run", "web__run", {"search_query": [{"q": "rust 1.80"}], "open": [{"ref_id": "turn0search0"}]})
        )

    upstream.default = model
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = cx.write_codex_home(
        home,
        base_url=proxy.base_url,
        model=cx.FALLBACK_MODEL,
        web_search="live",
        extra={
            "model_providers": {cx.PROVIDER_ID: {"supports_standalone_web_search": True}},
            "features": {"standalone_web_search": True},
            "suppress_unstable_features_warning": True,
        },
    )
    proc = await asyncio.to_thread(cx.run_codex_exec, "search the web for rust 1.80", cwd=work, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cx.agent_messages(cx.parse_events(proc.stdout))[-1] == "Found: LazyCell."
    assert [r.query["q"] for r in search.requests] == ["rust 1.80"]
    assert requests_on(proxy, "/v1/alpha/search") == 1
    result = next(m for m in upstream.requests[1].body["messages"] if m["role"] == "tool")["content"]
    assert "turn0search0" in result and RUST_URL in result and "does not fetch the page" in result


@pytest.mark.parametrize("proxy_overrides", [{"server.websocket": False}])
async def test_websocket_off_falls_back_to_http_at_once(proxy, upstream: FakeUpstream, tmp_path: Path) -> None:
    """``[server] websocket = false``: the upgrade gets 426 and the built-in provider uses HTTP
    from the start, with no "Reconnecting" lines."""
    assert proxy.config.server.websocket is False
    upstream.reply(text("Hello over HTTP."))
    proc, events, _ = await run_codex(proxy, tmp_path, "say hi", "openai_base_url")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(events)[-1] == "Hello over HTTP."
    out = proc.stdout + proc.stderr
    assert "Reconnecting" not in out and "Falling back" not in out, out[-3000:]
    assert requests_on(proxy, "/v1/responses", "426") >= 1  # the upgrade, refused
    assert requests_on(proxy, "/v1/responses", "200") == 1 and requests_on(proxy, ROUTE) == 0


@pytest.fixture
async def catalog_proxy(upstream: FakeUpstream, tmp_path: Path):
    toml = tmp_path / "crossfeed.toml"
    toml.write_text('[codex_models."qwen3-coder-local"]\ncontext_window = 40960\n')
    config = load_config(toml, {}, {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path / "d")})
    async with running_proxy(config, ids=SequentialIds(), clock=lambda: 1_700_000_000) as handle:
        yield handle


async def test_model_catalog_gives_a_local_model_apply_patch_and_its_context_window(
    catalog_proxy, upstream: FakeUpstream, tmp_path: Path
) -> None:
    """``model_catalog_url`` pointed at crossfeed's ``GET /v1/models``: for a model name Codex does
    not know, and no ``model_map`` to one it does, Codex offers ``apply_patch`` as a custom tool
    and takes the context window from the catalog (its rollout records it)."""

    def by_path(req: Recorded) -> JSONReply | SSEReply:  # crossfeed lists the backend's models too
        if req.path.endswith("/models"):
            return JSONReply({"object": "list", "data": [{"id": "qwen3-coder-local", "object": "model"}]})
        return text("Catalog read.")

    upstream.default = by_path
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    env = cx.write_codex_home(
        home,
        base_url=catalog_proxy.base_url,
        model="qwen3-coder-local",
        extra={"model_providers": {cx.PROVIDER_ID: {"model_catalog_url": catalog_proxy.base_url + "/models"}}},
    )
    proc = await asyncio.to_thread(cx.run_codex_exec, "say hi", cwd=work, env=env, timeout=180, ephemeral=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert cx.agent_messages(cx.parse_events(proc.stdout))[-1] == "Catalog read."
    sent = next(r.body for r in upstream.requests if r.path.endswith("/chat/completions"))
    tools = {t["function"]["name"] for t in sent["tools"]}
    assert "apply_patch" in tools  # a custom (freeform) tool, wrapped as a chat function
    rollout = "".join(p.read_text() for p in (home / "sessions").rglob("*.jsonl"))
    # Codex keeps 95% of a catalog window as the effective one (40960 -> 38912)
    assert f'"model_context_window":{40960 * 95 // 100}' in rollout.replace(" ", "")
    assert "not found" not in proc.stderr  # no "Model metadata for ... not found" fallback


async def test_a_codex_session_logs_no_5xx(upstream: FakeUpstream, tmp_path: Path, setup: str) -> None:
    """Codex never sends a WebSocket close frame: it drops the connection when its session ends.
    Every summary line of a whole session (a tool round trip) stays below 500, and over the socket
    the socket's own line is 101 with ``ending: client_disconnected``."""
    import io
    import json

    import structlog

    from crossfeed.proxy.runtime.logs import configure_logging

    buf = io.StringIO()
    configure_logging("info", "json", stream=buf)
    try:
        async with running_proxy(
            {"upstream.base_url": upstream.base_url, "store.data_dir": str(tmp_path / "data")}, ids=SequentialIds()
        ) as proxy:
            upstream.reply(calls(("call_sh", "exec_command", {"cmd": "echo logged"})), lambda req: text("Ran it."))
            proc, events, _ = await run_codex(proxy, tmp_path, "run echo", setup)
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert cx.agent_messages(events)[-1] == "Ran it."

            def lines() -> list[dict]:
                return [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]

            if setup == "openai_base_url":
                for _ in range(300):  # the socket's line comes once crossfeed sees the connection gone
                    if any(e.get("event") == "websocket.closed" for e in lines()):
                        break
                    await asyncio.sleep(0.05)
    finally:
        structlog.reset_defaults()
    summary = [e for e in lines() if e.get("event") in ("request.completed", "websocket.closed")]
    assert summary and not [e for e in summary if e["status"] >= 500], summary
    assert not [e for e in lines() if e.get("level") in ("error", "critical")], lines()
    if setup == "openai_base_url":
        (closed,) = [e for e in summary if e["event"] == "websocket.closed"]
        assert closed["status"] == 101 and closed["ending"] in ("client_disconnected", "closed"), closed
        assert closed["turns"] >= 2


async def test_mcp_tools_load_through_codexs_own_tool_search(
    proxy, upstream: FakeUpstream, tmp_path: Path, setup: str, mcp_urls: dict[str, str]
) -> None:
    """Codex 0.171 with an MCP server and a model whose catalog entry has
    ``supports_search_tool`` (``gpt-5.5``) declares none of the server's tools: it names their
    namespace (``mcp__fake``) in a developer message and declares ``tool_search`` with
    ``execution: "client"``. The backend gets a ``tool_search`` function; the model's call to it
    reaches Codex as a ``tool_search_call``, Codex searches and sends the ``tool_search_output``,
    whose tools crossfeed then offers; the model calls one, Codex calls the MCP server, and the
    model answers from the result."""
    from tests.fakes.mcp_server import TEST_TOKEN

    def model(req: Recorded) -> SSEReply:
        offered = [t["function"]["name"] for t in req.body.get("tools") or ()]
        outputs = tool_outputs(req)
        if len(upstream.requests) > 4:  # without the bridge the search loops: fail fast, not at the timeout
            return text("Gave up.")
        if "call_add" in outputs:
            return text("The MCP server says " + ("42" if "42" in outputs["call_add"] else "nothing") + ".")
        if "mcp__fake__add" in offered:
            return calls(("call_add", "mcp__fake__add", {"a": 20, "b": 22}))
        return calls(("call_find", "tool_search", {"query": "add two integers"}))

    upstream.default = model
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    server = {"url": mcp_urls["http"], "http_headers": {"Authorization": f"Bearer {TEST_TOKEN}"}}
    write = cx.write_codex_home if setup == "provider" else cx.write_codex_home_builtin
    env = write(home, base_url=proxy.base_url, model=cx.APPLY_PATCH_MODEL, extra={"mcp_servers": {"fake": server}})
    proc = await asyncio.to_thread(
        cx.run_codex_exec, "add 20 and 22 with the MCP tool", cwd=work, env=env, timeout=180, ephemeral=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = cx.parse_events(proc.stdout)
    assert cx.agent_messages(events)[-1] == "The MCP server says 42."
    mcp_calls = [
        e["item"] for e in events if e.get("type") == "item.completed" and e["item"]["type"] == "mcp_tool_call"
    ]
    assert [(c["server"], c["tool"], c["status"]) for c in mcp_calls] == [("fake", "add", "completed")]

    first, second, third = (r.body for r in upstream.requests)
    names = [t["function"]["name"] for t in first["tools"]]
    assert names[-1] == "tool_search" and not any(n.startswith("mcp__fake") for n in names)
    assert first["tools"][-1]["function"]["description"].startswith("# Tool discovery")
    assert "mcp__fake" in orjson.dumps(first["messages"]).decode()  # Codex names the namespace
    revealed = [t["function"]["name"] for t in second["tools"]]
    assert "mcp__fake__add" in revealed and revealed[-1] == "tool_search"
    assert revealed[: len(names) - 1] == names[:-1]  # the request's own tools first, as before
    search = next(m for m in second["messages"] if m.get("tool_calls"))
    assert [c["function"]["name"] for c in search["tool_calls"]] == ["tool_search"]
    assert "mcp__fake__add" in tool_outputs(upstream.requests[1])["call_find"]
    assert "42" in tool_outputs(upstream.requests[2])["call_add"]
    assert "mcp__fake__add" in [t["function"]["name"] for t in third["tools"]]

    items = rollout_items(home)
    (searched,) = [i for i in items if i.get("type") == "tool_search_call"]
    assert searched["execution"] == "client" and searched["arguments"] == {"query": "add two integers"}
    (loaded,) = [i for i in items if i.get("type") == "tool_search_output"]
    assert loaded["execution"] == "client" and loaded["call_id"] == searched["call_id"] == "call_find"
    spaces = {t["name"]: [m["name"] for m in t["tools"]] for t in loaded["tools"] if t["type"] == "namespace"}
    assert "add" in spaces["mcp__fake"]
    check_transport(proxy, proc, setup, 3)
