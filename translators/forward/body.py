"""Non-streaming bodies: a ``chat.completion`` -> a Responses ``Response``.

Rules:
  - The completion's message is replayed through ``ChatToResponsesStream`` as one chunk whose
    delta is the message (tool calls numbered by position), so the non-streaming Response is by
    construction the same object the terminal event of a stream would carry: same items, same
    statuses, same usage, same failure and incomplete handling.
  - A completion with no choices is an upstream protocol error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crossfeed.translators.errors import UpstreamProtocolError
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import IdFactory
from crossfeed.translators.options import DEFAULT_PROFILE, NO_TOOLS, BackendProfile, ToolContext
from crossfeed.translators.pump import Machine


def chat_completion_to_response(
    completion: Any,
    request: dict[str, Any],
    *,
    ids: IdFactory,
    now: Callable[[], int],
    tools: ToolContext = NO_TOOLS,
    seal_reasoning: Callable[[str, list[dict[str, Any]] | None], str] | None = None,
    profile: BackendProfile = DEFAULT_PROFILE,
) -> dict[str, Any]:
    machine = ChatToResponsesStream(
        request, ids=ids, now=now, tools=tools, seal_reasoning=seal_reasoning, profile=profile
    )
    machine.start()
    feed_completion(machine, completion)
    resp = machine.final_response
    assert resp is not None
    return resp


def feed_completion(machine: Machine, completion: Any) -> None:
    """Feed a whole ``chat.completion`` to a machine as one chunk and end it (its Response is
    then ``final_response``): the non-streamed answer of a leg."""
    if isinstance(completion, dict) and completion.get("error"):
        machine.feed({"error": completion["error"]})
        return
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamProtocolError("the upstream answered without any choices")
    choice = choices[0]
    message = choice.get("message")
    if message is not None and not isinstance(message, dict):
        raise UpstreamProtocolError("the upstream answered with a message that is not an object")
    message = dict(message or {})
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, dict)]
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": message,
                "finish_reason": choice.get("finish_reason"),
                "logprobs": choice.get("logprobs"),
            }
        ],
        "usage": completion.get("usage"),
    }
    machine.feed(chunk)
    if not machine.done:
        machine.finish()
