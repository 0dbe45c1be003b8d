"""Non-streaming: a Responses Response -> chat.completion, and the shared small mappings."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.translators.errors import TranslationError
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.reverse.body import (
    ResponseFailed,
    chat_annotation,
    chat_usage,
    error_body,
    error_status,
    incomplete_finish_reason,
    response_to_chat_completion,
)

USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 1},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 15,
}


def response(output: list, status: str = "completed", **kw: Any) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1234,
        "status": status,
        "model": "m-1",
        "output": output,
        "usage": USAGE,
        "error": None,
        "incomplete_details": None,
        **kw,
    }


def text_msg(*texts: str, annotations: list | None = None) -> dict:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": t, "annotations": annotations or []} for t in texts],
    }


def convert(resp: dict, **opts: Any) -> dict:
    return response_to_chat_completion(resp, options=BackendProfile(**opts), ids=SequentialIds())


def message(resp: dict, **opts: Any) -> dict:
    return convert(resp, **opts)["choices"][0]["message"]


def test_envelope() -> None:
    out = convert(response([text_msg("hi")]))
    assert {k: out[k] for k in ("id", "object", "created", "model")} == {
        "id": "chatcmpl-0001",
        "object": "chat.completion",
        "created": 1234,
        "model": "m-1",
    }
    assert out["choices"][0] == {
        "index": 0,
        "finish_reason": "stop",
        "logprobs": None,
        "message": {"role": "assistant", "content": "hi", "refusal": None},
    }
    assert out["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 1},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }


def test_created_falls_back_to_the_clock_and_usage_is_omitted_when_absent() -> None:
    resp = response([text_msg("x")], created_at=None, usage=None)
    out = response_to_chat_completion(resp, options=BackendProfile(), ids=SequentialIds(), now=lambda: 99)
    assert out["created"] == 99 and "usage" not in out


MESSAGE_CASES = [
    # (output items, expected message fields)
    ([text_msg("a", "b")], {"content": "ab"}),
    ([text_msg("a"), text_msg("b")], {"content": "a\n\nb"}),
    ([{"type": "message", "content": [{"type": "refusal", "refusal": "no"}]}], {"content": None, "refusal": "no"}),
    (
        [
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": "s2"}],
            },
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "r"}]},
            text_msg("t"),
        ],
        {"reasoning_content": "s1\n\ns2\n\nr", "content": "t"},
    ),
    ([{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}], {"content": None}),
    ([{"type": "web_search_call", "id": "ws", "status": "completed"}, text_msg("t")], {"content": "t"}),
]


@pytest.mark.parametrize("output, expected", MESSAGE_CASES)
def test_message_content(output: list, expected: dict) -> None:
    msg = message(response(output))
    assert {k: msg.get(k) for k in expected} == expected
    if "reasoning_content" not in expected:
        assert "reasoning_content" not in msg


def test_reasoning_field_is_configurable() -> None:
    msg = message(
        response([{"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}]),
        reasoning_field="reasoning",
    )
    assert msg["reasoning"] == "s" and "reasoning_content" not in msg


def test_tool_calls_function_and_custom_and_finish_reason() -> None:
    out = convert(
        response(
            [
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'},
                {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "patch", "input": "raw\ntext"},
            ]
        )
    )
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
        {"id": "call_2", "type": "custom", "custom": {"name": "patch", "input": "raw\ntext"}},
    ]
    assert out["choices"][0]["message"]["content"] is None


@pytest.mark.parametrize(
    "details, reason",
    [
        ({"reason": "max_output_tokens"}, "length"),
        ({"reason": "content_filter"}, "content_filter"),
        ({"reason": "steered"}, "length"),
        (None, "length"),
    ],
)
def test_incomplete_finish_reasons(details: Any, reason: str) -> None:
    resp = response([text_msg("cut")], status="incomplete", incomplete_details=details)
    out = convert(resp)
    assert out["choices"][0]["finish_reason"] == reason and out["choices"][0]["message"]["content"] == "cut"
    assert incomplete_finish_reason(details) == reason


def test_annotations_are_nested_and_offset_into_the_joined_content() -> None:
    cite = {"type": "url_citation", "start_index": 0, "end_index": 2, "title": "T", "url": "https://u"}
    other = {"type": "file_citation", "file_id": "f", "filename": "a", "index": 0}
    msg = message(response([text_msg("abc"), text_msg("de", "fg", annotations=[cite, other])]))
    # "abc" + "\n\n" + "de" + "fg": the second item's first part starts at 5, its second part at 7.
    assert msg["content"] == "abc\n\ndefg"
    assert msg["annotations"] == [
        {"type": "url_citation", "url_citation": {"start_index": 5, "end_index": 7, "title": "T", "url": "https://u"}},
        {"type": "url_citation", "url_citation": {"start_index": 7, "end_index": 9, "title": "T", "url": "https://u"}},
    ]


def test_logprobs_of_text_parts() -> None:
    part = {
        "type": "output_text",
        "text": "Hi",
        "annotations": [],
        "logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}],
    }
    out = convert(response([{"type": "message", "content": [part]}]))
    assert out["choices"][0]["logprobs"] == {
        "content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}],
        "refusal": None,
    }


FAILURES = [
    # (response fields, http status, error object)
    (
        {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
        502,
        {"message": "boom", "type": "server_error", "param": None, "code": "server_error"},
    ),
    (
        {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}},
        429,
        {"message": "slow", "type": "rate_limit_error", "param": None, "code": "rate_limit_exceeded"},
    ),
    (
        {"status": "failed", "error": {"code": "invalid_prompt", "message": "flagged"}},
        400,
        {"message": "flagged", "type": "invalid_request_error", "param": None, "code": "invalid_prompt"},
    ),
    (
        {"status": "failed", "error": None},
        502,
        {"message": "upstream response failed", "type": "server_error", "param": None, "code": "server_error"},
    ),
    (
        {"status": "queued"},
        502,
        {
            "message": "upstream response ended with status 'queued'",
            "type": "server_error",
            "param": None,
            "code": "server_error",
        },
    ),
]


@pytest.mark.parametrize("fields, status, error", FAILURES)
def test_failed_responses_raise_with_status_and_envelope(fields: dict, status: int, error: dict) -> None:
    with pytest.raises(ResponseFailed) as info:
        convert(response([], **fields))
    exc = info.value
    assert isinstance(exc, TranslationError)
    assert (exc.http_status, exc.body) == (status, {"error": error})
    assert (exc.code, exc.error_type, exc.param, exc.message) == (error["code"], error["type"], None, error["message"])


@pytest.mark.parametrize(
    "code, status",
    [
        ("insufficient_quota", 429),
        ("rate_limit_exceeded", 429),
        ("invalid_image_url", 400),
        ("image_too_large", 400),
        ("server_error", 502),
        ("vector_store_timeout", 502),
        (None, 502),
    ],
)
def test_error_status(code: str | None, status: int) -> None:
    assert error_status(code) == status


def test_error_body_keeps_upstream_type_and_param() -> None:
    assert error_body({"type": "tokens", "code": "rate_limit_exceeded", "message": "m", "param": "p"}) == {
        "error": {"message": "m", "type": "tokens", "param": "p", "code": "rate_limit_exceeded"}
    }
    assert error_body("not a dict", code="x", message="y") == {
        "error": {"message": "y", "type": "server_error", "param": None, "code": "x"}
    }


def test_chat_usage_defaults() -> None:
    assert chat_usage({"input_tokens": 3, "output_tokens": 4}) == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


@pytest.mark.parametrize(
    ("details", "message"),
    [
        (
            {"input_tokens_details": {"cached_tokens": -1}},
            "response.usage.input_tokens_details: cached_tokens is an integer, expected a non-negative integer",
        ),
        (
            {"input_tokens_details": {"cache_write_tokens": "2"}},
            "response.usage.input_tokens_details: cache_write_tokens is a string, expected a non-negative integer",
        ),
        (
            {"output_tokens_details": {"reasoning_tokens": 1.5}},
            "response.usage.output_tokens_details: reasoning_tokens is a number, expected a non-negative integer",
        ),
    ],
)
def test_chat_usage_bad_details(details: dict[str, Any], message: str) -> None:
    """A details count of the wrong type is named with its place, as ``up_int`` names it."""
    with pytest.raises(TranslationError) as caught:
        chat_usage({"input_tokens": 3, "output_tokens": 4, **details}, "response.usage")
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "ann, base, expected",
    [
        (
            {"type": "url_citation", "start_index": 1, "end_index": 4, "title": "t", "url": "u"},
            10,
            {"type": "url_citation", "url_citation": {"start_index": 11, "end_index": 14, "title": "t", "url": "u"}},
        ),
        (
            {"type": "url_citation", "url": "u"},
            3,
            {"type": "url_citation", "url_citation": {"start_index": 3, "end_index": 3, "title": "", "url": "u"}},
        ),
        ({"type": "file_path", "file_id": "f", "index": 0}, 0, None),
        ("junk", 0, None),
    ],
)
def test_chat_annotation(ann: Any, base: int, expected: Any) -> None:
    assert chat_annotation(ann, base) == expected
