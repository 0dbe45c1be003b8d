"""item_reference input items and reasoning replayed by id only: finding and replacing them
(translators/forward/input.py, pure); and the arguments a custom tool call is replayed with. The proxy's lookup in the store by item id, scoped by key
(proxy/state/history.py), is tests/proxy/state/test_history.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from crossfeed.translators.errors import InvalidRequest, UnsupportedFeature
from crossfeed.translators.forward.input import (
    bare_reasoning,
    custom_arguments,
    fill_reasoning,
    is_item_reference,
    item_references,
    resolve_references,
)
from crossfeed.translators.forward.request import responses_request_to_chat
from crossfeed.translators.options import BackendProfile
from tests.support.items import ASSISTANT, BARE, CALL, REASONING, USER


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"type": "item_reference", "id": "msg_1"}, True),
        ({"id": "msg_1"}, True),
        ({"id": "msg_1", "type": None}, True),
        ({"type": "item_reference"}, True),  # a reference without its id: found, then a 400
        ({"id": "msg_1", "role": "user", "content": "x"}, False),
        ({"id": "msg_1", "content": "x"}, False),
        (CALL, False),
        ("msg_1", False),
    ],
)
def test_is_item_reference(item: Any, expected: bool) -> None:
    assert is_item_reference(item) is expected


def test_item_references_positions() -> None:
    inp = [USER, {"type": "item_reference", "id": "msg_a1"}, {"role": "user", "content": "x"}, {"id": "fc_1"}]
    assert item_references(inp) == [(1, "msg_a1"), (3, "fc_1")]
    assert item_references("hello") == [] and item_references(None) == [] and item_references([USER]) == []


@pytest.mark.parametrize(
    ("ref", "code"),
    [
        ({"type": "item_reference"}, "missing_required_parameter"),
        ({"type": "item_reference", "id": ""}, "missing_required_parameter"),
        ({"type": "item_reference", "id": 7}, "invalid_type"),
        ({"id": ["msg_1"]}, "invalid_type"),
    ],
)
def test_a_bad_id_names_input_i_id(ref: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        item_references([USER, ref])
    assert (info.value.param, info.value.code, info.value.http_status) == ("input[1].id", code, 400)


def test_resolve_replaces_references_in_a_copy() -> None:
    inp = [USER, {"type": "item_reference", "id": "msg_a1"}, {"id": "msg_a1"}, {"role": "user", "content": "x"}]
    before = copy.deepcopy(inp)
    found = {"msg_a1": ASSISTANT}
    out = resolve_references(inp, found)
    assert out == [USER, ASSISTANT, ASSISTANT, {"role": "user", "content": "x"}]
    assert inp == before  # the client's input is not changed
    out[1]["status"] = "mutated"
    assert ASSISTANT["status"] == "completed" and out[2]["status"] == "completed"  # each a copy


def test_an_unknown_id_is_a_400_saying_what_to_send() -> None:
    inp = [USER, {"type": "item_reference", "id": "msg_a1"}, {"type": "item_reference", "id": "msg_gone"}]
    with pytest.raises(InvalidRequest) as info:
        resolve_references(inp, {"msg_a1": ASSISTANT})
    err = info.value
    assert (err.param, err.code, err.http_status) == ("input[2].id", "item_not_found", 400)
    assert "msg_gone" in err.message
    assert "item itself" in err.message and "previous_response_id" in err.message


def test_resolved_items_map_like_the_items_themselves() -> None:
    profile = BackendProfile()
    sent = {"model": "m", "input": [USER, ASSISTANT, {"role": "user", "content": "Who am I?"}]}
    refs = {
        "model": "m",
        "input": [USER, {"type": "item_reference", "id": "msg_a1"}, {"role": "user", "content": "Who am I?"}],
    }
    resolved = {**refs, "input": resolve_references(refs["input"], {"msg_a1": ASSISTANT})}
    chat = responses_request_to_chat(resolved, profile).chat
    assert chat == responses_request_to_chat(sent, profile).chat
    assert chat["messages"][1] == {"role": "assistant", "content": "Hi Ann."}
    with pytest.raises(UnsupportedFeature) as info:  # never resolved: the mapper refuses it
        responses_request_to_chat(refs, profile)
    assert info.value.param == "input[1]" and "previous_response_id" in info.value.message


# -- reasoning replayed by id only (LangChain's stream merge) --------------------------------------


def test_bare_reasoning_is_a_reasoning_item_with_nothing_but_its_id() -> None:
    inp = [
        USER,
        BARE,
        {"type": "reasoning", "id": "rs_2"},
        {**BARE, "id": "rs_3", "encrypted_content": "x"},
        REASONING,
        {"type": "reasoning", "summary": []},
    ]
    assert bare_reasoning(inp) == [(1, "rs_1"), (2, "rs_2")]
    assert bare_reasoning("hi") == []
    filled = fill_reasoning(inp, {"rs_1": REASONING, "rs_2": ASSISTANT})  # a non-reasoning item is not put there
    assert filled[1] == REASONING and filled[1] is not REASONING and filled[2] == inp[2] and inp[1] == BARE


# -- a custom tool call's replayed arguments ----------------------------------------------------


def test_custom_arguments_are_the_bytes_json_dumps_writes_for_every_code_point() -> None:
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    for text in (every, "", 'a "patch"\n\t\\ \x00\x1b\x7f\u2028 é 😀'):
        assert custom_arguments(text) == json.dumps({"input": text}, ensure_ascii=False)
        assert json.loads(custom_arguments(text)) == {"input": text}
    lone = "x\ud800y"  # never from a JSON body (both decoders refuse it); written as json writes it
    assert custom_arguments(lone) == json.dumps({"input": lone}, ensure_ascii=False)


def test_a_custom_tool_call_is_replayed_as_a_call_of_its_wrapped_function() -> None:
    patch = '*** Begin Patch\n*** Add File: a.py\n+print("é")\n*** End Patch'
    body = {
        "model": "m",
        "input": [
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": patch},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
        ],
    }
    chat = responses_request_to_chat(body, BackendProfile()).chat
    call = chat["messages"][0]["tool_calls"][0]
    assert call["function"] == {"name": "apply_patch", "arguments": json.dumps({"input": patch}, ensure_ascii=False)}
