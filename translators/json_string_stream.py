"""Incremental extraction of one string field from a JSON object that arrives in fragments.

A custom (freeform) tool is offered to a chat backend as a function taking one string argument,
so the backend streams ``{"input": "*** Begin Patch\\n..."}`` in arbitrary fragments. The client
must receive the raw input as it streams, unescaped. ``JsonStringField.feed(fragment)`` returns
the newly decoded text (possibly ``""``), whatever the fragment boundaries: escapes such as
``\\n`` or ``\\u00e9`` and surrogate pairs split across fragments are held back until complete.

Rules:
  - Streaming starts once the text so far is ``{ "<key>" : "`` (whitespace allowed). If the
    object starts any other way, nothing streams; ``final()`` then resolves the value from the
    complete text.
  - ``final(full_text)`` returns the whole value: the field of the parsed object when the text is
    a JSON object holding a string there; otherwise the raw text itself (a model that ignored the
    wrapper and wrote the input directly loses nothing).
"""

from __future__ import annotations

import json
import re

_DECODER = json.JSONDecoder(strict=False)


class JsonStringField:
    __slots__ = ("_prefix_re", "_state", "_seek", "_pending", "emitted")

    _SEEK, _IN, _DONE, _OFF = range(4)

    def __init__(self, key: str) -> None:
        self._prefix_re = re.compile(r'\s*\{\s*"' + re.escape(key) + r'"\s*:\s*"')
        self._state = self._SEEK
        self._seek = ""
        self._pending = ""
        self.emitted: list[str] = []

    def feed(self, fragment: str) -> str:
        if self._state == self._IN:
            return self._consume(fragment)
        if self._state != self._SEEK:
            return ""
        self._seek += fragment
        m = self._prefix_re.match(self._seek)
        if m:
            self._state = self._IN
            rest, self._seek = self._seek[m.end() :], ""
            return self._consume(rest)
        if len(self._seek) > 256 or self._seek.lstrip()[:1] not in ("", "{"):
            self._state = self._OFF
        return ""

    def _consume(self, fragment: str) -> str:
        s = self._pending + fragment
        end = _closing_quote(s)
        if end >= 0:
            self._state = self._DONE
            body, self._pending = s[:end], ""
        else:
            cut = _safe_cut(s)
            body, self._pending = s[:cut], s[cut:]
        if not body:
            return ""
        text: str = _DECODER.decode('"' + body + '"')
        self.emitted.append(text)
        return text

    def final(self, full_text: str, key: str) -> str:
        try:
            obj = _DECODER.decode(full_text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get(key), str):
            value: str = obj[key]
            return value
        return full_text


def _closing_quote(s: str) -> int:
    """Index of the first unescaped ``"`` in ``s``, or -1."""
    i = s.find('"')
    while i >= 0:
        backslashes = 0
        j = i - 1
        while j >= 0 and s[j] == "\\":
            backslashes += 1
            j -= 1
        if backslashes % 2 == 0:
            return i
        i = s.find('"', i + 1)
    return -1


def _safe_cut(s: str) -> int:
    """Longest prefix of ``s`` that ends on a complete escape (a high surrogate waits for its pair)."""
    n = len(s)
    i = s.find("\\")
    while i >= 0:
        if i + 1 >= n:
            return i
        if s[i + 1] != "u":
            i = s.find("\\", i + 2)
            continue
        if i + 6 > n:
            return i
        if s[i + 2 : i + 4].lower() in ("d8", "d9", "da", "db") and (i + 6 == n or (s[i + 6] == "\\" and i + 12 > n)):
            return i
        i = s.find("\\", i + 6)
    return n
