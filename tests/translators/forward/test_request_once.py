"""The request is read once (issue 32): the pure mapping returns what the proxy needs of it later
(``stream``, ``store``, ``max_output_tokens``, ``max_tool_calls``, ``include``, and for the tools
crossfeed runs itself ``HostedTools``); the MCP approvals' results go into the messages mapped
for them (``with_mcp_results``) with no second mapping."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.translators.errors import InvalidRequest
from crossfeed.translators.forward.request import PENDING, responses_request_to_chat, with_mcp_results
from crossfeed.translators.options import BackendProfile

APPROVALS: dict[str, Any] = {
    "model": "m",
    "tools": [
        {"type": "function", "name": "mcp__calc__add", "parameters": {}},
        {"type": "mcp", "server_label": "calc", "server_url": "http://127.0.0.1:1/mcp", "headers": {"X": "1"}},
    ],
    "input": [
        {"role": "user", "content": "go"},
        {"type": "mcp_list_tools", "id": "l1", "server_label": "calc", "tools": [{"name": "add"}]},
        {"type": "mcp_approval_request", "id": "r1", "server_label": "calc", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_request", "id": "r2", "server_label": "calc", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "r1", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "r2", "approve": False},
    ],
}


def test_a_plain_request_carries_its_flags_and_no_hosted_tools() -> None:
    mapped = responses_request_to_chat(
        {
            "model": "m",
            "input": "hi",
            "stream": True,
            "store": False,
            "max_output_tokens": 50,
            "max_tool_calls": 3,
            "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
        },
        BackendProfile(),
    )
    assert (mapped.stream, mapped.store, mapped.max_output_tokens, mapped.max_tool_calls) == (True, False, 50, 3)
    assert mapped.include == {"reasoning.encrypted_content", "message.output_text.logprobs"}
    assert mapped.hosted is None
    bare = responses_request_to_chat({"model": "m", "input": "hi"}, BackendProfile())
    assert (bare.stream, bare.store, bare.max_output_tokens, bare.max_tool_calls, bare.include) == (
        False,
        None,
        None,
        None,
        frozenset(),
    )
    assert (
        responses_request_to_chat(
            {**APPROVALS, "tools": [APPROVALS["tools"][0]], "input": "x"}, BackendProfile()
        ).hosted
        is None
    )


@pytest.mark.parametrize(
    ("field", "value"), [("max_tool_calls", "3"), ("max_tool_calls", 0), ("store", 1), ("stream", "yes")]
)
def test_the_flags_are_checked_as_before(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as caught:
        responses_request_to_chat({"model": "m", "input": "hi", field: value}, BackendProfile())
    assert caught.value.param == field


def test_the_hosted_search_options() -> None:
    mapped = responses_request_to_chat(
        {
            "model": "m",
            "input": "hi",
            "tools": [
                {"type": "function", "name": "web_search", "parameters": {}},
                {
                    "type": "web_search",
                    "search_context_size": "high",
                    "filters": {"allowed_domains": ["https://Example.com/", "", 3]},
                    "user_location": {"type": "approximate", "country": "FR"},
                    "external_web_access": False,
                },
            ],
            "tool_choice": {"type": "web_search"},
            "include": ["web_search_call.action.sources"],
        },
        BackendProfile(),
    )
    assert mapped.hosted is not None and mapped.hosted.mcp == () and not mapped.hosted.answers
    search = mapped.hosted.search
    assert search is not None
    assert (search.function, search.context_size, search.domains, search.country) == (
        "crossfeed_web_search",
        "high",
        ("example.com",),
        "FR",
    )
    assert (search.live, search.forced, search.sources) == (False, True, True)


def test_the_mcp_tools_and_what_the_conversation_holds() -> None:
    mapped = responses_request_to_chat(APPROVALS, BackendProfile())
    hosted = mapped.hosted
    assert hosted is not None and hosted.search is None
    assert hosted.mcp == ((1, APPROVALS["tools"][1]),)
    assert hosted.answers == {"r1": True, "r2": False}
    assert hosted.answered_at == {"r1": "input[4].approval_request_id", "r2": "input[5].approval_request_id"}
    assert set(hosted.requests) == {"r1", "r2"} and hosted.listed == {"calc": [{"name": "add"}]}
    assert hosted.client_functions == {"mcp__calc__add"}


def test_the_approvals_results_go_in_without_a_second_mapping() -> None:
    results = {"r1": "7", "r2": "The user did not approve this call; it was not made."}
    mapped = responses_request_to_chat(APPROVALS, BackendProfile())
    # as mapped, the approvals are not in the messages (a compaction or a count sends none of them)
    assert mapped.chat == responses_request_to_chat(APPROVALS, BackendProfile(), mcp_results=None).chat
    assert PENDING not in str(mapped.chat)
    filled = with_mcp_results(mapped, results)
    assert filled.chat == responses_request_to_chat(APPROVALS, BackendProfile(), mcp_results=results).chat
    assert filled.chat["messages"][-1] == {"role": "tool", "tool_call_id": "r2", "content": results["r2"]}
    assert PENDING not in str(filled.chat)
    assert with_mcp_results(responses_request_to_chat({"model": "m", "input": "hi"}, BackendProfile()), results).chat[
        "messages"
    ] == [{"role": "user", "content": "hi"}]


def test_approvals_in_a_compaction_request_are_not_prepared() -> None:
    body = {**APPROVALS, "input": [*APPROVALS["input"], {"type": "compaction_trigger"}]}
    mapped = responses_request_to_chat(body, BackendProfile())
    assert mapped.compact == "trigger" and mapped.hosted is not None and mapped.hosted.approved is None


def test_history_items_are_part_of_the_conversation_but_answer_nothing() -> None:
    history = [
        {"role": "user", "content": "go"},
        {"type": "mcp_approval_request", "id": "r0", "server_label": "calc", "name": "add", "arguments": "{}"},
        {"type": "mcp_approval_response", "approval_request_id": "r0", "approve": True},
    ]
    body = {**APPROVALS, "input": [{"type": "mcp_approval_response", "approval_request_id": "r0", "approve": True}]}
    hosted = responses_request_to_chat(body, BackendProfile(), history=history).hosted
    assert hosted is not None and hosted.answers == {"r0": True} and "r0" in hosted.requests
    assert hosted.answered_at == {"r0": "input[0].approval_request_id"}
