"""The chat request that continues a partial answer on another upstream (proxy/turns/continuation.py).

The same request, with the assistant's partial text as a trailing assistant message the backend
continues (``prefill``, a pool key):

  trailing_assistant       the message alone: llama.cpp's server continues a trailing assistant
                           message (its "assistant prefill"); so do most chat templates
  continue_final_message   vLLM: the message, ``continue_final_message: true`` and
                           ``add_generation_prompt: false`` in the body

A request that already ends with an assistant message of text (the client's own prefill) has the
partial text appended to it: servers refuse two trailing assistant messages. Empty text: the
request as it was (the continuation is a retry).
"""

from __future__ import annotations

from typing import Any


def prefill_body(chat: dict[str, Any], text: str, style: str) -> dict[str, Any]:
    """``chat`` (not changed) continued after ``text`` in the ``style`` the backend takes."""
    if not text:
        return chat
    messages = list(chat.get("messages") or [])
    last = messages[-1] if messages else None
    if (
        isinstance(last, dict)
        and last.get("role") == "assistant"
        and isinstance(last.get("content"), str)
        and not last.get("tool_calls")
    ):
        messages[-1] = {**last, "content": last["content"] + text}
    else:
        messages.append({"role": "assistant", "content": text})
    body = {**chat, "messages": messages}
    if style == "continue_final_message":
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    return body


class PrefillEcho:
    """Drops the prefill a backend repeats at the start of its continuation: llama.cpp's server
    streams the trailing assistant message it continues before the new text. The continuation's
    first text is matched against the prefill; while it matches it is held back, and once the
    whole prefill has come it is dropped. Text that differs first (a backend that does not repeat
    it) goes through with what was held. ``feed`` takes a chat chunk and returns the chunks to
    feed the machine instead; once settled, the chunk itself."""

    __slots__ = ("left", "held")

    def __init__(self, prefill: str) -> None:
        self.left = prefill  # the prefill not yet seen repeated ("": settled)
        self.held = ""  # what matched so far, held back

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.left:
            return [chunk]
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        delta = choice.get("delta") if choice is not None else None
        if choice is None or not isinstance(delta, dict):
            return [chunk]  # a usage or error chunk: nothing to match
        content = delta.get("content")
        text_only = not any(v for k, v in delta.items() if k not in ("role", "content"))
        ends = bool(choice.get("finish_reason"))
        if text_only and not content and not ends:
            return [chunk]  # the role chunk, an empty delta
        if text_only and isinstance(content, str) and content:
            if content.startswith(self.left):  # the whole prefill has come: dropped
                rest, self.left, self.held = content[len(self.left) :], "", ""
                return [_text(chunk, rest)]
            if self.left.startswith(content) and not ends:
                self.left, self.held = self.left[len(content) :], self.held + content
                return [_text(chunk, "")]
        held, self.left, self.held = self.held, "", ""  # no repetition: everything goes through
        if text_only and isinstance(content, str):
            return [_text(chunk, held + content)]
        return [_text({**chunk, "choices": [{"index": 0, "delta": {}}]}, held), chunk] if held else [chunk]


def _text(chunk: dict[str, Any], text: str) -> dict[str, Any]:
    """``chunk`` with ``text`` as its first choice's delta content."""
    choice = chunk["choices"][0]
    return {**chunk, "choices": [{**choice, "delta": {**choice["delta"], "content": text}}, *chunk["choices"][1:]]}
