"""What a backend may hide in its ``content`` text, taken out as the text streams.

Two profile switches read the content of a chat stream instead of passing it through: inline
``<think>`` reasoning (think_tags.py) and tool-call markup (tool_markup.py). ``ContentSplitter``
runs the ones a backend's profile turns on, in that order (reasoning opens the content; calls
come in the answer), and yields pieces the stream machine routes:

  ("reasoning", text) | ("text", text) | ("call", name, arguments)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.translators.forward.think_tags import ThinkSplitter
from crossfeed.translators.forward.tool_markup import Piece, ToolMarkupParser
from crossfeed.translators.options import Dialect

Split = tuple[str, str] | tuple[str, str, str]


class ContentSplitter:
    __slots__ = ("_think", "_markup", "calls")

    def __init__(
        self, *, think_tags: bool, tool_markup: Dialect | None, schemas: Mapping[str, Any] | None = None
    ) -> None:
        self._think = ThinkSplitter() if think_tags else None
        self._markup = ToolMarkupParser(tool_markup, schemas) if tool_markup else None
        self.calls = 0  # calls written as markup so far: the machine numbers them

    def feed(self, text: str) -> list[Split]:
        if self._think is None:
            return self._calls([("text", text)])
        return self._calls(self._think.feed(text))

    @property
    def in_call(self) -> bool:
        """A call written as markup may be under way (the parser holds it back)."""
        return self._markup is not None and self._markup.holding

    def finish(self) -> list[Split]:
        out = self._calls(self._think.finish()) if self._think is not None else []
        if self._markup is not None:
            out += self._markup.finish()
        return out

    def _calls(self, pieces: list[tuple[str, str]]) -> list[Split]:
        markup = self._markup
        if markup is None:
            return list(pieces)
        out: list[Split] = []
        for kind, text in pieces:
            if kind == "text":
                found: list[Piece] = markup.feed(text)
                out += found
            else:
                out.append((kind, text))
        return out


def function_schemas(request: Mapping[str, Any]) -> dict[str, Any]:
    """Function name -> parameters schema of the request's function tools (both wire shapes)."""
    out: dict[str, Any] = {}
    for tool in request.get("tools") or ():
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        inner = tool.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, dict) else tool
        name = fn.get("name")
        if isinstance(name, str):
            out[name] = fn.get("parameters")
    return out
