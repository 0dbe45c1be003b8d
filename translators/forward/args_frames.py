"""Tool-call argument frames read without a decode: the forward machine's per-frame path of a
streamed call, as chunk_frames.py's text template is for text.

A backend streams a call's arguments as a run of chunks that are byte for byte the chunk before
them but for the fragment: the same id, model, created, the same ``"tool_calls":[{"index":0,
"function":{"arguments":"`` around it. Once one such frame has been decoded and its fragment
found in its bytes, the next one that starts and ends with the same bytes is that call's next
fragment, read with a slice instead of a decode (``feed_frame``, machine.py).

Unlike a text delta, a fragment of JSON arguments is often JSON punctuation with quotes in it
(``{"``, ``":"``, ``"}``), and a patch or a command line has newlines: escapes in most frames.
So a fragment without a backslash is its bytes (no bare quote, no control character, valid
UTF-8), and one with escapes is parsed as the JSON string it is, alone (``args_text``): either
way exactly the text the decode gives, or None, and then the frame is decoded. The text goes
where the decoded fragment would (``_append_args``), so the events are those of the decode by
construction; tests/translators/forward/test_args_frames.py holds the two paths to the same
output.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from crossfeed.translators.plain_json import PLAIN_TABLE

# A call's fragment template: (head, len(head), tail, -len(tail), index, id). ``head`` +
# fragment's bytes + ``tail`` is the frame; ``index`` the call's key (the chunk's tool index),
# ``id`` the call id the frame carries (None when it carries none).
ArgsFrame = tuple[bytes, int, bytes, int, int, "str | None"]

_KEY: Final = b'"arguments"'
_loads = orjson.loads
# The fields of a fragment the template may carry (all but ``arguments`` the same in every frame).
_CALL_KEYS: Final = frozenset({"index", "id", "type", "function"})
_FUNCTION_KEYS: Final = frozenset({"name", "arguments"})


def args_text(raw: bytes) -> str | None:
    """The text of ``raw``, a JSON string's bytes between its quotes; None when they are not
    one (a bare quote, a raw control character, a bad escape, bytes that are not UTF-8). Without
    a backslash the text is the bytes themselves; with one, the string is parsed as JSON (orjson
    and the typed decode read every escape alike, and refuse the same lone surrogates)."""
    if 92 not in raw:
        if raw.translate(PLAIN_TABLE) != raw:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return None
    try:
        text = _loads(b'"' + raw + b'"')
    except orjson.JSONDecodeError:
        return None
    return text if text.__class__ is str else None


def args_frame(data: bytes, call: Any) -> ArgsFrame | None:
    """The template of ``data``, a frame whose one choice's delta is the one tool call ``call``
    (decoded: a dict) with a non-empty ``arguments`` string; None when the frame's bytes do not
    hold that fragment where a template can find it (the key twice, escapes JSON writes
    otherwise, a field the template cannot carry, a tool index that is not an integer)."""
    if call.__class__ is not dict or not call.keys() <= _CALL_KEYS:
        return None
    fn = call.get("function")
    index = call.get("index")
    call_id = call.get("id")
    if fn.__class__ is not dict or not fn.keys() <= _FUNCTION_KEYS or index.__class__ is not int:
        return None
    if call_id is not None and call_id.__class__ is not str:
        return None
    text = fn.get("arguments")
    if text.__class__ is not str or not text or data.count(_KEY) != 1:
        return None
    try:
        raw = orjson.dumps(text)[1:-1]  # the fragment as JSON writes it: a template holds these bytes
    except orjson.JSONEncodeError:  # (a lone surrogate: no decode gives one)
        return None
    after = data.index(_KEY) + len(_KEY)
    start = data.find(b'"', after) + 1
    end = start + len(raw)
    if not start or data[after : start - 1].strip() != b":" or data[start:end] != raw or data[end : end + 1] != b'"':
        return None
    return (data[:start], start, data[end:], end - len(data), index, call_id)
