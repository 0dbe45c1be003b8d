"""``url_citation`` annotations for a message that cites web search results (pure).

A citing span is one of, in this order of precedence (spans never overlap):

  - a markdown link whose target is a result's URL: ``[text](https://...)``, the whole link;
  - a result's URL written out: the URL itself, nothing around it;
  - a numbered marker ``[n]`` for the n-th result of the response (the numbers the search
    results were given, counted across every search of the response): the marker.

``start_index``/``end_index`` count characters (code points) of the part's text, end exclusive,
as the Responses API does.
"""

from __future__ import annotations

import re
from typing import Any

_LINK = re.compile(r"\[([^\[\]\n]{1,500})\]\((https?://[^\s()]{1,2048})\)")
_MARKER = re.compile(r"\[(\d{1,3})\](?!\()")


def _norm(url: str) -> str:
    return url.rstrip("/")


def citations(text: str, sources: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The annotations of ``text`` for ``sources`` (url, title), in order of their spans."""
    if not sources or not text:
        return []
    titles: dict[str, tuple[str, str]] = {}
    for url, title in sources:
        titles.setdefault(_norm(url), (url, title))
    spans: list[tuple[int, int, str, str]] = []

    def free(a: int, b: int) -> bool:
        return all(b <= s or a >= e for s, e, _, _ in spans)

    for m in _LINK.finditer(text):
        hit = titles.get(_norm(m.group(2)))
        if hit is not None:
            spans.append((m.start(), m.end(), *hit))
    for url, title in sources:
        start = text.find(url)
        while start != -1:
            end = start + len(url)
            if free(start, end):
                spans.append((start, end, url, title))
            start = text.find(url, end)
    for m in _MARKER.finditer(text):
        n = int(m.group(1))
        if 1 <= n <= len(sources) and free(m.start(), m.end()):
            spans.append((m.start(), m.end(), *sources[n - 1]))
    spans.sort()
    return [
        {"type": "url_citation", "url": url, "title": title, "start_index": a, "end_index": b}
        for a, b, url, title in spans
    ]
