"""Strings whose JSON is their UTF-8 as it is: nothing to escape between the quotes.

Both stream machines read runs of frames that differ only in their text with slices instead of
a decode (translators/forward/chunk_frames.py, translators/reverse/text_runs.py). A slice of
the frame's bytes is the text only when the text is *plain*: no quote, no backslash, no control
character (what a JSON string must escape), and valid UTF-8.
"""

from __future__ import annotations

from typing import Final

# What a JSON string must escape.
SPECIAL: Final = bytes(range(0x20)) + b'"\\'
# Each byte to itself but the SPECIAL ones (to a space): ``translate`` with it changes a bytes
# that holds one (``raw.translate(PLAIN_TABLE) == raw`` is ``plain_bytes``, inlined where a
# per-frame path cannot afford the call). Without deletions, translate maps in one C pass and
# hands back the bytes itself when nothing changed (so ``==`` is an identity check);
# ``translate(None, SPECIAL)`` first builds its deletion table on every call (about 2,800
# instructions more for a read of 8 texts; a regular expression costs several times as much
# per byte).
PLAIN_TABLE: Final = bytes(32 if c in SPECIAL else c for c in range(256))


def plain(text: str) -> bool:
    """``text``'s JSON string is its UTF-8 between quotes: nothing to escape (and no lone
    surrogate, which has no UTF-8). Checked on the UTF-8: ``str.translate`` with a table looks
    up every character in a dict, about seven times the cost of encoding and ``plain_bytes``."""
    try:
        raw = text.encode()
    except UnicodeEncodeError:
        return False
    return raw.translate(PLAIN_TABLE) == raw


def plain_bytes(raw: bytes) -> bool:
    """``raw`` holds nothing a JSON string escapes (its UTF-8 is checked apart)."""
    return raw.translate(PLAIN_TABLE) == raw


def plain_texts(raws: list[bytes]) -> list[str]:
    """The texts of ``raws`` (JSON strings' bytes between their quotes) up to the first that is
    not plain: empty, holding what JSON escapes, or not valid UTF-8 on its own. ``raws`` is cut
    to them. The slow way of a run's check, taken when the one call over all of them failed."""
    texts: list[str] = []
    for raw in raws:
        if not raw or not plain_bytes(raw):
            break
        try:
            texts.append(raw.decode())
        except UnicodeDecodeError:
            break
    del raws[len(texts) :]
    return texts
