"""Tool calls written as markup in the ``content`` text.

A chat server started without a tool parser (vLLM or SGLang without ``--tool-call-parser``)
streams the model's tool-call markup as plain ``content``. With the upstream's tool markup option
set to a dialect, ``ToolMarkupParser`` turns that markup into calls as the text streams, across
chunk boundaries; all other text is left untouched.

Dialects (`` / `` stands for a line break):
  - ``hermes`` (Hermes 2 Pro, Qwen2.5, Qwen3): ``<tool_call>`` / ``{"name": "get_weather",
    "arguments": {"city": "Paris"}}`` / ``</tool_call>``. ``arguments`` is an object or a JSON
    string holding one; missing, it is ``{}``.
  - ``qwen3_coder`` (Qwen3-Coder, Qwen3.5, Nemotron Nano 3): ``<tool_call>`` /
    ``<function=get_weather>`` / ``<parameter=city>`` / ``Paris`` / ``</parameter>`` / ... /
    ``</function>`` / ``</tool_call>``. A value is the text between ``<parameter=NAME>`` and
    ``</parameter>`` less one leading and one trailing newline. It stays that text when the
    function's schema types the parameter as only ``"string"``; otherwise it is the JSON it parses
    as, if it does. The opening ``<tool_call>`` may be missing (the call starts at
    ``<function=``); a ``</tool_call>`` after ``</function>`` is dropped.
  - ``mistral``: ``[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}`` (one call per tag), or the
    older ``[TOOL_CALLS][{"name": "get_weather", "arguments": {...}}, ...]``. The JSON ends where
    its value is complete (brace and bracket depth, outside strings).

Rules:
  - Text outside markup passes through at once; only a suffix that could begin an opening tag
    (``<tool_call>``, ``<function=``, ``[TOOL_CALLS]``) is held back, until it cannot.
  - A call is emitted as soon as its markup is complete: ``("call", name, arguments)``, the
    arguments a compact JSON object. Whitespace after a call is dropped when another call or the
    end of the stream follows; before other text it stays, with that text.
  - Nothing is lost: markup that turns out malformed (JSON that does not parse, no name, a tag
    out of place, a call still open at the end) is text, exactly as received: its opening tag is
    text, and what follows the tag is read again (it may hold a call).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Mapping
from typing import Any, Literal

from crossfeed.translators.options import Dialect

Piece = tuple[Literal["text"], str] | tuple[Literal["call"], str, str]
Scan = Generator[None, None, Any]

TC_OPEN, TC_CLOSE = "<tool_call>", "</tool_call>"
FN_OPEN, FN_CLOSE = "<function=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
MI_OPEN, MI_ARGS = "[TOOL_CALLS]", "[ARGS]"
_OPENERS = {"hermes": (TC_OPEN,), "qwen3_coder": (TC_OPEN, FN_OPEN), "mistral": (MI_OPEN,)}
_TEXT, _CALL, _GAP = range(3)
_BAD = object()  # what text that is not JSON loads as

_WS = re.compile(r"\s*")
_TAG_NAME = re.compile(r"[^<>\n]*")  # the NAME of <function=NAME> and <parameter=NAME>, before ">"
_IDENT = re.compile(r"[\w.\-]*")  # a mistral function name
_JSON_STOP = re.compile(r'[{}\[\]"]')
_STR_STOP = re.compile(r'["\\]')


class ToolMarkupParser:
    """``schemas``: a function's name to its JSON-schema ``parameters`` (qwen3_coder types with it)."""

    __slots__ = ("_dialect", "_schemas", "_openers", "_closers", "_trigger", "_state", "_buf", "_scan", "_open_len")

    def __init__(self, dialect: Dialect, schemas: Mapping[str, Any] | None = None) -> None:
        if dialect not in _OPENERS:
            raise ValueError(f"unknown tool markup dialect {dialect!r}")
        self._dialect = dialect
        self._schemas = schemas or {}
        self._openers = _OPENERS[dialect]
        self._closers = (TC_CLOSE,) if dialect == "qwen3_coder" else ()  # dropped after a call
        self._trigger = self._openers[0][0]  # every opener of a dialect starts with this character
        self._state = _TEXT
        self._buf = ""  # held text; in _CALL it starts with the opening tag
        self._scan: Scan | None = None  # in _CALL: the resumable scan of the markup in _buf
        self._open_len = 0

    def feed(self, text: str) -> list[Piece]:
        """Pieces ``("text", str)`` and ``("call", name, arguments)`` that are certain so far."""
        if self._state == _TEXT and not self._buf and self._trigger not in text:
            return [("text", text)] if text else []  # the hot case: plain text
        buf, self._buf = self._buf, ""
        buf += text  # in place (nothing else holds the buffer): a long call is not copied per chunk
        self._buf = buf
        out: list[Piece] = []
        self._run(out)
        return out

    @property
    def holding(self) -> bool:
        """Markup that may be a call is held (an opening tag under way, a call being read, the
        gap after one): the text so far is not at a boundary of its own."""
        return self._state != _TEXT or bool(self._buf)

    def finish(self) -> list[Piece]:
        """End of the stream: a call still open is text (and what follows its tag is read again)."""
        out: list[Piece] = []
        while self._state == _CALL:
            self._reject(out)
            self._run(out)
        held, self._buf = self._buf, ""
        if held and (self._state == _TEXT or held.strip()):
            _text(out, held)
        self._state = _TEXT
        return out

    def _run(self, out: list[Piece]) -> None:
        while True:
            state = self._state
            if state == _CALL:
                scan = self._scan
                assert scan is not None  # set with the _CALL state
                try:
                    next(scan)
                    return  # the markup needs more text
                except StopIteration as stop:
                    done = stop.value
                if done is None:
                    self._reject(out)
                    continue
                end, calls = done
                out.extend(("call", name, arguments) for name, arguments in calls)
                self._buf = self._buf[end:]
                self._state, self._scan = _GAP, None
                continue
            buf = self._buf
            if state == _GAP:
                ws = _WS.match(buf)
                assert ws is not None  # a star pattern matches the empty string too
                at = ws.end()
                if buf.startswith(self._closers, at):
                    self._buf = buf[at + len(TC_CLOSE) :]
                    continue
                rest = buf[at:]
                if not rest or _partial(rest, self._openers + self._closers):
                    return  # cannot tell yet whether the whitespace is dropped
                if rest.startswith(self._openers):
                    self._buf = buf = rest
                self._state = _TEXT
            found = [(at, tag) for tag in self._openers if (at := buf.find(tag)) >= 0]
            if not found:
                keep = _held_back(buf, self._openers, self._trigger)
                _text(out, buf[: len(buf) - keep])
                self._buf = buf[len(buf) - keep :]
                return
            at, opener = min(found)
            _text(out, buf[:at])
            self._buf = buf[at:]
            self._state, self._open_len = _CALL, len(opener)
            self._scan = (
                self._mistral()
                if self._dialect == "mistral"
                else (self._hermes() if self._dialect == "hermes" else self._qwen3_coder())
            )

    def _reject(self, out: list[Piece]) -> None:
        """The markup in ``_buf`` is not a call: its opening tag is text, the rest is read again."""
        _text(out, self._buf[: self._open_len])
        self._buf = self._buf[self._open_len :]
        self._state, self._scan = _TEXT, None

    # The scans: generators over ``_buf`` that yield while they need more text, and return
    # ``(end, [(name, arguments), ...])`` for complete markup, or None for markup that is not.

    def _hermes(self) -> Scan:
        i = yield from self._match(_WS, len(TC_OPEN))
        if self._buf[i] != "{":
            return None
        end = yield from self._json(i)
        j = yield from self._match(_WS, end)
        tag, j = yield from self._expect(j, (TC_CLOSE,))
        call = _call(_loads(self._buf[i:end])) if tag == 0 else None
        return None if call is None else (j, [call])

    def _qwen3_coder(self) -> Scan:
        if self._buf.startswith(TC_OPEN):
            i = yield from self._match(_WS, len(TC_OPEN))
            tag, i = yield from self._expect(i, (FN_OPEN,))
            if tag < 0:
                return None
        else:
            i = len(FN_OPEN)
        j = yield from self._match(_TAG_NAME, i)
        name = self._buf[i:j].strip() if self._buf[j] == ">" else ""
        if not name:
            return None
        schema = self._schemas.get(name)
        props = schema.get("properties") if isinstance(schema, Mapping) else None
        args: dict[str, Any] = {}
        i = j + 1
        while True:
            i = yield from self._match(_WS, i)
            tag, i = yield from self._expect(i, (PARAM_OPEN, FN_CLOSE))
            if tag < 0:
                return None
            if tag == 1:
                return i, [(name, _dumps(args))]
            j = yield from self._match(_TAG_NAME, i)
            param = self._buf[i:j].strip() if self._buf[j] == ">" else ""
            if not param:
                return None
            k = yield from self._until(j + 1, PARAM_CLOSE)
            value = self._buf[j + 1 + (self._buf[j + 1] == "\n") : k]
            value = value[:-1] if value.endswith("\n") else value
            prop = props.get(param) if isinstance(props, Mapping) else None
            kind = prop.get("type") if isinstance(prop, Mapping) else None
            parsed = _BAD if kind in ("string", ["string"]) else _loads(value)
            args[param] = value if parsed is _BAD else parsed
            i = k + len(PARAM_CLOSE)

    def _mistral(self) -> Scan:
        i = yield from self._match(_WS, len(MI_OPEN))
        if self._buf[i] in "[{":  # the older form: a JSON array of calls (or one call)
            end = yield from self._json(i)
            value = _loads(self._buf[i:end])
            calls = [_call(item) for item in (value if isinstance(value, list) else [value])]
            return (end, calls) if calls and None not in calls else None
        j = yield from self._match(_IDENT, i)
        if j == i:
            return None
        tag, k = yield from self._expect(j, (MI_ARGS,))
        if tag < 0:
            return None
        k = yield from self._match(_WS, k)
        if self._buf[k] != "{":
            return None
        end = yield from self._json(k)
        args = _loads(self._buf[k:end])
        return (end, [(self._buf[i:j], _dumps(args))]) if isinstance(args, dict) else None

    # Scan steps: each reads on from index i, waiting (yielding) while the text ends too soon.

    def _match(self, pattern: re.Pattern[str], i: int) -> Scan:
        """The end of the run of ``pattern`` at i (that run followed by some other character)."""
        while True:
            run = pattern.match(self._buf, i)
            assert run is not None  # every pattern given is a star: it matches the empty string too
            i = run.end()
            if i < len(self._buf):
                return i
            yield

    def _expect(self, i: int, tags: tuple[str, ...]) -> Scan:
        """``(n, end)`` for the ``tags[n]`` at i, or ``(-1, i)`` when none of them is there."""
        while True:
            buf = self._buf
            for n, tag in enumerate(tags):
                if buf.startswith(tag, i):
                    return n, i + len(tag)
            if not _partial(buf[i:], tags):
                return -1, i
            del buf  # the scans hold no reference to the buffer while they wait (see feed)
            yield

    def _until(self, i: int, tag: str) -> Scan:
        while True:
            j = self._buf.find(tag, i)
            if j >= 0:
                return j
            i = max(i, len(self._buf) - len(tag) + 1)
            yield

    def _json(self, i: int) -> Scan:
        """The end of the JSON object or array at i (``{`` or ``[``): where its depth is back to 0."""
        depth, in_str = 0, False
        while True:
            buf = self._buf
            while True:
                m = (_STR_STOP if in_str else _JSON_STOP).search(buf, i)
                if m is None:
                    i = len(buf)
                    break
                i, c = m.end(), m.group()
                if c == "\\":
                    if i == len(buf):
                        i -= 1  # read the escape again with the character it escapes
                        break
                    i += 1
                elif c == '"':
                    in_str = not in_str
                elif c in "{[":
                    depth += 1
                else:
                    depth -= 1
                    if not depth:
                        return i
            del buf
            yield


def _call(obj: Any) -> tuple[str, str] | None:
    """``(name, arguments)`` from ``{"name": ..., "arguments": ...}``, or None."""
    if not isinstance(obj, dict):
        return None
    name, args = obj.get("name"), obj.get("arguments", {})
    if isinstance(args, str):
        args = _loads(args)
    if not isinstance(name, str) or not name or not isinstance(args, dict):
        return None
    return name, _dumps(args)


def _loads(text: str) -> Any:
    """The JSON value of ``text``, or ``_BAD`` (NaN and Infinity are not JSON)."""
    try:
        return json.loads(text, parse_constant=int)  # int() refuses "NaN", "Infinity", "-Infinity"
    except (ValueError, RecursionError):
        return _BAD


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(out: list[Piece], text: str) -> None:
    if text:
        if out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + text)
        else:
            out.append(("text", text))


def _partial(text: str, tags: tuple[str, ...]) -> bool:
    """Whether ``text`` is a proper prefix of one of ``tags``."""
    return any(len(text) < len(tag) and tag.startswith(text) for tag in tags)


def _held_back(text: str, tags: tuple[str, ...], trigger: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``tags``."""
    start = text.find(trigger, max(0, len(text) - max(map(len, tags)) + 1))
    while start >= 0:  # the first that fits is the longest
        if _partial(text[start:], tags):
            return len(text) - start
        start = text.find(trigger, start + 1)
    return 0
