"""The tool calls of a reverse stream: function and custom tool calls as chat ``tool_calls``
fragments, argument fragments held until their item names the call.

``CallStream`` is the third layer of ``ResponsesToChatStream`` (translators/reverse/machine.py),
whose ``__init__`` sets the state below; its ``_on_*`` methods are handlers of the machine's table.
"""

from __future__ import annotations

from typing import Any

import orjson

from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.ids import CALL
from crossfeed.translators.responses.fields import up_str
from crossfeed.translators.reverse.chunks import CALL_DELTA
from crossfeed.translators.reverse.stream_state import Call, Held, delta_text, escape_json, item_key
from crossfeed.translators.reverse.text_parts import TextStream
from crossfeed.translators.sse import Out

_dumps = orjson.dumps


class CallStream(TextStream):
    __slots__ = ("_calls", "_held")

    _calls: dict[Any, Call]  # item key -> call, in order of appearance
    _held: dict[Any, Held]  # item key -> fragments waiting for their item

    def _open_call(self, oi: Any, item: dict[str, Any], custom: bool, initial: str) -> dict[str, Any]:
        """The first fragment of a call: index, id, type and name. Only an item can open a call:
        a chat tool call without a name is unusable, so there is none."""
        kind: str = item["type"]  # a call type: every caller checked it
        name = up_str(item, "name", kind)
        if not name:
            raise UpstreamProtocolError(f"{kind} item without a name")
        call_id = up_str(item, "call_id", kind) or self._ids.new(CALL)
        call = self._calls[oi] = Call(len(self._calls), custom)
        call.pieces.append(initial)
        fragment = {
            "index": call.index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": '"' + escape_json(initial) if custom else initial},
        }
        return self._chunk({"tool_calls": [fragment]})

    def _args(self, call: Call, text: str, close: bool = False) -> Out:
        """The chunk of a fragment of ``call``'s arguments. In wire mode, a function call's is its
        finished frame, the fragment's JSON string between the call's two pieces (made once a
        call: ``_chunk`` of the same delta, rendered)."""
        call.pieces.append(text)
        if call.custom:
            text = escape_json(text)
            if close:
                text += '"'
                call.closed = True
        elif self._wire:
            if not call.head:
                call.head = b'%s%s:[{"index":%d,"function":{"arguments":' % (self._identity(), CALL_DELTA, call.index)
                call.tail = b'}}]},"logprobs":null,"finish_reason":null}]%s}%s' % (
                    self._usage_null(),
                    self._framing.end,
                )
            return call.head + _dumps(text) + call.tail
        return self._chunk({"tool_calls": [{"index": call.index, "function": {"arguments": text}}]})

    def _close_custom_calls(self) -> list[Out]:
        """The closing quote of every custom call still open (the stream ends)."""
        return [self._args(call, "", close=True) for call in self._calls.values() if call.custom and not call.closed]

    def _on_args_delta(self, ev: dict[str, Any]) -> list[Out]:
        d = delta_text(ev)
        oi = item_key(ev)
        if not d:
            return []
        self._streamed = True
        call = self._calls.get(oi)
        if call is None:  # before its output_item.added: held until the item names the call
            held = self._held.get(oi)
            if held is None:
                held = self._held[oi] = Held()
            held.pieces.append(d)
            return []
        return [self._args(call, d)]

    def _on_args_done(self, ev: dict[str, Any]) -> list[Out]:
        t = ev["type"]
        final = up_str(ev, "input" if t == "response.custom_tool_call_input.done" else "arguments", t)
        oi = item_key(ev)
        self._streamed = True
        call = self._calls.get(oi)
        if call is None:
            held = self._held.get(oi)
            if held is None:
                held = self._held[oi] = Held()
            if final is not None:
                held.final = final
            return []
        return self._finish_call(oi, call, final)

    def _item_call(self, oi: Any, item: dict[str, Any], custom: bool, final: str | None, done: bool) -> list[Out]:
        """A call item (``output_item.added``, or ``.done`` / the terminal output when ``done``):
        open the call if needed (with the fragments held for it), then send what is missing."""
        call = self._calls.get(oi)
        if call is not None:
            return self._finish_call(oi, call, final) if done else []
        held = self._held.pop(oi, None)
        if held is not None:
            streamed = "".join(held.pieces)
            # With done and a final text, it includes what was held.
            initial = final if done and final else (final or "") + streamed
            final = held.final if held.final is not None else (final if done else None)
        else:
            initial = final or ""
            final = final if done else None
        out: list[Out] = [self._open_call(oi, item, custom, initial)]
        if final is not None or done:
            out += self._finish_call(oi, self._calls[oi], final)
        return out

    def _finish_call(self, oi: Any, call: Call, final: str | None) -> list[Out]:
        """A call's final arguments/input: send the unseen tail, close a custom call's string."""
        out: list[Out] = []
        tail = self._tail(call, final)
        if call.custom:
            if not call.closed:
                out.append(self._args(call, tail, close=True))
            elif tail:
                self._count("done_text_mismatch")
        elif tail:
            out.append(self._args(call, tail))
        return out
