"""Stop sequences, applied by crossfeed itself: the Responses API has no ``stop`` parameter.

A chat client's ``stop`` (up to 4 strings) ends the answer's content before the first stop
sequence, which is not part of it. In front of a Responses backend crossfeed cuts the text
itself, as it streams (``StopMatcher``, used by ``translators.reverse.machine``) or whole
(``cut``, used by ``translators.reverse.body``). Both give the same answer for the same text,
however the text is split into pieces.

Rules:
  - The text ends where a stop sequence first *completes*, as a server stops generating as soon
    as one appears; the cut is at that occurrence's start. When several complete at the same
    position, the one that starts first (the longest) wins. So ``stop=["abcd", "c"]`` cuts
    ``"abcd"`` to ``"ab"``: ``c`` is complete before ``abcd`` is.
  - While streaming, only the longest suffix of the text that could still be the start of a
    stop sequence is held back; it is released as soon as the next text shows it is not one.
  - After the cut nothing more is released. At the end of the text whatever was held back is
    released (it was not a stop sequence).
  - Empty strings are not stop sequences (they would cut everything); duplicates count once.
"""

from __future__ import annotations

from collections.abc import Iterable


def normalize(stops: Iterable[str]) -> tuple[str, ...]:
    """The stop sequences that can match: non-empty, each once, in the order given."""
    return tuple(dict.fromkeys(s for s in stops if s))


def find_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Where ``text`` is cut: the start of the stop sequence that completes first (ties: the one
    that starts first), or None when no stop sequence occurs in it."""
    best_end = best_start = -1
    for s in stops:
        start = text.find(s)
        if start >= 0:
            end = start + len(s)
            if best_end < 0 or end < best_end or (end == best_end and start < best_start):
                best_end, best_start = end, start
    return None if best_start < 0 else best_start


def cut(text: str, stops: Iterable[str]) -> tuple[str, bool]:
    """``text`` up to the first stop sequence, and whether one was found (the whole-text form
    of ``StopMatcher``)."""
    at = find_stop(text, normalize(stops))
    return (text, False) if at is None else (text[:at], True)


class StopMatcher:
    """Cuts a streamed text at the first stop sequence. ``feed(piece)`` returns the text certain
    to come before any stop sequence (possibly ""); ``stopped`` is true once one was found (the
    last ``feed`` returned the text up to it); ``finish()`` returns what was held back."""

    __slots__ = ("_stops", "_firsts", "_longest", "_held", "stopped")

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = normalize(stops)
        if not self._stops:
            raise ValueError("StopMatcher needs at least one non-empty stop sequence")
        self._firsts = frozenset(s[0] for s in self._stops)
        self._longest = max(len(s) for s in self._stops)
        self._held = ""
        self.stopped = False

    @property
    def held(self) -> str:
        """The text held back: it may be the start of a stop sequence."""
        return self._held

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        buf = self._held + text if self._held else text
        # The held text holds no whole stop sequence, and every occurrence that begins in text
        # already released would have been held: an occurrence ending first is in buf.
        at = find_stop(buf, self._stops)
        if at is not None:
            self.stopped = True
            self._held = ""
            return buf[:at]
        keep = self._partial(buf)
        if keep:
            self._held = buf[-keep:]
            return buf[:-keep]
        self._held = ""
        return buf

    def finish(self) -> str:
        """The end of the text: what was held back is released (nothing after a stop)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop sequence."""
        n = len(buf)
        firsts = self._firsts
        for i in range(max(0, n - self._longest + 1), n):
            if buf[i] in firsts:
                tail = buf[i:]
                for s in self._stops:
                    if len(s) > len(tail) and s.startswith(tail):
                        return n - i
        return 0
