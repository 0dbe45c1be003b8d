"""Compaction on a chat backend (pure): the summary request, the compacted window, the summary leg.

A *compaction* is a Response whose one output item, ``{"type": "compaction", "id": "cmp_...",
"encrypted_content": ...}``, stands for the conversation before it. crossfeed makes it by asking
the chat backend for a summary (``COMPACTION_PROMPT`` after the conversation, no tools) and
sealing the summary text (proxy/state/reasoning_seal.py). Three requests make one:

  - a create whose last input item is ``{"type": "compaction_trigger"}`` (Codex's remote
    compaction): the Response's only item is the compaction;
  - ``POST /v1/responses/compact``: the answer's ``output`` is the compacted window;
  - a create with ``context_management: [{"type": "compaction", "compact_threshold": N}]`` whose
    input is estimated above N tokens: the compaction item first, then the answer to the
    compacted window, in one Response.

Replay (translators/forward/request.py): a ``compaction`` item in the input becomes one user
message, ``SUMMARY_PREFIX`` + the summary, at its place. Before the last compaction item only
system, developer and user messages are sent (earlier summaries aside): everything else there
(assistant messages, tool calls and their outputs, reasoning) is what the summary stands for.
That is also the *compacted window* ``/compact`` answers with: the user messages, then the item.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import orjson

from crossfeed.translators.checks import expect_dict, type_error, value_error
from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.forward.machine import ChatToResponsesStream, LegDriver
from crossfeed.translators.forward.think_tags import ThinkSplitter
from crossfeed.translators.options import DEFAULT_PROFILE, BackendProfile

TRIGGER = "compaction_trigger"
ITEM = "compaction"
SystemPlacement = Literal["merge", "keep", "user"]

COMPACTION_PROMPT = """\
Your context is about to be compacted: everything above will be replaced by what you write now, \
and another session (you, without this history) will continue the work from it. Write a \
handoff summary for that session. Include:

1. The user's goal and every explicit requirement, constraint or preference they stated, in \
their own words where it matters.
2. What has been done: files read, created or changed (with paths), commands run and what they \
showed, decisions taken and why.
3. The current state: what works, what fails (exact error messages), what is half done.
4. What remains, in order, and the very next step.
5. Facts that would be costly to rediscover: names, paths, versions, identifiers, settings.

Be concise and concrete. Write only the summary: no greeting, no questions, no tool calls."""

SUMMARY_PREFIX = (
    "The conversation so far was compacted. This summary of it was written for you to "
    "continue the work from where it stopped:"
)


def trigger_in(inp: Any) -> bool:
    """True when the input's last item is a ``compaction_trigger``; a trigger anywhere else, or
    two of them, is a 400 naming the misplaced one."""
    if not isinstance(inp, list) or not inp:
        return False
    last = len(inp) - 1
    found = False
    for i, item in enumerate(inp):
        if isinstance(item, dict) and item.get("type") == TRIGGER:
            if found:
                raise value_error(f"input[{i}]", "only one compaction_trigger may be sent, as the last input item.")
            if i != last:
                raise value_error(f"input[{i}]", "a compaction_trigger must be the last input item.")
            found = True
    return found


def compact_threshold(body: dict[str, Any]) -> int | None:
    """The ``compact_threshold`` of a ``context_management`` compaction entry, if any (types are
    checked by the request mapping; a threshold below 1 is a 400 here)."""
    entries = body.get("context_management")
    if not isinstance(entries, list):
        return None
    for i, raw in enumerate(entries):
        entry = expect_dict(raw, f"context_management[{i}]")
        if entry.get("type") != ITEM:
            raise value_error(f"context_management[{i}].type", f"expected 'compaction', got {entry.get('type')!r}.")
        threshold = entry.get("compact_threshold")
        if threshold is None:
            continue
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise type_error(f"context_management[{i}].compact_threshold", "an integer", threshold)
        if threshold < 1:
            raise value_error(f"context_management[{i}].compact_threshold", "must be at least 1.")
        return threshold
    return None


def estimate_tokens(messages: list[dict[str, Any]], tools: Any = None) -> int:
    """The documented estimate where no tokenizer answers: one token per 4 bytes of the chat
    messages (and tools) as compact UTF-8 JSON, rounded up, plus 4 per message for the template."""
    size = len(orjson.dumps(messages)) + (len(orjson.dumps(tools)) if tools else 0)
    return math.ceil(size / 4) + 4 * len(messages)


def summary_message(text: str) -> dict[str, Any]:
    """The chat message a compaction item is replayed as."""
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n\n{text}"}


def is_summary(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


def window(messages: list[dict[str, Any]], system_role: str) -> list[dict[str, Any]]:
    """What stays in front of a compaction: system/developer and user messages, earlier summaries
    aside (the new one covers them)."""
    return [
        m
        for m in messages
        if m.get("role") in ("system", system_role) or (m.get("role") == "user" and not is_summary(m))
    ]


def summary_request(chat: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The chat body asking for the summary: the same conversation and sampling, the prompt
    after it as a user message, and no tools (the model is to write, not to act)."""
    out = {
        k: v
        for k, v in chat.items()
        if k not in ("tools", "tool_choice", "parallel_tool_calls", "response_format", "logprobs", "top_logprobs")
    }
    out["messages"] = [*chat["messages"], {"role": "user", "content": prompt}]
    return out


def place_system(messages: list[dict[str, Any]], placement: SystemPlacement, system_role: str) -> list[dict[str, Any]]:
    """System (and developer) messages where the backend's chat template accepts them.

    ``merge``: one leading system message holding them all, in order, joined by a blank line;
    ``user``: the first kept in place when it leads, every later one sent as a user message;
    ``keep``: as they came."""
    if placement == "keep":
        return messages
    roles = ("system", system_role)
    if placement == "user":
        return [m if i == 0 or m.get("role") not in roles else {**m, "role": "user"} for i, m in enumerate(messages)]
    systems = [m for m in messages if m.get("role") in roles]
    if len(systems) <= 1 and (not systems or messages[0] is systems[0]):
        return messages
    text = "\n\n".join(_text(m.get("content")) for m in systems)
    return [{"role": systems[0]["role"], "content": text}, *(m for m in messages if m.get("role") not in roles)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def compacted_output(items: list[dict[str, Any]], compaction: dict[str, Any]) -> list[dict[str, Any]]:
    """``/compact``'s answer: the user messages of the conversation (as items), then the compaction.
    Each message says ``status: "completed"`` (the Open Responses ``Message`` requires a status;
    an input item often has none)."""
    users = (i for i in items if (i.get("type") in (None, "message")) and i.get("role") == "user")
    return [*({**i, "status": "completed"} for i in users), compaction]


class SummaryLeg(LegDriver):
    """The leg that asks for the summary, driven by the relay like any machine.

    It opens the Response (``response.created``/``in_progress``) when the backend answers,
    sends nothing while the summary is written (the sink's keepalives flow), and at the end
    seals it into the item: ``output_item.added``, ``response.compaction.compacting`` and
    ``output_item.done``, the item whole in both (a client never holds half a compaction). ``last``: the Response ends with it
    (``response.completed``); otherwise the response stays open for the answer leg. A backend
    error, a cut stream or an empty summary ends the Response with ``response.failed``, and the
    failed Response has no compaction item: nothing partial is ever handed out."""

    def __init__(
        self,
        main: ChatToResponsesStream,
        seal: Callable[[str], str],
        item_id: str,
        *,
        last: bool,
        profile: BackendProfile = DEFAULT_PROFILE,
    ) -> None:
        super().__init__(main)
        self.item = {"id": item_id, "type": ITEM, "encrypted_content": ""}
        self._seal = seal
        self._last = last
        self._parts: list[str] = []
        self._think = ThinkSplitter() if profile.think_tags else None  # a summary calls no tools
        self._usage: dict[str, Any] | None = None
        self._reason: str | None = None
        self.summary: str | None = None  # once sealed

    def start(self) -> list[Any]:
        return self.main.start()

    def feed(self, chunk: dict[str, Any]) -> list[Any]:
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage:
            self._usage = usage
        error = chunk.get("error")
        if error:
            return self.main.fail(*_upstream_error(error))
        choices = chunk.get("choices")
        if choices is not None and not isinstance(choices, list):
            return self.main.fail("upstream_protocol_error", "the upstream sent choices that are not a list")
        for choice in choices or ():
            if not isinstance(choice, dict) or choice.get("index", 0):
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(text, str) and text:
                self._text(text)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._reason = reason
        return []

    def _text(self, text: str) -> None:
        if self._think is None:
            self._parts.append(text)
        else:
            self._parts += [piece for kind, piece in self._think.feed(text) if kind == "text"]

    def finish(self, *, clean: bool = True) -> list[Any]:
        if self._think is not None:
            self._parts += [piece for kind, piece in self._think.finish() if kind == "text"]
        if not clean and self._reason is None:
            return self.main.fail(
                "upstream_truncated", "the upstream closed the stream before the summary was finished"
            )
        if self._reason == "content_filter":
            return self.main.fail("content_filter", "the upstream's content filter stopped the summary")
        summary = "".join(self._parts).strip()
        if not summary:
            return self.main.fail("empty_summary", "the upstream answered the compaction with an empty summary")
        return self.sealed(summary)

    def sealed(self, summary: str, usage: dict[str, Any] | None = None) -> list[Any]:
        """The summary is complete (``usage``: of a non-streamed call): the item is done, and
        the Response ends or goes on."""
        self.summary = summary
        item = {**self.item, "encrypted_content": self._seal(summary)}
        main = self.main
        out, index = main.begin_item(item, then="response.compaction.compacting")
        out += main.finish_item(index, item)
        main.spend(usage or self._usage)
        out += main.end_leg()
        if self._last:
            out += main.end_response()
        else:
            main.next_leg()
        return out

    def fail(self, code: str, message: str) -> list[Any]:
        return self.main.fail(code, message)


def summary_of_completion(completion: Any) -> tuple[str, dict[str, Any] | None]:
    """The summary text and usage of a non-streamed chat completion (``<think>`` and reasoning
    fields left out). Raises ``UpstreamProtocolError`` for a body of the wrong shape."""
    if not isinstance(completion, dict):
        raise UpstreamProtocolError("the upstream's completion is not a JSON object")
    choices = completion.get("choices")
    message = (
        choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    )
    if not isinstance(message, dict):
        raise UpstreamProtocolError("the upstream's completion has no message")
    text = message.get("content")
    text = text if isinstance(text, str) else ""
    if "<think>" in text:
        splitter = ThinkSplitter()
        text = "".join(p for k, p in [*splitter.feed(text), *splitter.finish()] if k == "text")
    usage = completion.get("usage")
    return text.strip(), usage if isinstance(usage, dict) else None


def _upstream_error(error: Any) -> tuple[str, str]:
    if isinstance(error, dict):
        code = error.get("code")
        return (
            code if isinstance(code, str) and code else "upstream_error",
            str(error.get("message") or "upstream error"),
        )
    return "upstream_error", str(error)


def check_item(item: dict[str, Any], p: str) -> str:
    """A compaction input item's token; a wrong shape is a 400 naming the field."""
    token = item.get("encrypted_content")
    if token is None:
        raise value_error(f"{p}.encrypted_content", "a compaction item needs its encrypted_content.")
    if not isinstance(token, str):
        raise type_error(f"{p}.encrypted_content", "a string", token)
    if not token:
        raise value_error(f"{p}.encrypted_content", "a compaction item's encrypted_content is empty.")
    return token
