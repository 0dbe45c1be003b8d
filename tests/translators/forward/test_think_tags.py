from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.translators.forward.think_tags import ThinkSplitter
from tests.support.splitting import split_points


def split(text: str, pieces: list[str]) -> dict[str, str]:
    t = ThinkSplitter()
    out = []
    for p in pieces:
        out += t.feed(p)
    out += t.finish()
    got = {"reasoning": "", "text": ""}
    for kind, piece in out:
        assert piece, "no empty pieces"
        got[kind] += piece
    return got


CASES = [
    ("<think>\nabc</think>\n\nAnswer <b>x</b>", "\nabc", "Answer <b>x</b>"),
    ("  <think>r</think>t", "r", "t"),
    ("plain <think>x</think>", "", "plain <think>x</think>"),
    ("<think>unclosed </thi", "unclosed </thi", ""),
    ("<thi", "", "<thi"),
    ("<think></think>", "", ""),
    ("<think>a</think>b</think>c", "a", "b</think>c"),
]


@pytest.mark.parametrize(("text", "reasoning", "answer"), CASES)
def test_any_split(text: str, reasoning: str, answer: str) -> None:
    for seed in range(50):
        chars = [c for c in text]
        pieces = [p.decode() for p in split_points(text.encode(), seed, 1 + seed % 7)] if text.isascii() else chars
        assert split(text, pieces) == {"reasoning": reasoning, "text": answer}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="<>/thinkab \n", max_size=40), st.integers(0, 10_000))
def test_nothing_lost_or_invented(text: str, seed: int) -> None:
    whole = split(text, [text])
    pieces = [p.decode() for p in split_points(text.encode(), seed, 1 + seed % 9)]
    assert split(text, pieces) == whole
    # every character is accounted for: the tags and the whitespace the rules drop, nothing else
    assert whole == documented_split(text)


def documented_split(text: str) -> dict[str, str]:
    """The rules of translators/forward/think_tags.py, applied to the whole text at once: only a
    ``<think>`` that opens the content (after whitespace) starts reasoning; it ends at the first
    ``</think>``, whitespace right after that is dropped and the rest is text; an unclosed
    ``<think>`` is all reasoning."""
    head = text.lstrip()
    if not head.startswith("<think>"):
        return {"reasoning": "", "text": text}
    reasoning, closed, rest = head[len("<think>") :].partition("</think>")
    return {"reasoning": reasoning, "text": rest.lstrip() if closed else ""}
