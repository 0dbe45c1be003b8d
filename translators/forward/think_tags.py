"""Reasoning inlined as ``<think>...</think>`` at the start of the content.

Some servers (a DeepSeek-R1 distill on vLLM without a reasoning parser, Groq's ``raw`` reasoning
format, Together) put the chain of thought in ``content`` between think tags. With the upstream's
``think_tags`` option on, ``ThinkSplitter`` separates it as the text streams: tags split across
chunks are held back until they are complete, so nothing of the tags leaks either way.

Rules:
  - Only a ``<think>`` that opens the content (after whitespace) starts reasoning; any other
    content is text, untouched.
  - Reasoning ends at the first ``</think>``; whitespace right after it is dropped, the rest is text.
  - At the end of the stream, whatever is held back is released as what it was (an unclosed
    ``<think>`` is reasoning).
  - A splitter made ``inside`` starts past the ``<think>``: a continued reasoning (prefill.py).
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"
_START, _IN, _AFTER, _TEXT = range(4)


class ThinkSplitter:
    __slots__ = ("_state", "_held")

    def __init__(self, *, inside: bool = False) -> None:
        """``inside``: the content starts inside a think block already (the continuation of
        reasoning prefilled as ``<think>`` + its text; translators/forward/prefill.py)."""
        self._state = _IN if inside else _START
        self._held = ""

    @property
    def in_text(self) -> bool:
        """Past the think block and its whitespace: the rest is text, untouched."""
        return self._state == _TEXT

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Pieces ``("reasoning" | "text", str)`` that are certain so far."""
        state = self._state
        if state == _TEXT:
            return [("text", text)]
        held = self._held + text
        self._held = ""
        out: list[tuple[str, str]] = []
        if state == _START:
            stripped = held.lstrip()
            if not stripped or (len(stripped) < len(OPEN) and OPEN.startswith(stripped)):
                self._held = held  # too short to decide
                return out
            if not stripped.startswith(OPEN):
                self._state = _TEXT
                return [("text", held)]
            held = stripped[len(OPEN) :]
            state = self._state = _IN
        if state == _IN:
            end = held.find(CLOSE)
            if end < 0:
                keep = _partial_suffix(held, CLOSE)
                if len(held) > keep:
                    out.append(("reasoning", held[: len(held) - keep]))
                self._held = held[len(held) - keep :]
                return out
            if end:
                out.append(("reasoning", held[:end]))
            held = held[end + len(CLOSE) :]
            state = self._state = _AFTER
        if state == _AFTER:
            held = held.lstrip()
            if held:
                self._state = _TEXT
                out.append(("text", held))
        return out

    def finish(self) -> list[tuple[str, str]]:
        held, self._held = self._held, ""
        if not held:
            return []
        if self._state == _IN:
            return [("reasoning", held)]
        return [("text", held)] if held.strip() or self._state != _AFTER else []


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
