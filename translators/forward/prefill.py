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
