"""The chat request that continues a partial answer on another upstream (proxy/turns/continuation.py).

The same request, with the assistant's partial output as a trailing assistant message the backend
continues (``prefill``, a pool key):

  trailing_assistant       the message alone: llama.cpp's server continues a trailing assistant
                           message (its "assistant prefill"); so do most chat templates
  continue_final_message   vLLM: the message, ``continue_final_message: true`` and
                           ``add_generation_prompt: false`` in the body

A partial answer in its text is that text. One broken in its reasoning (no message nor call
begun) is sent in one of two forms (``reasoning_prefill``, a pool key):

  think_tag        the message's content is ``"<think>\\n"`` + the reasoning text: the backend goes
                   on thinking inside the block it opened. With ``trailing_assistant`` that
                   request also has ``chat_template_kwargs: {"enable_thinking": false}`` (merged
                   into the request's own): older llama.cpp servers refuse an assistant prefill
                   while thinking is on ("Assistant response prefill is incompatible with
                   enable_thinking"); the template then leaves the think block to the prefill.
  reasoning_field  the message's reasoning field (the upstream's ``reasoning_field``) is the
                   reasoning text and its content ``""``: current llama.cpp servers continue the
                   thought from it (the prompt ends with ``<think>\\n`` + the reasoning, no
                   block closed before it) and stream the rest as reasoning deltas. No
                   ``enable_thinking`` is sent: the template is left to open the thought (on the
                   pinned build it changes nothing either way).

The continued stream may bring the rest of the reasoning back in two ways: in the reasoning
fields (a backend with a reasoning parser) or as raw content that goes on with the reasoning,
then ``</think>``, then the answer (no parser: the block was opened by the prefill, not by the
model). ``ThinkResume`` turns the second into the first, with the think-tag splitter
(think_tags.py) started inside the block, so the machine writes both into the same reasoning item.
It follows a ``think_tag`` prefill only: a backend that takes the ``reasoning_field`` form parses
the thought it was given, so its content is the answer (llama-server streams the rest of the
reasoning as reasoning deltas, first repeating the prefill in them with ``trailing_assistant``,
which ``PrefillEcho`` matches there).

A request that already ends with an assistant message of text (the client's own prefill) has the
partial output appended to it (to its content, or in the field form to its reasoning field):
servers refuse two trailing assistant messages. Empty text: the request as it was (the
continuation is a retry).
"""

from __future__ import annotations

from typing import Any

from crossfeed.translators.forward.think_tags import OPEN, ThinkSplitter

THINK = OPEN + "\n"  # what a reasoning prefill opens with
_REASONING_KEYS = ("reasoning_content", "reasoning")


def prefill_body(
    chat: dict[str, Any],
    text: str,
    style: str,
    *,
    reasoning: bool = False,
    form: str = "think_tag",
    field: str = "reasoning_content",
) -> dict[str, Any]:
    """``chat`` (not changed) continued after ``text`` in the ``style`` the backend takes;
    ``reasoning``: ``text`` is the answer's reasoning, not its text, sent in ``form``
    (``think_tag`` or ``reasoning_field``; ``field``: the backend's reasoning field)."""
    if not text:
        return chat
    in_field = reasoning and form == "reasoning_field"
    if reasoning and not in_field:
        text = THINK + text
    messages = list(chat.get("messages") or [])
    last = messages[-1] if messages else None
    if (
        isinstance(last, dict)
        and last.get("role") == "assistant"
        and isinstance(last.get("content"), str)
        and not last.get("tool_calls")
    ):
        if in_field:
            before = last.get(field)
            messages[-1] = {**last, field: (before if isinstance(before, str) else "") + text}
        else:
            messages[-1] = {**last, "content": last["content"] + text}
    elif in_field:
        messages.append({"role": "assistant", "content": "", field: text})
    else:
        messages.append({"role": "assistant", "content": text})
    body = {**chat, "messages": messages}
    if style == "continue_final_message":
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    elif reasoning and not in_field:
        kwargs = chat.get("chat_template_kwargs")
        body["chat_template_kwargs"] = {**(kwargs if isinstance(kwargs, dict) else {}), "enable_thinking": False}
    return body


def _delta_of(chunk: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A chunk's first choice and its delta, when it has them."""
    choices = chunk.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    delta = choice.get("delta") if choice is not None else None
    return (choice, delta) if choice is not None and isinstance(delta, dict) else None


class PrefillEcho:
    """Drops the prefill a backend repeats at the start of its continuation: llama.cpp's server
    streams the trailing assistant message it continues before the new text. The continuation's
    first text is matched against the prefill; while it matches it is held back, and once the
    whole prefill has come it is dropped. Text that differs first (a backend that does not repeat
    it) goes through with what was held. ``feed`` takes a chat chunk and returns the chunks to
    feed the machine instead; once settled, the chunk itself.

    ``reasoning``: the prefill as a backend with a reasoning parser repeats it, in a reasoning
    field (a reasoning prefill's text without its ``<think>``); the first text decides which of
    the two is matched."""

    __slots__ = ("left", "held", "key", "_alt")

    def __init__(self, prefill: str, reasoning: str = "") -> None:
        self.left = prefill  # the prefill not yet seen repeated ("": settled)
        self.held = ""  # what matched so far, held back
        self.key = "content"  # the delta field it is matched in
        self._alt = reasoning

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.left:
            return [chunk]
        found = _delta_of(chunk)
        if found is None:
            return [chunk]  # a usage or error chunk: nothing to match
        choice, delta = found
        if self._alt:
            said = next((k for k in _REASONING_KEYS if isinstance(delta.get(k), str) and delta[k]), None)
            if said is not None:  # the first text is reasoning: the reasoning prefill is matched there
                self.key, self.left = said, self._alt
            if said is not None or (isinstance(delta.get("content"), str) and delta["content"]):
                self._alt = ""
        key = self.key
        content = delta.get(key)
        text_only = not any(v for k, v in delta.items() if k not in ("role", key))
        ends = bool(choice.get("finish_reason"))
        if text_only and not content and not ends:
            return [chunk]  # the role chunk, an empty delta
        if text_only and isinstance(content, str) and content:
            if content.startswith(self.left):  # the whole prefill has come: dropped
                rest, self.left, self.held = content[len(self.left) :], "", ""
                return [_text(chunk, key, rest)]
            if self.left.startswith(content) and not ends:
                self.left, self.held = self.left[len(content) :], self.held + content
                return [_text(chunk, key, "")]
        held, self.left, self.held = self.held, "", ""  # no repetition: everything goes through
        if text_only and isinstance(content, str):
            return [_text(chunk, key, held + content)]
        return [_text({**chunk, "choices": [{"index": 0, "delta": {}}]}, key, held), chunk] if held else [chunk]


# How much of a continued reasoning's raw content is held before it is taken for reasoning without
# its ``</think>`` (see ThinkResume).
HOLD = 4096


class ThinkResume:
    """The continuation of a leg broken in its reasoning, read as a backend may write it: until
    ``</think>``, its content is the reasoning going on, and comes out as ``reasoning_content``;
    after it, the answer's text (think_tags.py's splitter, started inside the block). A backend
    whose first text is in a reasoning field parses the block itself: its chunks go through.

    Content with no ``</think>`` yet is ambiguous: the reasoning going on (no parser), or the
    answer of a backend whose parser took the block's end as the first thing it wrote. So it is
    held (at most ``HOLD`` characters) until it shows which: a ``</think>`` makes it reasoning; the
    stream ending without one makes it the answer; past ``HOLD`` it is taken for reasoning (an
    answer that long with its block closed unseen is the one case read wrong).
    ``feed`` takes a chat chunk and returns the chunks to feed the machine instead; ``left`` is
    False once settled (the chunks go through)."""

    __slots__ = ("left", "_split", "_thought", "_raw", "_sure")

    def __init__(self) -> None:
        self.left = True
        self._split = ThinkSplitter(inside=True)
        self._thought = ""  # reasoning held until the content shows it is reasoning
        self._raw = ""  # the same content as it came (the answer, should the stream end first)
        self._sure = False

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.left:
            return [chunk]
        found = _delta_of(chunk)
        if found is None:
            return [chunk]
        choice, delta = found
        content = delta.get("content")
        if any(isinstance(delta.get(k), str) and delta[k] for k in _REASONING_KEYS) or delta.get("reasoning_details"):
            self.left = False  # the backend's reasoning parser reads the block
            if not self._raw:
                return [chunk]
            said = self._raw + (content if isinstance(content, str) else "")
            return [{**chunk, "choices": [{**choice, "delta": {**delta, "content": said}}, *chunk["choices"][1:]]}]
        pieces = self._split.feed(content) if isinstance(content, str) and content else []
        ends = bool(choice.get("finish_reason"))
        if not self._sure:
            self._raw += content if isinstance(content, str) else ""
            if self._split.in_text or any(kind == "text" for kind, _ in pieces) or len(self._raw) > HOLD:
                self._sure = True
                pieces = [("reasoning", self._thought), *pieces]
            elif ends:  # no </think> in the whole continuation: it was the answer
                self.left = False
                return [_content(chunk, choice, delta, "", self._raw)]
            else:
                self._thought += "".join(text for kind, text in pieces if kind == "reasoning")
                return [_content(chunk, choice, delta, "", "")] if isinstance(content, str) else [chunk]
        if ends:
            pieces += self._split.finish()
            self.left = False
        elif self._split.in_text:
            self.left = False
        if not pieces and not isinstance(content, str):
            return [chunk]
        thought = "".join(text for kind, text in pieces if kind == "reasoning")
        return [_content(chunk, choice, delta, thought, _said(pieces))]


def _said(pieces: list[tuple[str, str]]) -> str:
    return "".join(text for kind, text in pieces if kind == "text")


def _content(
    chunk: dict[str, Any], choice: dict[str, Any], delta: dict[str, Any], thought: str, said: str
) -> dict[str, Any]:
    """``chunk`` with its first choice's content replaced: ``thought`` as its reasoning, ``said``
    as its text (either left out when empty)."""
    rest = {k: v for k, v in delta.items() if k != "content" and k not in _REASONING_KEYS}
    if thought:
        rest["reasoning_content"] = thought
    if said:
        rest["content"] = said
    return {**chunk, "choices": [{**choice, "delta": rest}, *chunk["choices"][1:]]}


def _text(chunk: dict[str, Any], key: str, text: str) -> dict[str, Any]:
    """``chunk`` with ``text`` as its first choice's delta ``key`` (content or a reasoning field)."""
    choice = chunk["choices"][0]
    return {**chunk, "choices": [{**choice, "delta": {**choice["delta"], key: text}}, *chunk["choices"][1:]]}
