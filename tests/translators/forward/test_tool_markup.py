from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.forward.tool_markup import ToolMarkupParser
from crossfeed.translators.options import Dialect

DIALECTS: tuple[str, ...] = get_args(Dialect)


def merged(pieces: list[Any]) -> list[tuple[str, ...]]:
    """Adjacent text pieces joined; every piece checked for shape on the way."""
    out: list[tuple[str, ...]] = []
    for piece in pieces:
        assert isinstance(piece, tuple)
        if piece[0] == "text":
            assert len(piece) == 2 and isinstance(piece[1], str) and piece[1], piece
            if out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1] + piece[1])
                continue
        else:
            assert piece[0] == "call" and len(piece) == 3, piece
            assert isinstance(piece[1], str) and isinstance(piece[2], str)
            assert isinstance(json.loads(piece[2]), dict)
        out.append(tuple(piece))
    return out


def run(dialect: str, chunks: list[str], schemas: dict[str, Any] | None = None) -> list[tuple[str, ...]]:
    parser = ToolMarkupParser(dialect, schemas)  # type: ignore[arg-type]
    out: list[Any] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    out += parser.finish()
    return merged(out)


def call(name: str, args: dict[str, Any]) -> tuple[str, str, str]:
    return ("call", name, json.dumps(args, ensure_ascii=False, separators=(",", ":")))


def text(s: str) -> tuple[str, str]:
    return ("text", s)


WEATHER_QC = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
)
SCHEMAS = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}

# (dialect, stream, schemas, pieces)
CASES: list[tuple[str, str, dict[str, Any] | None, list[tuple[str, ...]]]] = [
    # hermes
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        None,
        [call("get_weather", {"city": "Paris"})],
    ),
    (
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1, "y": [true, null]}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\nDone.',
        None,
        [text("Let me check.\n"), call("a", {"x": 1, "y": [True, None]}), call("b", {}), text("\nDone.")],
    ),
    (
        "hermes",
        '<tool_call>{"name": "f", "arguments": "{\\"q\\": \\"x\\", \\"n\\": 2}"}</tool_call>',
        None,
        [call("f", {"q": "x", "n": 2})],
    ),
    (
        "hermes",
        '<tool_call>{"name": "say", "arguments": {"t": "héllo </tool_call> {[\\"q\\\\"}}</tool_call>\n\n',
        None,
        [call("say", {"t": 'héllo </tool_call> {["q\\'})],
    ),
    ("hermes", '<tool_call>{"name": "noargs"}</tool_call> ok', None, [call("noargs", {}), text(" ok")]),
    # qwen3_coder
    ("qwen3_coder", WEATHER_QC, None, [call("get_weather", {"city": "Paris", "days": 3})]),
    ("qwen3_coder", WEATHER_QC, SCHEMAS, [call("get_weather", {"city": "Paris", "days": 3})]),
    (
        "qwen3_coder",
        WEATHER_QC,
        {"get_weather": {"properties": {"days": {"type": "string"}}}},
        [call("get_weather", {"city": "Paris", "days": "3"})],
    ),
    (
        "qwen3_coder",
        WEATHER_QC,
        {"get_weather": {"properties": {"days": {"type": ["string"]}}}},
        [call("get_weather", {"city": "Paris", "days": "3"})],
    ),
    (
        "qwen3_coder",
        WEATHER_QC,
        {"get_weather": {"properties": {"days": {"type": ["integer", "string"]}}}},
        [call("get_weather", {"city": "Paris", "days": 3})],
    ),
    (
        "qwen3_coder",
        'I will write it.\n<function=write>\n<parameter=path>\n"a.txt"\n</parameter>\n'
        '<parameter=body>\n\nline 1\n\nline 2\n\n</parameter>\n<parameter=opts>\n{"mode": [1, 2]}\n'
        "</parameter>\n</function>\nThere.",
        {"write": {"properties": {"path": {"type": "string"}}}},
        [
            text("I will write it.\n"),
            call("write", {"path": '"a.txt"', "body": "\nline 1\n\nline 2\n", "opts": {"mode": [1, 2]}}),
            text("\nThere."),
        ],
    ),
    (
        "qwen3_coder",
        "<tool_call>\n<function=a>\n<parameter=x>\ntrue\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=b>\n</function>\n</tool_call>\n<function=c>\n<parameter=s>\n"
        "not json\n</parameter>\n</function>\n</tool_call>",
        None,
        [call("a", {"x": True}), call("b", {}), call("c", {"s": "not json"})],
    ),
    # mistral
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', None, [call("get_weather", {"city": "Paris"})]),
    (
        "mistral",
        'Checking. [TOOL_CALLS]a[ARGS]{"x": {"y": "}]"}}[TOOL_CALLS]b_2[ARGS]{}\nafter',
        None,
        [text("Checking. "), call("a", {"x": {"y": "}]"}}), call("b_2", {}), text("\nafter")],
    ),
    (
        "mistral",
        'Sure [TOOL_CALLS][{"name": "a", "arguments": {"x": "]}"}}, '
        '{"name": "b", "arguments": {}, "id": "abc123XYZ"}] after',
        None,
        [text("Sure "), call("a", {"x": "]}"}), call("b", {}), text(" after")],
    ),
    ("mistral", '[TOOL_CALLS][{"name": "s", "arguments": "{\\"k\\": \\"v\\"}"}]', None, [call("s", {"k": "v"})]),
]

MALFORMED = [
    ("hermes", '<tool_call>{"name": bad}</tool_call>'),
    ("hermes", '<tool_call>\n{"arguments": {}}\n</tool_call>'),
    ("hermes", '<tool_call>{"name": "", "arguments": {}}</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n'),
    ("hermes", "<tool_call>hello</tool_call>"),
    ("hermes", '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "f"} trailing</tool_call>'),
    ("hermes", "<tool_call>"),
    ("qwen3_coder", "<function=>\n</function>"),
    ("qwen3_coder", "<tool_call>\nhello\n</tool_call>"),
    ("qwen3_coder", "<function=f>\n<parameter=a>\n1\n</function>"),
    ("qwen3_coder", "<function=f\n>\n</function>"),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<oops>\n</function>\n</tool_call>"),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n"),
    ("qwen3_coder", "<function=f>\n<parameter=>\n1\n</parameter>\n</function>"),
    ("mistral", '[TOOL_CALLS]f[ARGS]{"a": }'),
    ("mistral", "[TOOL_CALLS][ARGS]{}"),
    ("mistral", '[TOOL_CALLS]f{"a": 1}'),
    ("mistral", '[TOOL_CALLS][{"arguments": {}}]'),
    ("mistral", "[TOOL_CALLS][]"),
    ("mistral", '[TOOL_CALLS]f[ARGS]{"a": 1'),
    ("mistral", '[TOOL_CALLS]f[ARGS]"str"'),
    ("mistral", "[TOOL_CALLS]f[ARGS][1, 2]"),
    ("mistral", "[TOOL_CALLS] plain words"),
]

PLAIN = [
    "Hello, world!",
    "a < b and c > d; x[1] = y[2]",
    "<b>bold</b> <tool> <tool_calls> <toolcall> [TOOL] [x] [TOOL_CALL] [TOOL_CALLS",
    "html <div class='a'>[1, 2]</div><function x> <function> </function> </tool_call> [ARGS]",
    "ends with <tool_cal",
    "ends with <function",
    "ends with [TOOL_CALLS",
    "<<<[[[ <tool_<tool_c [TOOL_[TOOL_C",
    "ünïcödé <ü> [ü] 😀",
    "",
]


def every_split(stream: str, pair_limit: int = 90) -> Iterator[list[str]]:
    """The stream cut at every single split point, at every pair for a short one, and char by char."""
    n = len(stream)
    for i in range(1, n):
        yield [stream[:i], stream[i:]]
    if n <= pair_limit:
        for i, j in itertools.combinations(range(1, n), 2):
            yield [stream[:i], stream[i:j], stream[j:]]
    yield list(stream)


@pytest.mark.parametrize(("dialect", "stream", "schemas", "pieces"), CASES)
def test_calls(dialect: str, stream: str, schemas: dict[str, Any] | None, pieces: list[tuple[str, ...]]) -> None:
    assert run(dialect, [stream], schemas) == pieces


@pytest.mark.parametrize(("dialect", "stream", "schemas", "pieces"), CASES)
def test_calls_split_anywhere(
    dialect: str, stream: str, schemas: dict[str, Any] | None, pieces: list[tuple[str, ...]]
) -> None:
    for chunks in every_split(stream, pair_limit=130):
        assert run(dialect, chunks, schemas) == pieces, chunks


@pytest.mark.parametrize(("dialect", "stream"), MALFORMED)
def test_malformed_is_text_verbatim(dialect: str, stream: str) -> None:
    for chunks in [[stream], *every_split(stream)]:
        assert run(dialect, chunks) == [text(stream)], chunks


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", PLAIN)
def test_plain_text_unchanged(dialect: str, stream: str) -> None:
    expected = [text(stream)] if stream else []
    for chunks in [[stream], *every_split(stream, pair_limit=40)]:
        assert run(dialect, chunks) == expected, chunks


def test_dialects() -> None:
    assert DIALECTS == ("hermes", "qwen3_coder", "mistral")
    with pytest.raises(ValueError):
        ToolMarkupParser("pythonic")  # type: ignore[arg-type]


def test_text_is_released_early() -> None:
    p = ToolMarkupParser("hermes")
    assert p.feed("Hello ") == [("text", "Hello ")]
    assert p.feed("Hi <tool") == [("text", "Hi ")]
    assert p.feed("box> and <") == [("text", "<toolbox> and ")]
    assert p.feed("b>") == [("text", "<b>")]
    assert p.feed("") == []
    assert p.finish() == []

    q = ToolMarkupParser("qwen3_coder")
    assert q.feed("see <func") == [("text", "see ")]
    assert q.feed("tion()") == [("text", "<function()")]
    assert q.feed(" x <tool_c") == [("text", " x ")]
    assert q.finish() == [("text", "<tool_c")]

    m = ToolMarkupParser("mistral")
    assert m.feed("a [1] [TOOL") == [("text", "a [1] ")]
    assert m.feed("S]") == [("text", "[TOOLS]")]
    assert m.feed("<tool_call>") == [("text", "<tool_call>")]  # not this dialect's markup
    assert m.finish() == []


def test_calls_are_emitted_when_complete_not_at_finish() -> None:
    p = ToolMarkupParser("hermes")
    assert p.feed('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call') == []
    assert p.feed(">") == [call("f", {})]
    assert p.feed("\n") == []  # whitespace after a call: dropped if another call or the end follows
    assert p.feed("More") == [text("\nMore")]
    assert p.finish() == []

    q = ToolMarkupParser("qwen3_coder")
    assert q.feed("<function=f>\n<parameter=a>\n1\n</parameter>\n</function") == []
    assert q.feed(">\n</tool_call>") == [call("f", {"a": 1})]
    assert q.finish() == []

    m = ToolMarkupParser("mistral")
    assert m.feed('[TOOL_CALLS]f[ARGS]{"a": {"b": 1}') == []
    assert m.feed("}") == [call("f", {"a": {"b": 1}})]
    assert m.feed('[TOOL_CALLS][{"name": "g", "arguments": {}}]') == [call("g", {})]
    assert m.finish() == []


def test_bad_markup_then_a_call() -> None:
    stream = '<tool_call>oops <tool_call>{"name": "f", "arguments": {"a": "b"}}</tool_call>'
    for chunks in [[stream], *every_split(stream, pair_limit=0)]:
        assert run("hermes", chunks) == [text("<tool_call>oops "), call("f", {"a": "b"})]
    # an unclosed call: at the end its tag is text and what follows is read again
    stream = '<tool_call>{"name": "a", <tool_call>{"name": "b"}</tool_call> tail'
    for chunks in [[stream], *every_split(stream, pair_limit=0)]:
        assert run("hermes", chunks) == [text('<tool_call>{"name": "a", '), call("b", {}), text(" tail")]
    stream = "<tool_call>\n<function=f>\n<parameter=a>\nx</function>\n<function=g>\n</function>"
    for chunks in [[stream], *every_split(stream, pair_limit=0)]:
        assert run("qwen3_coder", chunks) == [
            text("<tool_call>\n<function=f>\n<parameter=a>\nx</function>\n"),
            call("g", {}),
        ]


def test_whitespace_between_and_after_calls() -> None:
    one = '<tool_call>{"name": "f"}</tool_call>'
    assert run("hermes", ["Intro\n\n" + one + " \n " + one + "\n\n"]) == [
        text("Intro\n\n"),
        call("f", {}),
        call("f", {}),
    ]
    assert run("hermes", [one + "  <b>"]) == [call("f", {}), text("  <b>")]
    assert run("hermes", [one + "  <tool_c"]) == [call("f", {}), text("  <tool_c")]
    assert run("qwen3_coder", ["<function=f>\n</function>\n</tool_call>\n</tool_call>x"]) == [call("f", {}), text("x")]


def test_large_value_streamed_in_small_chunks() -> None:
    body = "".join(f'line {i} <b>[x]</b> "q" {{}}\n' for i in range(3000))
    stream = f"<function=write>\n<parameter=body>\n{body}\n</parameter>\n</function>"
    chunks = [stream[i : i + 4] for i in range(0, len(stream), 4)]
    assert run("qwen3_coder", chunks, {"write": {"properties": {"body": {"type": "string"}}}}) == [
        call("write", {"body": body})
    ]
    args = {"body": body, "n": [1, {"k": "]}\\"}]}
    stream = "[TOOL_CALLS]write[ARGS]" + json.dumps(args)
    chunks = [stream[i : i + 3] for i in range(0, len(stream), 3)]
    assert run("mistral", chunks) == [call("write", args)]


FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<function=f>",
    "</function>",
    "<parameter=a>",
    "</parameter>",
    "[TOOL_CALLS]",
    "[ARGS]",
    '{"name": "f", "arguments": {"a": 1}}',
    '[{"name": "g"}]',
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    "\n",
    " ",
    "x",
    "<",
    "f",
    "1",
    '{"a": "b"}',
    "<tool_",
    "[TOOL_",
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DIALECTS), st.lists(st.sampled_from(FRAGMENTS), max_size=16), st.data())
def test_split_invariance_and_nothing_lost(dialect: str, fragments: list[str], data: st.DataObject) -> None:
    stream = "".join(fragments)
    whole = run(dialect, [stream])
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=8)))
    bounds = [0, *cuts, len(stream)]
    assert run(dialect, [stream[a:b] for a, b in itertools.pairwise(bounds)]) == whole
    assert run(dialect, list(stream)) == whole
    if not any(p[0] == "call" for p in whole):
        assert whole == ([text(stream)] if stream else [])
