"""Non-streaming: a Responses Response -> chat.completion, and the shared small mappings."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


_COUNT = st.sampled_from([None, -1, 0, 3, True, "3", 1.5])
_PLACES = [
    ("", "input_tokens"),
    ("", "output_tokens"),
    ("", "total_tokens"),
    ("input_tokens_details", "cached_tokens"),
    ("input_tokens_details", "cache_write_tokens"),
    ("output_tokens_details", "reasoning_tokens"),
]
_MISSING = object()


def _some(draw: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for key in keys:
        value = draw(st.one_of(st.just(_MISSING), _COUNT))
        if value is not _MISSING:
            out[key] = value
    return out


@st.composite
def _usages(draw: Any) -> dict[str, Any]:
    if draw(st.booleans()):  # a whole usage as OpenAI sends it, a field or two changed
        usage: dict[str, Any] = {
            "input_tokens": draw(st.integers(0, 5)),
            "output_tokens": draw(st.integers(0, 5)),
            "total_tokens": draw(st.integers(0, 10)),
            "input_tokens_details": {"cached_tokens": draw(st.integers(0, 5))},
            "output_tokens_details": {"reasoning_tokens": draw(st.integers(0, 5))},
        }
        for _ in range(draw(st.integers(0, 2))):
            place, key = draw(st.sampled_from(_PLACES))
            obj = usage[place] if place else usage
            if draw(st.booleans()):
                obj.pop(key, None)
            else:
                obj[key] = draw(_COUNT)
        return usage
    usage = _some(draw, ("input_tokens", "output_tokens", "total_tokens"))
    for key, counts in (
        ("input_tokens_details", ("cached_tokens", "cache_write_tokens")),
        ("output_tokens_details", ("reasoning_tokens",)),
    ):
        shape = draw(st.sampled_from(["dict", "dict", "absent", "null", "list"]))
        if shape == "dict":
            usage[key] = _some(draw, counts)
        elif shape != "absent":
            usage[key] = None if shape == "null" else []
    return usage


def _by_the_rules(usage: dict[str, Any], where: str) -> dict[str, Any] | str:
    """chat_usage's documented rules, written out one field at a time: the mapped usage, or the
    message of the first field that breaks them."""

    def count(obj: dict[str, Any], key: str, place: str) -> int | str | None:
        value = obj.get(key)
        if value is None or (type(value) is int and value >= 0):
            return value
        kind = {bool: "a boolean", str: "a string", float: "a number", int: "an integer"}[type(value)]
        return f"{place}: {key} is {kind}, expected a non-negative integer"

    prompt = count(usage, "input_tokens", where)
    if isinstance(prompt, str):
        return prompt
    completion = count(usage, "output_tokens", where)
    if isinstance(completion, str):
        return completion
    details = []
    for key in ("input_tokens_details", "output_tokens_details"):
        value = usage.get(key)
        if value is not None and type(value) is not dict:
            return f"{where}: {key} is an array, expected an object"
        details.append(value or {})
    counts = []
    for obj, key, name in (
        (details[0], "cached_tokens", "input_tokens_details"),
        (details[0], "cache_write_tokens", "input_tokens_details"),
        (usage, "total_tokens", None),
        (details[1], "reasoning_tokens", "output_tokens_details"),
    ):
        got = count(obj, key, where if name is None else f"{where}.{name}")
        if isinstance(got, str):
            return got
        counts.append(got)
    cached, write, total, reasoning = counts
    pdet: dict[str, Any] = {"cached_tokens": cached or 0}
    if write is not None:
        pdet["cache_write_tokens"] = write
    return {
        "prompt_tokens": prompt or 0,
        "completion_tokens": completion or 0,
        "total_tokens": total or (prompt or 0) + (completion or 0),
        "prompt_tokens_details": pdet,
        "completion_tokens_details": {"reasoning_tokens": reasoning or 0},
    }


@settings(max_examples=500, deadline=None)
@given(_usages())
def test_chat_usage_follows_its_rules(usage: dict[str, Any]) -> None:
    """Any usage, every count of any type or absent, details absent, null or not an object: the
    mapped usage (its keys in order), or the error naming the first field that breaks a rule."""
    _assert_by_the_rules(usage)


def _assert_by_the_rules(usage: dict[str, Any]) -> None:
    want = _by_the_rules(usage, "response.usage")
    if isinstance(want, str):
        with pytest.raises(TranslationError) as caught:
            chat_usage(usage, "response.usage")
        assert str(caught.value) == want
    else:
        got = chat_usage(usage, "response.usage")
        assert got == want and list(got) == list(want)
        assert list(got["prompt_tokens_details"]) == list(want["prompt_tokens_details"])


_TYPICAL = {
    "input_tokens": 3,
    "output_tokens": 4,
    "total_tokens": 7,
    "input_tokens_details": {"cached_tokens": 1},
    "output_tokens_details": {"reasoning_tokens": 2},
}


@pytest.mark.parametrize("place", _PLACES, ids=lambda p: ".".join(filter(None, p)))
@pytest.mark.parametrize("value", [_MISSING, None, -1, 0, 3, True, "3", 1.5])
def test_chat_usage_of_a_usage_with_a_field_changed(place: tuple[str, str], value: Any) -> None:
    """A usage as OpenAI sends it, one field changed or left out: as the rules say."""
    usage = {k: dict(v) if isinstance(v, dict) else v for k, v in _TYPICAL.items()}
    obj = usage[place[0]] if place[0] else usage
    if value is _MISSING:
        obj.pop(place[1], None)
    else:
        obj[place[1]] = value
    _assert_by_the_rules(usage)


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
