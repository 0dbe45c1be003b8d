"""``decode_create`` (translators/responses/create_body.py) reads a long create body once with
msgspec and gives what ``orjson.loads`` gives, except that a long tool output stays JSON
(``orjson.Fragment``). Where it cannot give exactly that it answers ``None`` (the caller parses the
plain way): these tests hold it to both, value by value, on a grown Codex history and on every
edge where the two parsers could part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.responses.create_body import RAW_OUTPUT_MIN, decode_create, decode_create_frame, output_text

FIXTURE = Path(__file__).parents[2] / "fixtures/codex/reasoning.3.request.json"
LONG = 'line of tool output, ünïcode ✓ and a "quote"\n' * (RAW_OUTPUT_MIN // 20)


def plain(value: Any) -> Any:
    """The value with every kept output read as text: what ``orjson.loads`` gives."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return output_text(value)


def same_as_orjson(raw: bytes) -> dict[str, Any]:
    body = decode_create(raw)
    assert body is not None, "the fast way was not taken"
    expected = orjson.loads(raw)
    assert plain(body) == expected
    # ints stay ints, floats floats, -0.0 stays -0.0; the top-level keys come in FIELDS order
    assert {k: repr(v) for k, v in plain(body).items()} == {k: repr(v) for k, v in expected.items()}
    assert orjson.loads(orjson.dumps(body)) == expected  # written out, it is the same JSON
    return body


def kept(body: dict[str, Any]) -> list[int]:
    return [i for i, item in enumerate(body["input"]) if isinstance(item.get("output"), orjson.Fragment)]


def codex_history() -> dict[str, Any]:
    body = orjson.loads(FIXTURE.read_bytes())
    calls = []
    for k in range(6):
        call_id = f"call_{k}"
        calls.append({"type": "function_call", "call_id": call_id, "name": "exec_command", "arguments": "{}"})
        kind = "function_call_output" if k % 2 else "custom_tool_call_output"
        calls.append({"type": kind, "call_id": call_id, "output": f"run {k}\n" + LONG})
    body["input"] = body["input"][:-1] + calls + body["input"][-1:]
    return body


def test_a_codex_history_keeps_its_long_outputs_and_nothing_else() -> None:
    request = codex_history()
    body = same_as_orjson(orjson.dumps(request))
    outputs = [i for i, item in enumerate(request["input"]) if item.get("type", "").endswith("_output")]
    assert len(orjson.dumps(request["input"][outputs[0]]["output"])) < RAW_OUTPUT_MIN  # the recording's own
    assert kept(body) == outputs[1:]
    assert all(isinstance(v, str) for i in kept(body) for k, v in body["input"][i].items() if k != "output")
    assert list(body["input"][outputs[0]]) == list(request["input"][outputs[0]])  # an item's keys keep their order


@pytest.mark.parametrize(
    "item",
    [
        {"type": "function_call_output", "call_id": "c", "output": "short"},
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": LONG}]},
        {"type": "mcp_call", "id": "m", "name": "n", "server_label": "s", "arguments": "{}", "output": LONG},
        {"type": ["function_call_output"], "call_id": "c", "output": LONG},
        {"role": "user", "content": LONG, "output": LONG},
    ],
    ids=["short", "parts", "not-a-tool-output", "unhashable-type", "no-type"],
)
def test_only_a_long_tool_output_string_is_kept(item: dict[str, Any]) -> None:
    body = same_as_orjson(orjson.dumps({"model": "m", "input": [item]}))
    assert kept(body) == []


@pytest.mark.parametrize(
    "text",
    [
        "\\u00e9 \\ud83d\\ude00 \\uDBFF\\uDFFF \\\\ud800 \\/ \\b\\f\\n\\r\\t \\u0000",  # escapes as JSON writes them
        "é ✓ 😀 \U0010ffff",
    ],
    ids=["escapes", "utf-8"],
)
def test_escapes_and_characters_in_a_kept_output(text: str) -> None:
    raw = b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"%s"}]}' % (
        (text * 200).encode()
    )
    body = same_as_orjson(raw)
    assert kept(body) == [0]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"\xff%s"}]}',
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"\xed\xa0\x80%s"}]}',
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"\\ud800%s"}]}',
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"\\udc00%s"}]}',
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"\\ud800\\u0041%s"}]}',
        b'{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"%s\\ud83d"}]}',
        b'{"model":"m","input":[{"type":"message","role":"user","content":"\xc3%s"}]}',
        b'{"model":"m\xff","input":"%s"}',
    ],
    ids=[
        "bad-utf8",
        "encoded-surrogate",
        "lone-high",
        "lone-low",
        "high-then-other",
        "high-at-end",
        "short-bad",
        "top",
    ],
)
def test_what_orjson_refuses_is_left_to_the_plain_parse(raw: bytes) -> None:
    raw = raw.replace(b"%s", b"x" * RAW_OUTPUT_MIN)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    assert decode_create(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model":"m","input":[],"extension":1}',  # a field this module does not list
        b'{"model":"m","input":7}',
        b'{"model":"m","input":["text"]}',
        b'{"model":"m","input":[{"type":"message"}],}',
        b"[1,2]",
        b"not json",
        b'{"model":"m","metadata":{"n":1e400}}',  # orjson: infinity, refused
    ],
)
def test_a_body_of_another_shape_is_left_to_the_plain_parse(raw: bytes) -> None:
    assert decode_create(raw) is None


@pytest.mark.parametrize("depth", [1_025, 5_000, 200_000])
@pytest.mark.parametrize("where", ["metadata", "item"])
def test_nesting_orjson_refuses_is_left_to_the_plain_parse(depth: int, where: str) -> None:
    """Past msgspec's limit its pass raises RecursionError, past 1,024 levels orjson refuses: both
    end in the plain parse (and its 400), never in an error of crossfeed's."""
    deep = b"[" * depth + b"]" * depth
    raw = (
        b'{"model":"m","metadata":%s,"input":[]}' % deep
        if where == "metadata"
        else b'{"model":"m","input":[{"type":"x","v":%s}]}' % deep
    )
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    assert decode_create(raw) is None


@pytest.mark.parametrize(
    "value",
    [
        2**63 - 1,
        2**63,
        2**64 - 1,
        -(2**63),
        -0.0,
        0.1,
        1.7976931348623157e308,
        5e-324,
        {"deep": [[[[[[[[[[{"x": 1}]]]]]]]]]]},
        {"a": 1, "b": [True, False, None, "s"]},
    ],
)
def test_numbers_and_nesting_read_as_orjson_reads_them(value: Any) -> None:
    raw = orjson.dumps({"model": "m", "metadata": {"v": value}, "input": [{"type": "x", "v": value}]})
    same_as_orjson(raw)


@pytest.mark.parametrize(
    "number", [b"18446744073709551616", b"-9223372036854775809", b"1e-400", b"123456789012345678901234567890"]
)
def test_numbers_past_64_bits_read_as_orjson_reads_them(number: bytes) -> None:
    same_as_orjson(b'{"model":"m","temperature":%s,"input":[{"type":"x","v":%s}]}' % (number, number))


def test_duplicate_keys_keep_the_last_as_orjson_does() -> None:
    raw = b'{"model":"a","model":"b","input":[{"type":"x","k":1,"k":2}],"input":[{"type":"y"}]}'
    assert same_as_orjson(raw) == {"model": "b", "input": [{"type": "y"}]}


def test_a_string_input() -> None:
    assert same_as_orjson(b'{"input":"hello","model":"m","stream":true}') == {
        "model": "m",
        "input": "hello",
        "stream": True,
    }


def test_the_surrogate_checks_this_relies_on() -> None:
    """The module leaves surrogate escapes to msgspec's pass over a span: it must refuse exactly
    what orjson refuses (a msgspec that stops doing so fails here, not in production)."""
    cases = [
        rb'"\ud800"',
        rb'"\ud800x"',
        rb'"\udc00"',
        rb'"\ud800\u0041"',
        rb'"\ud800\ud800"',
        rb'"a\udfffb"',
        rb'"\ud83d\ude00"',
        rb'"\uDBFF\uDFFF"',
        rb'"\u0000\u00e9"',
    ]
    for span in cases:
        try:
            orjson.loads(span)
            orjson_ok = True
        except orjson.JSONDecodeError:
            orjson_ok = False
        try:
            msgspec.json.decode(b'{"a":%s}' % span, type=dict[str, msgspec.Raw])
            msgspec_ok = True
        except msgspec.DecodeError:
            msgspec_ok = False
        assert msgspec_ok == orjson_ok, span


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.dictionaries(st.sampled_from(["type", "id", "output", "content", "x"]), JSON), max_size=5),
    meta=JSON,
    long=st.booleans(),
)
def test_any_body_reads_as_orjson_reads_it(items: list[dict[str, Any]], meta: Any, long: bool) -> None:
    if long:
        items.append({"type": "function_call_output", "call_id": "c", "output": LONG})
    try:
        raw = orjson.dumps({"model": "m", "metadata": meta, "input": items})
    except orjson.JSONEncodeError:  # an integer orjson does not write
        return
    same_as_orjson(raw)


# -- WebSocket frames (decode_create_frame) ------------------------------------------------------


def test_a_websocket_frame_reads_as_orjson_reads_it() -> None:
    """A ``response.create`` text frame (a ``str``): its ``type``, ``stream_id`` and ``generate``
    first, then the body's fields; the long outputs kept as in a POST body."""
    body = codex_history()
    frame = orjson.dumps({"input": body["input"], "type": "response.create", "stream_id": "s1", "generate": True})
    event = decode_create_frame(frame.decode())
    assert event is not None
    assert list(event)[:3] == ["type", "stream_id", "generate"]
    assert plain(event) == orjson.loads(frame)
    assert len(kept(event)) == 6
    assert plain(decode_create_frame(frame)) == plain(event)  # bytes read alike
    assert decode_create(frame) is None  # a POST body has no `type`: the plain parse says what is wrong


@pytest.mark.parametrize(
    "frame",
    [
        '{"type":"response.create","model":"\ud800","input":"%s"}',  # a lone surrogate, escaped
        '{"type":"response.create","model":"m","input":"%s","extension":1}',
        '{"type":"response.create","model":"m","input":7}',
        '{"type":"response.create","model":"m","input":"%s",}',
    ],
    ids=["lone-surrogate", "unlisted-field", "input-shape", "not-json"],
)
def test_a_frame_of_another_shape_is_left_to_the_plain_parse(frame: str) -> None:
    assert decode_create_frame(frame.replace("%s", "x" * RAW_OUTPUT_MIN)) is None


def test_a_str_holding_a_lone_surrogate_is_left_to_the_plain_parse() -> None:
    """Not a frame aiohttp gives (it decodes a text frame strictly), but a ``str`` can hold one:
    orjson refuses it, and so does this, with None rather than an error of its own."""
    frame = '{"type":"response.create","model":"' + chr(0xD800) + '","input":"x"}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(frame)
    assert decode_create_frame(frame) is None
