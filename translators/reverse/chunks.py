"""The chat chunks of one reverse stream: its identity, a chunk and its finished wire frame, the
role chunk in front of the answer, the usage chunk, the diagnostics counter.

``ChunkWriter`` is the first layer of ``ResponsesToChatStream`` (translators/reverse/machine.py):
the state below is set by the machine's ``__init__`` (and the identity by its ``_first``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson

from crossfeed.translators.ids import IdFactory
from crossfeed.translators.sse import Framing, Out

_dumps = orjson.dumps
_ROLE_TEXT = b'{"role":"assistant","content":""}'
_ROLE_NULL = b'{"role":"assistant","content":null}'
# A call's arguments chunk after the identity (tool_calls.py writes its frames from it)
CALL_DELTA = b'"choices":[{"index":0,"delta":{"tool_calls"'


class ChunkWriter:
    __slots__ = (
        "_usage_on",
        "_rfield",
        "_ids",
        "_now",
        "_fallback_model",
        "_id",
        "_model",
        "_created",
        "_wire",
        "_framing",
        "_heads",
        "_after",
        "_ident",
        "_role",
        "diagnostics",
    )

    _usage_on: bool  # the client asked for usage (stream_options.include_usage)
    _rfield: str  # the chat field of reasoning text (BackendProfile.reasoning_field)
    _ids: IdFactory
    _now: Callable[[], int]
    _fallback_model: str  # the model reported when no lifecycle event names one
    _id: str  # the stream's identity, fixed by the first event: chatcmpl- id, model, created
    _model: str
    _created: int
    _wire: bool  # text chunks come out as finished frames (bytes)
    _framing: Framing
    _heads: dict[str, bytes]  # wire mode: delta key -> the frame up to the text
    _after: bytes  # wire mode: the frame after the text
    _ident: bytes  # wire mode: a frame up to its choices (_fixed, _usage_chunk; b"": not made yet)
    _role: bool  # the role chunk is due (before the first chunk of the answer)
    diagnostics: dict[str, int]  # what was dropped or repaired, by kind: for the driver's log

    def _count(self, key: str) -> None:
        self.diagnostics[key] = self.diagnostics.get(key, 0) + 1

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        if self._usage_on:
            chunk["usage"] = None
        return chunk

    def _usage_chunk(self, usage: dict[str, Any]) -> Out:
        """The last chunk with ``include_usage``: no choices, the usage."""
        if self._wire:
            return b'%s"choices":[],"usage":%s}%s' % (self._identity(), _dumps(usage), self._framing.end)
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [],
            "usage": usage,
        }

    def _fixed(self, delta: bytes, finish: bytes = b"null") -> bytes:
        """Wire mode: ``_chunk`` of a delta and a finish reason given as their JSON, as its
        finished frame (the role chunk, the finish chunk)."""
        return b'%s"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]%s}%s' % (
            self._identity(),
            delta,
            finish,
            self._usage_null(),
            self._framing.end,
        )

    def _usage_null(self) -> bytes:
        """A chunk's ``"usage":null`` when the client asked for usage (``_chunk``'s)."""
        return b',"usage":null' if self._usage_on else b""

    def _identity(self) -> bytes:
        """Wire mode: a chunk's frame up to its ``choices``, made once a stream (the identity is
        fixed by the first chunk: ``_first``): the start of every frame the machine writes."""
        ident = self._ident
        if not ident:
            ident = self._ident = b'%s{"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,' % (
                self._framing.data,
                _dumps(self._id),
                self._created,
                _dumps(self._model),
            )
        return ident

    def _frame(self, key: str, text: str) -> bytes:
        """Wire mode: ``_chunk({key: text})`` as its finished frame. The identity is fixed by
        then (``_first``), so the template is made once per key and stream."""
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = b'%s"choices":[{"index":0,"delta":{%s:' % (self._identity(), _dumps(key))
            self._after = b'},"logprobs":null,"finish_reason":null}]%s}%s' % (self._usage_null(), self._framing.end)
        return b"%s%s%s" % (head, _dumps(text), self._after)

    def _with_role(self, out: list[Out]) -> list[Out]:
        """``out`` with the role chunk in front when it is due: ``content: ""`` before text (or
        an empty answer's finish chunk, or an error), ``null`` before a call, reasoning or a
        refusal, as OpenAI's chat streams start (the AI SDK opens a text part for ``""``)."""
        if not self._role or not out:
            return out
        self._role = False
        first = out[0]
        if type(first) is bytes:  # wire mode: a content, a reasoning or a call's arguments frame
            head = self._heads.get(self._rfield)
            text = (head is None or not first.startswith(head)) and not first.startswith(self._identity() + CALL_DELTA)
        else:
            choices = cast(dict[str, Any], first).get("choices")
            delta = choices[0]["delta"] if choices else {}
            text = "tool_calls" not in delta and "refusal" not in delta and self._rfield not in delta
        if self._wire:
            return [self._fixed(_ROLE_TEXT if text else _ROLE_NULL), *out]
        return [self._chunk({"role": "assistant", "content": "" if text else None}), *out]
