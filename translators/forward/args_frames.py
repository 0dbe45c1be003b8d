"""Tool-call argument frames read without a decode: the forward machine's per-frame path of a
streamed call, as chunk_frames.py's text template is for text.

A backend streams a call's arguments as a run of chunks that are byte for byte the chunk before
them but for the fragment: the same id, model, created, the same ``"tool_calls":[{"index":0,
"function":{"arguments":"`` around it. Once one such frame has been decoded and its fragment
found in its bytes, the next one that starts and ends with the same bytes is that call's next
fragment, read with a slice instead of a decode (``feed_frame``, machine.py).

Unlike a text delta, a fragment of JSON arguments is often JSON punctuation: ``{"``, ``":"``,
``"}``, whose quotes the frame escapes. So a fragment is read from its bytes when the only
escape in it is ``\\"`` (and it holds no control character, no bare quote, and is valid UTF-8):
then its text is its bytes with each ``\\"`` a quote, exactly what the decode gives. Anything
else (``\\n``, ``\\u00e9``, ``\\\\``) goes the usual way. The text then goes where the decoded
fragment would (``_append_args``), so the events are those of the decode by construction;
tests/translators/forward/test_args_frames.py holds the two paths to the same output.
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
_ESCAPED_QUOTE: Final = b'\\"'
# The fields of a fragment the template may carry (all but ``arguments`` the same in every frame).
_CALL_KEYS: Final = frozenset({"index", "id", "type", "function"})
_FUNCTION_KEYS: Final = frozenset({"name", "arguments"})


def args_text(raw: bytes) -> str | None:
    """The text of ``raw``, a JSON string's bytes between its quotes, when its only escape is
    ``\\"``; None for anything else (another escape, a bare quote, a control character, bytes
    that are not UTF-8)."""
    if 92 in raw:  # a backslash: each must open a \" and nothing else may be left
        bare = raw.replace(_ESCAPED_QUOTE, b"")
        if bare.translate(PLAIN_TABLE) != bare:
            return None
        raw = raw.replace(_ESCAPED_QUOTE, b'"')
    elif raw.translate(PLAIN_TABLE) != raw:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def args_frame(data: bytes, call: Any) -> ArgsFrame | None:
    """The template of ``data``, a frame whose one choice's delta is the one tool call ``call``
    (decoded: a dict) with a non-empty ``arguments`` string; None when the frame's bytes do not
    hold that fragment where a template can find it (the key twice, escapes other than ``\\"``,
    a field the template cannot carry, a tool index that is not an integer)."""
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
    raw = orjson.dumps(text)[1:-1]  # the fragment as JSON writes it: a template holds these bytes
    if args_text(raw) != text:
        return None
    after = data.index(_KEY) + len(_KEY)
    start = data.find(b'"', after) + 1
    end = start + len(raw)
    if not start or data[after : start - 1].strip() != b":" or data[start:end] != raw or data[end : end + 1] != b'"':
        return None
    return (data[:start], start, data[end:], end - len(data), index, call_id)
