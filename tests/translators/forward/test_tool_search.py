"""Deferred tools and tool_search in the request mapping (translators/forward/tool_search.py,
request.py, tools.py, input.py): what the backend is offered, in which order, and how an earlier
search is replayed, and a search the client runs itself (``execution: "client"``, Codex's own
``tool_search`` tool, as recorded: Codex 0.171 declares no deferred tools, it leaves its MCP tools
out of ``tools`` and loads them with its own searches). The tool list is a recorded Codex
request's, with some of its own functions and an MCP-style namespace marked ``defer_loading``
and, unless a test says ``client``, its ``tool_search`` tool made server-run."""

from __future__ import annotations

import json
from typing import Any

import orjson

from crossfeed.translators.forward import tool_search as ts
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest, responses_request_to_chat
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile, ToolContext
from tests.support.paths import TESTS
from tests.support.validators import validate_responses_events

CODEX = json.loads((TESTS / "fixtures" / "codex" / "shell.1.request.json").read_text())
DEFER = {"view_image", "get_goal", "create_goal", "update_goal"}
GITHUB = {
    "type": "namespace",
    "name": "mcp__github__",
    "description": "GitHub",
    "tools": [
        {
            "type": "function",
            "name": "create_issue",
            "description": "Open a new issue in a repository.\nLong details.",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            "defer_loading": True,
        },
        {
            "type": "function",
            "name": "list_pulls",
            "description": "List the pull requests of a repository.",
            "parameters": {"type": "object", "properties": {}},
            "defer_loading": True,
        },
    ],
}


def server_run(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Codex's tools with its tool_search tool searched by the server (crossfeed)."""
    return [{**t, "execution": "server"} if t["type"] == "tool_search" else t for t in tools]


def codex_tools(*, search: bool = True, client: bool = False) -> list[dict[str, Any]]:
    tools = [{**t, "defer_loading": True} if t.get("name") in DEFER else t for t in CODEX["tools"]]
    tools = [t for t in tools if search or t["type"] != "tool_search"]
    return [*(tools if client else server_run(tools)), GITHUB]


def mapped(tools: list[dict[str, Any]], inp: Any = "hi", **kw: Any) -> MappedRequest:
    return responses_request_to_chat({"model": "m", "input": inp, "tools": tools, **kw}, BackendProfile())


def names(m: MappedRequest) -> list[str]:
    return [t["function"]["name"] for t in m.chat["tools"]]


VISIBLE = ["exec_command", "write_stdin", "request_user_input", "apply_patch"]


def test_deferred_tools_stay_out_and_the_search_function_lists_them() -> None:
    m = mapped(codex_tools())
    assert names(m) == [*VISIBLE, "tool_search"]
    description = m.chat["tools"][-1]["function"]["description"]
    for label in ("view_image", "get_goal", "create_goal", "update_goal", "mcp__github__.create_issue"):
        assert f"- {label}" in description
    assert "- mcp__github__.create_issue: Open a new issue in a repository." in description
    assert "Long details" not in description  # one line each
    assert m.hosted is not None and m.hosted.catalog is not None
    assert m.hosted.catalog.function == "tool_search" and not m.hosted.catalog.revealed
    # the deferred tools are still known to the stream machine (a call to one maps back)
    assert m.tools.namespaced["mcp__github__create_issue"] == ("mcp__github__", "create_issue")
    assert not any("defer_loading" in i for i in m.ignored)


def test_without_deferred_tools_nothing_changes() -> None:
    plain = server_run(CODEX["tools"])
    with_search = mapped(plain)
    without = mapped([t for t in plain if t["type"] != "tool_search"])
    assert orjson.dumps(with_search.chat) == orjson.dumps(without.chat)
    assert "tool_search" not in names(with_search)
    assert with_search.hosted is None or with_search.hosted.catalog is None


def test_deferred_tools_without_a_tool_search_tool_are_deferred_all_the_same() -> None:
    m = mapped(codex_tools(search=False))
    assert names(m) == [*VISIBLE, "tool_search"]


def test_a_client_function_named_tool_search_keeps_its_name() -> None:
    own = {"type": "function", "name": "tool_search", "parameters": {"type": "object", "properties": {}}}
    m = mapped([own, *codex_tools()])
    assert names(m) == ["tool_search", *VISIBLE, "crossfeed_tool_search"]


def test_search_by_name_and_by_words_bounded_and_in_request_order() -> None:
    catalog = mapped(codex_tools()).hosted.catalog  # type: ignore[union-attr]
    assert catalog is not None
    assert catalog.search("get_goal")[0].name == "get_goal"
    assert catalog.search("open an issue on github")[0].name == "mcp__github__create_issue"
    assert catalog.search("pull requests")[0].name == "mcp__github__list_pulls"
    assert len(catalog.search("goal", limit=2)) == 2
    assert catalog.search("zebra crossing") == []
    found = catalog.search("repository")
    assert [d.name for d in found] == ["mcp__github__create_issue", "mcp__github__list_pulls"]
    out = ts.output_tools(found)
    assert out == [{**{k: GITHUB[k] for k in ("type", "name", "description")}, "tools": GITHUB["tools"]}]


def test_revealed_tools_keep_the_request_order_before_the_search_function() -> None:
    catalog = mapped(codex_tools()).hosted.catalog  # type: ignore[union-attr]
    assert catalog is not None
    late_first = [t["function"]["name"] for t in catalog.tools({"mcp__github__list_pulls", "view_image"})]
    assert late_first == [*VISIBLE, "view_image", "mcp__github__list_pulls", "tool_search"]


def search_items(call_id: str = "call_7", execution: str = "server") -> list[dict[str, Any]]:
    issue = GITHUB["tools"][0]
    return [
        {"type": "message", "role": "user", "content": "open an issue"},
        {
            "type": "tool_search_call",
            "id": "tsc_1",
            "call_id": call_id,
            "execution": execution,
            "status": "completed",
            "arguments": {"query": "github issue"},
        },
        {
            "type": "tool_search_output",
            "id": "tso_1",
            "call_id": call_id,
            "execution": execution,
            "status": "completed",
            "tools": [{"type": "namespace", "name": "mcp__github__", "description": "GitHub", "tools": [issue]}],
        },
    ]


def test_replayed_search_reveals_its_tools_from_the_first_leg_and_is_the_tool_exchange() -> None:
    m = mapped(codex_tools(), search_items())
    assert names(m) == [*VISIBLE, "mcp__github__create_issue", "tool_search"]
    assert m.hosted is not None and m.hosted.catalog is not None
    assert m.hosted.catalog.revealed == {"mcp__github__create_issue"}
    _, call, result = m.chat["messages"]
    assert call["tool_calls"] == [
        {
            "id": "call_7",
            "type": "function",
            "function": {"name": "tool_search", "arguments": '{"query":"github issue"}'},
        }
    ]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_7"
    assert "mcp__github__create_issue" in result["content"]


def test_a_stored_history_reveals_its_tools_too() -> None:
    m = responses_request_to_chat(
        {"model": "m", "input": "and now?", "tools": codex_tools()}, BackendProfile(), history=search_items()
    )
    assert names(m) == [*VISIBLE, "mcp__github__create_issue", "tool_search"]


def test_tools_a_client_run_search_loaded_are_sent_even_without_deferred_tools() -> None:
    """Codex runs its own searches (``execution: "client"``) over tools it never declares: the
    tools its ``tool_search_output`` loaded join the request's, after them, before the search
    function; the search is the tool exchange it was."""
    m = mapped(CODEX["tools"], search_items(execution="client"))
    assert names(m)[-2:] == ["mcp__github__create_issue", "tool_search"]
    assert [msg["role"] for msg in m.chat["messages"]] == ["user", "assistant", "tool"]
    assert m.chat["messages"][1]["tool_calls"][0]["function"]["name"] == "tool_search"
    assert m.tools.namespaced["mcp__github__create_issue"] == ("mcp__github__", "create_issue")
    # without a tool_search tool the items are dropped, their tools still sent
    bare = mapped([t for t in CODEX["tools"] if t["type"] != "tool_search"], search_items(execution="client"))
    assert names(bare)[-1] == "mcp__github__create_issue" and "tool_search" not in names(bare)
    assert [msg["role"] for msg in bare.chat["messages"]] == ["user"]


def test_a_client_run_search_is_offered_even_without_deferred_tools() -> None:
    """Codex's case: a ``tool_search`` tool with ``execution: "client"`` and no deferred tool
    gets the search function, with Codex's description and parameters; its calls go to the
    client (``ToolContext.client_search``), crossfeed runs no search of its own."""
    (codex,) = [t for t in CODEX["tools"] if t["type"] == "tool_search"]
    assert codex["execution"] == "client"
    m = mapped(CODEX["tools"])
    assert names(m) == [*VISIBLE, "view_image", "get_goal", "create_goal", "update_goal", "tool_search"]
    fn = m.chat["tools"][-1]["function"]
    assert fn["description"] == codex["description"] and fn["parameters"] == codex["parameters"]
    assert m.tools.client_search == "tool_search"
    assert m.hosted is None or m.hosted.catalog is None  # no server-side runner
    server = mapped(server_run(CODEX["tools"]))
    assert server.tools.client_search is None and "tool_search" not in names(server)


def test_a_client_run_search_over_deferred_tools_lists_them_and_leaves_the_search_to_the_client() -> None:
    m = mapped(codex_tools(client=True))
    assert names(m) == [*VISIBLE, "tool_search"]
    description = m.chat["tools"][-1]["function"]["description"]
    assert description.startswith("# Tool discovery") and "- mcp__github__.create_issue" in description
    assert m.tools.client_search == "tool_search"
    assert m.hosted is None or m.hosted.catalog is None


def test_tool_choice_naming_a_deferred_function_reveals_it() -> None:
    m = mapped(codex_tools(), tool_choice={"type": "function", "name": "get_goal"})
    assert names(m) == [*VISIBLE, "get_goal", "tool_search"]
    assert m.chat["tool_choice"] == {"type": "function", "function": {"name": "get_goal"}}


def test_search_arguments() -> None:
    assert ts.arguments('{"query": "goal", "limit": 3}')[1:] == ("goal", 3)
    assert ts.arguments('{"query": "goal", "names": ["get_goal"]}')[1:] == ("goal get_goal", ts.DEFAULT_LIMIT)
    assert ts.arguments("not json")[1:] == ("", ts.DEFAULT_LIMIT)
    assert ts.arguments('{"query": "x", "limit": true}')[2] == ts.DEFAULT_LIMIT


def test_the_machine_makes_a_call_to_the_client_search_a_tool_search_call() -> None:
    """The model's call to the search function reaches the client as a ``tool_search_call``
    (``execution: "client"``, the arguments an object), and the Response completes, awaiting the
    client's ``tool_search_output``; an ordinary call in the same turn stays a function call."""
    m = ChatToResponsesStream(
        {"model": "m"}, ids=SequentialIds(), now=lambda: 1, tools=ToolContext(client_search="tool_search")
    )
    events: list[Any] = m.start()

    def call(i: int, args: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
        fn = {"arguments": args, **({"name": name} if name else {})}
        tc = {"index": i, "function": fn, **({"id": call_id} if call_id else {})}
        return {"choices": [{"index": 0, "delta": {"tool_calls": [tc]}}]}

    events += m.feed(call(0, '{"query": "add', "call_s", "tool_search"))
    events += m.feed(call(0, ' two numbers", "limit": 2}'))
    events += m.feed(call(1, "{}", "call_g", "get_goal"))
    events += m.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    events += m.finish()
    validate_responses_events(events)
    types = [e["type"] for e in events]
    assert types[-1] == "response.completed"
    assert not any(t.startswith("response.tool_search") for t in types)  # no delta events of its own
    searched, other = events[-1]["response"]["output"]
    assert searched == {
        "id": searched["id"],
        "type": "tool_search_call",
        "status": "completed",
        "call_id": "call_s",
        "execution": "client",
        "arguments": {"query": "add two numbers", "limit": 2},
    }
    assert (other["type"], other["name"]) == ("function_call", "get_goal")
    assert m.leg is not None and [c["type"] for c in m.leg.calls] == ["tool_search_call", "function_call"]
