"""chat_request_to_responses: one table row per mapping rule, one per rejection (param named)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from crossfeed.translators.errors import InvalidRequest, UnsupportedFeature
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.reverse.request import (
    MAX_CHOICES,
    chat_request_to_responses,
    choice_count,
    include_usage,
    stop_sequences,
)

OPTIONS = BackendProfile()
USER = {"role": "user", "content": "Hi"}


def body(**kw: Any) -> dict:
    return {"model": "gpt-5", "messages": [USER], **kw}


def mapped(**kw: Any) -> dict:
    return chat_request_to_responses(body(**kw), OPTIONS)


def msgs(*messages: dict, **opts: Any) -> dict:
    return chat_request_to_responses({"model": "m", "messages": list(messages)}, BackendProfile(**opts))


# ---------------------------------------------------------------- top-level fields

# What every request below maps to when it adds nothing: exactly these keys, these values.
BASE = {
    "model": "gpt-5",
    "input": [{"type": "message", "role": "user", "content": "Hi"}],
    "store": False,
    "stream": False,
}
# Chat-only request keys: never part of a Responses request, whatever the row.
CHAT_ONLY = frozenset(
    {
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "response_format",
        "reasoning_effort",
        "verbosity",
        "logprobs",
        "n",
        "stop",
        "seed",
        "logit_bias",
        "modalities",
        "audio",
        "prediction",
        "moderation",
        "functions",
        "function_call",
        "web_search_options",
        "prompt_cache_options",
    }
)

FIELD_CASES = [
    # (chat fields, keys added to / changed in BASE (the whole request is BASE | this),
    #  Responses keys that must be absent from the mapped request)
    (
        {},
        {},
        {
            "instructions",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "max_output_tokens",
            "temperature",
            "top_p",
            "text",
            "reasoning",
            "include",
            "top_logprobs",
            "stream_options",
            "metadata",
            "user",
        },
    ),
    (
        {"stream": True, "stream_options": {"include_usage": True}},
        {"stream": True},
        {"stream_options"},
    ),  # include_usage is for crossfeed's chunk writer; Responses has no such option
    (
        {"stream": True, "stream_options": {"include_obfuscation": False}},
        {"stream": True, "stream_options": {"include_obfuscation": False}},
        set(),
    ),
    ({"stream": False}, {}, set()),
    ({"store": True}, {"store": True}, set()),
    ({"store": False}, {}, set()),
    ({"max_tokens": 100}, {"max_output_tokens": 100}, set()),
    ({"max_completion_tokens": 200, "max_tokens": 100}, {"max_output_tokens": 200}, set()),
    ({"max_completion_tokens": 1}, {"max_output_tokens": 16}, set()),  # Responses rejects < 16: clamped
    ({"temperature": 0.2, "top_p": 0.9}, {"temperature": 0.2, "top_p": 0.9}, set()),
    ({"temperature": 0, "top_p": 0}, {"temperature": 0, "top_p": 0}, set()),  # zero is a value, not "unset"
    ({"temperature": None}, {}, {"temperature"}),
    ({"top_p": None, "parallel_tool_calls": None, "metadata": None}, {}, {"top_p", "parallel_tool_calls", "metadata"}),
    ({"parallel_tool_calls": False}, {"parallel_tool_calls": False}, set()),
    ({"reasoning_effort": "high"}, {"reasoning": {"effort": "high"}}, set()),
    ({"verbosity": "low"}, {"text": {"verbosity": "low"}}, set()),
    ({"response_format": {"type": "json_object"}}, {"text": {"format": {"type": "json_object"}}}, set()),
    (
        {"response_format": {"type": "text"}, "verbosity": "high"},
        {"text": {"format": {"type": "text"}, "verbosity": "high"}},
        set(),
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "r", "schema": {"type": "object"}, "description": "d", "strict": True},
            }
        },
        {
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "r",
                    "description": "d",
                    "schema": {"type": "object"},
                    "strict": True,
                }
            }
        },
        set(),
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {}}}},
        {"text": {"format": {"type": "json_schema", "name": "r", "schema": {}, "strict": False}}},
        set(),
    ),
    ({"logprobs": True}, {"include": ["message.output_text.logprobs"]}, {"top_logprobs"}),
    ({"logprobs": False}, {}, {"include", "top_logprobs"}),
    ({"logprobs": True, "top_logprobs": 3}, {"include": ["message.output_text.logprobs"], "top_logprobs": 3}, set()),
    (
        {
            "user": "u1",
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "service_tier": "flex",
        },
        {
            "user": "u1",
            "safety_identifier": "s",
            "prompt_cache_key": "k",
            "prompt_cache_retention": "24h",
            "service_tier": "flex",
        },
        set(),
    ),
    ({"metadata": {"a": "b"}}, {"metadata": {"a": "b"}}, set()),
    # No-op values of the rejected fields are accepted, and none of them is sent on.
    (
        {
            "n": 1,
            "stop": None,
            "seed": None,
            "frequency_penalty": 0,
            "presence_penalty": 0.0,
            "logit_bias": {},
            "modalities": ["text"],
        },
        {},
        {"n", "stop", "seed", "frequency_penalty", "presence_penalty", "logit_bias", "modalities"},
    ),
    ({"stop": []}, {}, {"stop"}),
    ({"stop": ""}, {}, {"stop"}),
    # Crossfeed runs these itself: checked, never sent.
    ({"stop": ["\n", "END"], "n": 3}, {}, {"stop", "n"}),
    # Penalties have the same names in Responses (Open Responses): sent when not the default 0.
    ({"frequency_penalty": 0.5, "presence_penalty": -1}, {"frequency_penalty": 0.5, "presence_penalty": -1}, set()),
    ({"presence_penalty": 2}, {"presence_penalty": 2}, {"frequency_penalty"}),
]


@pytest.mark.parametrize("fields, expected, absent", FIELD_CASES)
def test_top_level_fields(fields: dict, expected: dict, absent: set[str]) -> None:
    out = mapped(**fields)
    assert not set(out) & CHAT_ONLY, f"chat-only keys in a Responses request: {set(out) & CHAT_ONLY}"
    assert not set(out) & absent, f"keys that must be absent: {set(out) & absent}"
    assert set(out) == set(BASE) | set(expected)  # exactly these keys are present
    assert out == {**BASE, **expected}


def test_prompt_cache_options_is_dropped_and_reported() -> None:
    ignored: list[str] = []
    out = chat_request_to_responses(body(prompt_cache_options={"mode": "implicit"}), OPTIONS, ignored=ignored)
    assert "prompt_cache_options" not in out and ignored == ["prompt_cache_options"]


def test_input_is_not_modified() -> None:
    b = body(
        tools=[{"type": "function", "function": {"name": "f"}}], messages=[USER, {"role": "system", "content": "s"}]
    )
    snapshot = copy.deepcopy(b)
    chat_request_to_responses(b, OPTIONS)
    assert b == snapshot


@pytest.mark.parametrize(
    "b, expected",
    [
        ({}, False),
        ({"stream_options": {"include_usage": True}}, True),
        ({"stream_options": {"include_usage": 1}}, False),
        ({"stream_options": None}, False),
    ],
)
def test_include_usage(b: dict, expected: bool) -> None:
    assert include_usage(b) is expected


# ---------------------------------------------------------------- tools and tool_choice

TOOL_CASES = [
    (
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}},
        {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": False},
    ),
    (
        {"type": "function", "function": {"name": "f", "strict": True, "parameters": {"type": "object"}}},
        {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True},
    ),
    (
        {"type": "function", "function": {"name": "f"}},
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}, "strict": False},
    ),
    (
        {"type": "custom", "custom": {"name": "c", "description": "free"}},
        {"type": "custom", "name": "c", "description": "free"},
    ),
    (
        {"type": "custom", "custom": {"name": "c", "format": {"type": "text"}}},
        {"type": "custom", "name": "c", "format": {"type": "text"}},
    ),
    (
        {
            "type": "custom",
            "custom": {
                "name": "c",
                "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: x"}},
            },
        },
        {"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
    ),
]


@pytest.mark.parametrize("tool, expected", TOOL_CASES)
def test_tools_nested_to_flat_with_explicit_strict(tool: dict, expected: dict) -> None:
    assert mapped(tools=[tool])["tools"] == [expected]


def test_legacy_functions_and_function_call() -> None:
    out = mapped(functions=[{"name": "f", "parameters": {"type": "object"}}], function_call={"name": "f"})
    assert out["tools"] == [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}]
    assert out["tool_choice"] == {"type": "function", "name": "f"}
    assert mapped(functions=[{"name": "f"}], function_call="none")["tool_choice"] == "none"


def test_web_search_options_become_a_web_search_tool() -> None:
    out = mapped(
        web_search_options={
            "search_context_size": "low",
            "user_location": {"type": "approximate", "approximate": {"city": "Paris", "country": "FR", "region": None}},
        }
    )
    assert out["tools"] == [
        {
            "type": "web_search",
            "search_context_size": "low",
            "user_location": {"type": "approximate", "city": "Paris", "country": "FR"},
        }
    ]


CHOICE_CASES = [
    ("auto", "auto"),
    ("none", "none"),
    ("required", "required"),
    ({"type": "function", "function": {"name": "f"}}, {"type": "function", "name": "f"}),
    ({"type": "custom", "custom": {"name": "c"}}, {"type": "custom", "name": "c"}),
    (
        {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "required",
                "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "custom", "custom": {"name": "c"}}],
            },
        },
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "c"}],
        },
    ),
]


@pytest.mark.parametrize("choice, expected", CHOICE_CASES)
def test_tool_choice_shapes(choice: Any, expected: Any) -> None:
    assert mapped(tool_choice=choice)["tool_choice"] == expected


# ---------------------------------------------------------------- messages


def test_leading_system_and_developer_messages_become_instructions() -> None:
    out = msgs(
        {"role": "system", "content": "A"},
        {"role": "developer", "content": [{"type": "text", "text": "B"}]},
        USER,
        {"role": "developer", "content": "later"},
    )
    assert out["instructions"] == "A\n\nB"
    assert out["input"] == [
        {"type": "message", "role": "user", "content": "Hi"},
        {"type": "message", "role": "developer", "content": "later"},
    ]


def test_user_parts() -> None:
    out = msgs(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://i/x.png", "detail": "high"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "file", "file": {"file_id": "file_1"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,AA", "filename": "a.pdf"}},
            ],
        }
    )
    assert out["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://i/x.png", "detail": "high"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
                {"type": "input_file", "file_id": "file_1"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,AA", "filename": "a.pdf"},
            ],
        }
    ]


def test_assistant_turn_with_reasoning_text_and_calls_then_tool_results() -> None:
    out = msgs(
        USER,
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "need tools",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "call_2", "type": "custom", "custom": {"name": "c", "input": "raw"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": [{"type": "text", "text": "t"}, {"type": "text", "text": "wo"}],
        },
    )
    assert out["input"][1:] == [
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "need tools"}]},
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "c", "input": "raw"},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "two"},
    ]


@pytest.mark.parametrize(
    "field, option",
    [("reasoning", "reasoning"), ("reasoning_content", "reasoning"), ("reasoning", "reasoning_content")],
)
def test_assistant_reasoning_is_read_from_either_field(field: str, option: str) -> None:
    out = msgs(USER, {"role": "assistant", "content": "a", field: "r"}, reasoning_field=option)
    assert out["input"][1]["content"] == [{"type": "reasoning_text", "text": "r"}]


def test_assistant_text_parts_and_refusal_are_joined() -> None:
    out = msgs(
        USER,
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "b"}],
            "refusal": "c",
        },
    )
    assert out["input"][1] == {"type": "message", "role": "assistant", "content": "abc"}


def test_legacy_function_call_and_function_message() -> None:
    out = msgs(
        USER,
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": "res"},
    )
    assert out["input"][1:] == [
        {"type": "function_call", "call_id": "call_legacy_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_legacy_1", "output": "res"},
    ]


def test_message_name_and_unknown_message_keys_are_dropped_and_reported() -> None:
    ignored: list[str] = []
    out = chat_request_to_responses(
        {"model": "m", "messages": [{"role": "user", "content": "x", "name": "bob", "cache_control": {}}]},
        OPTIONS,
        ignored=ignored,
    )
    assert out["input"] == [{"type": "message", "role": "user", "content": "x"}]
    assert ignored == ["messages[0].name", "messages[0].cache_control"]


# ---------------------------------------------------------------- rejections

REJECTIONS = [
    # (request, error class, param)
    ([1, 2], InvalidRequest, None),
    ({"messages": [USER]}, InvalidRequest, "model"),
    ({"model": 5, "messages": [USER]}, InvalidRequest, "model"),
    ({"model": "m"}, InvalidRequest, "messages"),
    ({"model": "m", "messages": []}, InvalidRequest, "messages"),
    ({"model": "m", "messages": "hi"}, InvalidRequest, "messages"),
    (body(n="2"), InvalidRequest, "n"),
    (body(n=0), InvalidRequest, "n"),
    (body(n=MAX_CHOICES + 1), InvalidRequest, "n"),
    (body(stop=5), InvalidRequest, "stop"),
    (body(stop=["a", 1]), InvalidRequest, "stop"),
    (body(stop={"a": 1}), InvalidRequest, "stop"),
    (body(stop=["a", "b", "c", "d", "e"]), InvalidRequest, "stop"),
    (body(seed=1), UnsupportedFeature, "seed"),
    (body(presence_penalty=3), InvalidRequest, "presence_penalty"),
    (body(frequency_penalty="0.5"), InvalidRequest, "frequency_penalty"),
    (body(logit_bias={"50256": -100}), UnsupportedFeature, "logit_bias"),
    (body(audio={"voice": "alloy", "format": "wav"}), UnsupportedFeature, "audio"),
    (body(modalities=["text", "audio"]), UnsupportedFeature, "modalities"),
    (body(prediction={"type": "content", "content": "x"}), UnsupportedFeature, "prediction"),
    (body(moderation={"model": "omni"}), UnsupportedFeature, "moderation"),
    (body(top_k=5), UnsupportedFeature, "top_k"),
    (body(temperature="hot"), InvalidRequest, "temperature"),
    (body(temperature=3), InvalidRequest, "temperature"),
    (body(top_p=True), InvalidRequest, "top_p"),
    (body(max_tokens=0), InvalidRequest, "max_tokens"),
    (body(max_completion_tokens=1.5), InvalidRequest, "max_completion_tokens"),
    (body(stream="yes"), InvalidRequest, "stream"),
    (body(store="no"), InvalidRequest, "store"),
    (body(stream_options={"include_usage": "y"}), InvalidRequest, "stream_options.include_usage"),
    (body(top_logprobs=2), InvalidRequest, "top_logprobs"),
    (body(metadata={"a": 1}), InvalidRequest, "metadata.a"),
    (body(response_format={"type": "xml"}), InvalidRequest, "response_format.type"),
    (body(response_format={"type": "json_schema"}), InvalidRequest, "response_format.json_schema"),
    (body(tools={"type": "function"}), InvalidRequest, "tools"),
    (body(tools=[{"type": "web_search_preview"}]), UnsupportedFeature, "tools[0].type"),
    (body(tools=[{"function": {"name": "f"}}]), InvalidRequest, "tools[0].type"),
    (body(tools=[{"type": "function", "function": {"description": "x"}}]), InvalidRequest, "tools[0].function.name"),
    (
        body(tools=[{"type": "function", "function": {"name": "f", "strict": "yes"}}]),
        InvalidRequest,
        "tools[0].function.strict",
    ),
    (body(tool_choice="always"), InvalidRequest, "tool_choice"),
    (body(tool_choice={"type": "function"}), InvalidRequest, "tool_choice.function"),
    (
        body(tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "any", "tools": []}}),
        InvalidRequest,
        "tool_choice.allowed_tools.mode",
    ),
    (body(messages=["hi"]), InvalidRequest, "messages[0]"),
    (body(messages=[{"content": "x"}]), InvalidRequest, "messages[0].role"),
    (body(messages=[{"role": "robot", "content": "x"}]), InvalidRequest, "messages[0].role"),
    (body(messages=[{"role": "user"}]), InvalidRequest, "messages[0].content"),
    (
        body(messages=[USER, {"role": "user", "content": [{"type": "text", "text": 1}]}]),
        InvalidRequest,
        "messages[1].content[0].text",
    ),
    (
        body(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]),
        InvalidRequest,
        "messages[0].content[0].type",
    ),
    (
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}},
                    ],
                }
            ]
        ),
        UnsupportedFeature,
        "messages[0].content[1]",
    ),
    (
        body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        InvalidRequest,
        "messages[0].content[0].image_url.url",
    ),
    (
        body(messages=[{"role": "system", "content": [{"type": "image_url", "image_url": "x"}]}]),
        InvalidRequest,
        "messages[0].content[0].type",
    ),
    (
        body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
            ]
        ),
        InvalidRequest,
        "messages[1].tool_calls[0].id",
    ),
    (
        body(
            messages=[
                USER,
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
                },
            ]
        ),
        InvalidRequest,
        "messages[1].tool_calls[0].function.arguments",
    ),
    (body(messages=[USER, {"role": "assistant", "audio": {"id": "a"}}]), UnsupportedFeature, "messages[1].audio"),
    (body(messages=[USER, {"role": "tool", "content": "x"}]), InvalidRequest, "messages[1].tool_call_id"),
    (body(messages=[USER, {"role": "function", "name": "f", "content": "x"}]), InvalidRequest, "messages[1]"),
]


@pytest.mark.parametrize("request_body, error, param", REJECTIONS)
def test_rejections_name_the_param(request_body: Any, error: type, param: str | None) -> None:
    with pytest.raises(error) as info:
        chat_request_to_responses(request_body, OPTIONS)
    assert type(info.value) is error
    assert info.value.param == param
    assert info.value.http_status == 400 and info.value.message


# ---------------------------------------------------------------- n, stop and drop_params


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({}, ()),
        ({"stop": None}, ()),
        ({"stop": ""}, ()),
        ({"stop": []}, ()),
        ({"stop": "\n"}, ("\n",)),
        ({"stop": ["a", "", "b", "a"]}, ("a", "b")),
        ({"stop": ["1", "2", "3", "4"]}, ("1", "2", "3", "4")),
    ],
)
def test_stop_sequences(fields: dict, expected: tuple) -> None:
    assert stop_sequences(body(**fields), OPTIONS) == expected


@pytest.mark.parametrize(
    "fields, expected", [({}, 1), ({"n": None}, 1), ({"n": 1}, 1), ({"n": MAX_CHOICES}, MAX_CHOICES)]
)
def test_choice_count(fields: dict, expected: int) -> None:
    assert choice_count(body(**fields), OPTIONS) == expected


DROPPING = BackendProfile(drop_params=("seed", "logit_bias", "top_k", "temperature", "model", "messages", "stream"))


def test_drop_params_drops_what_it_names_and_reports_it() -> None:
    ignored: list[str] = []
    b = body(seed=7, logit_bias={"1": 2}, top_k=40, temperature=0.3, stream=True)
    out = chat_request_to_responses(b, DROPPING, ignored=ignored)
    assert out == {**BASE, "stream": True}
    assert ignored == ["seed", "logit_bias", "top_k", "temperature"]  # each once; model/messages/stream kept
    assert b["seed"] == 7  # the client's body is not modified


def test_drop_params_reports_only_fields_given_a_value() -> None:
    ignored: list[str] = []
    assert chat_request_to_responses(body(seed=None), DROPPING, ignored=ignored) == BASE
    assert ignored == []


def test_without_drop_params_the_same_fields_are_refused() -> None:
    for fields, param in (({"seed": 7}, "seed"), ({"logit_bias": {"1": 2}}, "logit_bias"), ({"top_k": 40}, "top_k")):
        with pytest.raises(UnsupportedFeature) as info:
            chat_request_to_responses(body(**fields), OPTIONS)
        assert info.value.param == param
        # the operator's way out is named, except in OpenAI's own words for an unknown field
        assert ("drop_params" in info.value.message) is (param != "top_k")


def test_n_and_stop_in_drop_params_are_not_run() -> None:
    profile = BackendProfile(drop_params=("n", "stop"))
    b = body(n=3, stop=["x"])
    ignored: list[str] = []
    chat_request_to_responses(b, profile, ignored=ignored)
    assert ignored == ["n", "stop"]
    assert choice_count(b, profile) == 1 and stop_sequences(b, profile) == ()
    # an invalid value is dropped, not checked
    assert choice_count(body(n=99), profile) == 1
