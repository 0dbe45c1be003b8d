"""The pure parts of remote MCP tools: function names, approval and allowed-tools rules,
what the conversation already holds, and the replayed items in the request mapping."""

from __future__ import annotations

from crossfeed.translators.forward import mcp_items as m
from crossfeed.translators.forward.request import responses_request_to_chat
from crossfeed.translators.options import BackendProfile


def test_function_names_fit_and_do_not_collide() -> None:
    assert m.function_name("calc", "add") == "mcp__calc__add"
    assert m.function_name("my server!", "do.it") == "mcp__my_server___do_it"
    long = m.function_name("a" * 60, "b" * 60)
    assert len(long) <= 64 and long == m.function_name("a" * 60, "b" * 60)  # stable: replay relies on it
    assert long != m.function_name("a" * 60, "b" * 59 + "c")
    assert m.function_name("calc", "add", {"mcp__calc__add"}) == "mcp__calc__add_2"
    assert m.function_name("calc", "add", {"mcp__calc__add", "mcp__calc__add_2"}) == "mcp__calc__add_3"


def test_approval_rules() -> None:
    assert m.needs_approval("never", "x") is False and m.needs_approval("always", "x") is True
    assert m.needs_approval(None, "x") is True  # the API's default: ask first
    rule = {"never": {"tool_names": ["read"]}, "always": {"tool_names": ["write"]}}
    assert [m.needs_approval(rule, t) for t in ("read", "write", "other")] == [False, True, True]


def test_allowed_tools_rules() -> None:
    assert m.allowed(None, "x", False) and m.allowed(["x"], "x", False) and not m.allowed(["y"], "x", False)
    assert m.allowed({"read_only": True}, "x", True) and not m.allowed({"read_only": True}, "x", False)
    assert not m.allowed({"tool_names": ["y"], "read_only": True}, "x", True)


def test_what_the_conversation_holds() -> None:
    items = [
        {"type": "mcp_list_tools", "server_label": "a", "tools": [{"name": "t"}]},
        {"type": "mcp_list_tools", "server_label": "b", "tools": [], "error": "down"},
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "r2", "approve": "yes"},
    ]
    assert dict(m.listed(items)) == {"a": [{"name": "t"}]}
    assert m.answered(items) == {"r1": True, "r2": False}  # only a true approve approves


def test_replayed_mcp_items() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "go"},
            {"type": "mcp_list_tools", "id": "l1", "server_label": "calc", "tools": []},
            {
                "type": "mcp_call",
                "id": "mc1",
                "server_label": "calc",
                "name": "add",
                "arguments": '{"a":1}',
                "output": "2",
            },
            {
                "type": "mcp_call",
                "id": "mc2",
                "server_label": "calc",
                "name": "fail",
                "arguments": "{}",
                "error": "boom",
            },
            {"type": "mcp_approval_request", "id": "r1", "server_label": "calc", "name": "add", "arguments": "{}"},
            {"type": "mcp_approval_request", "id": "r2", "server_label": "calc", "name": "add", "arguments": "{}"},
            {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},
        ],
    }
    chat = responses_request_to_chat(body, BackendProfile(), mcp_results={"r1": "7"}).chat
    assert chat["messages"] == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "mc1", "type": "function", "function": {"name": "mcp__calc__add", "arguments": '{"a":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "mc1", "content": "2"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "mc2", "type": "function", "function": {"name": "mcp__calc__fail", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "mc2", "content": "Error: boom"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "r1", "type": "function", "function": {"name": "mcp__calc__add", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "r1", "content": "7"},  # r2 is unanswered: nothing of it
    ]
    plain = responses_request_to_chat(body, BackendProfile()).chat["messages"]
    assert all(t["id"] not in ("r1", "r2") for msg in plain for t in msg.get("tool_calls") or ())
