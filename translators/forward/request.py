"""Responses API create request -> Chat Completions request (pure; wire-spec section 3).

``responses_request_to_chat`` validates the client's JSON (400 naming the ``param`` on a wrong
type), maps every field it knows, rejects the ones whose meaning cannot be kept, and reports
the ones it accepts but does not send in ``MappedRequest.ignored``. The full table, with the
reason for each choice, is ``docs/request-mapping.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossfeed.translators.checks import (
    expect_dict,
    expect_list,
    missing,
    opt_bool,
    opt_number,
    opt_str,
    req_str,
    type_error,
    value_error,
)
from crossfeed.translators.errors import InvalidRequest, UnsupportedFeature
from crossfeed.translators.forward import compaction as cmp
from crossfeed.translators.forward.input import InputMessages, OpenSummary, Reveal
from crossfeed.translators.forward.tools import map_text, map_tool_choice, map_tools
from crossfeed.translators.options import CUSTOM_ARG, BackendProfile, ToolContext

# Top-level fields that are accepted, not sent upstream, and listed in `ignored` when set.
_IGNORED_FIELDS = (
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "max_tool_calls",
    "context_management",
    "moderation",
    "stream_options",
)
# Fields handled elsewhere (the proxy, or the Response echo): accepted, never forwarded, not logged.
_HANDLED_FIELDS = frozenset(
    {
        "store",
        "previous_response_id",
        "metadata",
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "top_logprobs",
        "text",
        "reasoning",
        "include",
        "user",
        "stream",
        "background",
        "prompt",
        "conversation",
        "truncation",
        "service_tier",
        "presence_penalty",
        "frequency_penalty",
    }
)
# The fields each group of checks reads: a group whose fields are all absent (the usual request
# sends a handful of fields) is skipped with one set test instead of a lookup per field.
_UNSUPPORTED_KEYS = frozenset({"conversation", "prompt", "background"})
_SAMPLING_KEYS = frozenset({"max_output_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty"})
_INCLUDE_KEYS = frozenset({"include", "top_logprobs"})
_CHECKED_IGNORED_KEYS = frozenset(
    {
        "max_tool_calls",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "stream_options",
        "moderation",
        "context_management",
    }
)
_LOGPROBS_INCLUDE = "message.output_text.logprobs"
_HANDLED_INCLUDES = frozenset({_LOGPROBS_INCLUDE, "reasoning.encrypted_content"})


@dataclass(frozen=True, slots=True)
class MappedRequest:
    chat: dict  # the body to POST to the upstream /chat/completions
    tools: ToolContext  # for the stream machine (custom tool names, namespace map)
    ignored: tuple[str, ...]  # accepted but not sent, for one info log line
    model: str
    # "trigger": the input ends with compaction_trigger and ``chat`` asks for the summary.
    compact: str | None = None
    # context_management's compact_threshold: compact first when the input counts more tokens.
    threshold: int | None = None


def responses_request_to_chat(
    body: Any,
    options: BackendProfile,
    *,
    history: list[dict] | None = None,
    reveal_reasoning: Reveal | None = None,
    open_summary: OpenSummary | None = None,
    search_function: str | None = None,
    mcp_results: Mapping[str, str] | None = None,
) -> MappedRequest:
    """Map a Responses create request onto a Chat Completions request.

    Rules:
      body not an object           -> 400 param None; model missing -> 400 param "model"
      instructions                 -> first message, role options.system_role ("" is skipped)
      history (previous_response_id, resolved by the proxy) + input -> messages (see input_messages.InputMessages)
      a function_call_output / custom_tool_call_output of the input answering no call of the
          history or of the input before it -> 400 input[i].call_id (tool_call_not_found)
      item_reference items        -> replaced by the proxy with the stored items they name before
          this mapping (input_messages.resolve_references); one still here -> 400 input[i]
      input string                 -> one user message; no messages at all -> 400 "input"
      tools / tool_choice          -> tools_mapping.map_tools / map_tool_choice
      parallel_tool_calls          -> same (only when tools are sent)
      max_output_tokens (int >= 1) -> max_tokens and/or max_completion_tokens (options)
      temperature (0..2), top_p (0..1), user -> same names
      text.format json_schema      -> response_format {type:json_schema, json_schema:{...}}
      text.format json_object      -> response_format {type:json_object}; text -> nothing
      text.verbosity               -> verbosity
      reasoning.effort             -> reasoning_effort; reasoning.summary: the reasoning streams as a
                                      summary part (chat_to_responses); others -> ignored
      include logprobs / top_logprobs -> logprobs:true (+ top_logprobs)
      include reasoning.encrypted_content -> honoured by crossfeed (not sent); others -> ignored
      stream:true                  -> stream:true + stream_options {include_usage:true}
      stream false/absent          -> stream:false, no stream_options
      store, previous_response_id, metadata -> not sent (proxy state / echoed on the Response)
      input ending with compaction_trigger -> compact "trigger": chat asks for a summary
          (compaction.summary_request); a trigger anywhere else, or two -> 400 input[i]
      compaction item              -> the summary it seals, as a user message (compaction.py);
          a token that does not open -> 400 input[i].encrypted_content invalid_encrypted_content
      context_management compaction compact_threshold -> threshold (the proxy counts and compacts)
      system/developer messages    -> placed per options.system_placement (compaction.place_system)
      mcp_call items -> the tool exchange they were; an mcp_approval_request answered by an
          mcp_approval_response (mcp_results: what came of it) -> the call and its result;
          unanswered requests, mcp_list_tools -> nothing (mcp_items.py)
      web_search_call items, with search_function (crossfeed runs web search) -> the tool
          exchange they were (web_search_items.replayed); without it -> dropped, ignored
      conversation, prompt, background:true -> 400 naming the param
      truncation:"auto", service_tier, prompt_cache_key, safety_identifier, max_tool_calls,
      stream_options, unknown fields (client_metadata...) -> not sent, listed in ignored; the
      documented ones are still type-checked (_check_ignored): a wrong type -> 400 naming it
    """
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    model = body.get("model")
    if model is None or model == "":
        raise missing("model")
    if not isinstance(model, str):
        raise type_error("model", "a string", model)
    keys = body.keys()
    if not keys.isdisjoint(_UNSUPPORTED_KEYS):
        _reject_unsupported(body)
    ignored: list[str] = []
    chat: dict[str, Any] = {"model": model}

    trigger = cmp.trigger_in(body.get("input"))
    msgs = InputMessages(options, reveal_reasoning, ignored, open_summary, search_function)
    msgs.mcp_results = mcp_results
    msgs.client_functions = frozenset(
        t.get("name") for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"
    )
    instructions = opt_str(body, "instructions", "")
    if instructions:
        msgs.out.append({"role": options.system_role, "content": instructions})
    for i, item in enumerate(history or ()):
        try:
            msgs.add_item(item, f"input[{i}]")
        except InvalidRequest as exc:  # our own stored data: blame the id that brought it in
            raise InvalidRequest(f"Stored conversation item {i}: {exc.message}", param="previous_response_id") from exc
    inp = body.get("input")
    msgs.check_outputs = True  # the stored history is not checked again: it was, when it came in
    if isinstance(inp, str):
        msgs.add_item({"role": "user", "content": inp}, "input")
    elif inp is not None:
        for i, item in enumerate(expect_list(inp, "input")):
            msgs.add_item(item, f"input[{i}]")
    chat["messages"] = cmp.place_system(msgs.finish(), options.system_placement, options.system_role)
    if not chat["messages"]:
        raise missing("input")

    arg = CUSTOM_ARG
    table = map_tools(body.get("tools"), ignored, arg, msgs.extra_tools)
    choice, allowed = map_tool_choice(body.get("tool_choice"), table, ignored)
    tools = [t for t in table.chat if allowed is None or t["function"]["name"] in allowed]
    parallel = opt_bool(body, "parallel_tool_calls", "")
    if tools:
        chat["tools"] = tools
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    elif choice not in (None, "none", "auto"):
        ignored.append(f"tool_choice {choice} (no function tools to call)")

    if not keys.isdisjoint(_SAMPLING_KEYS):
        _map_sampling(body, options, chat)
    map_text(body.get("text"), chat, ignored)
    _map_reasoning(body.get("reasoning"), chat, ignored)
    if not keys.isdisjoint(_INCLUDE_KEYS):
        _map_include(body, chat, ignored)
    _map_misc(body, chat, ignored)
    threshold = cmp.compact_threshold(body)
    if trigger:
        chat = cmp.summary_request(chat, options.compaction_prompt or cmp.COMPACTION_PROMPT)
    return MappedRequest(
        chat=chat,
        tools=table.context(arg),
        ignored=tuple(ignored),
        model=model,
        compact="trigger" if trigger else None,
        threshold=None if trigger else threshold,
    )


def _reject_unsupported(body: dict[str, Any]) -> None:
    if body.get("conversation") is not None:
        raise UnsupportedFeature(
            "crossfeed keeps no conversation objects: send the full input, or chain turns with previous_response_id.",
            param="conversation",
        )
    if body.get("prompt") is not None:
        raise UnsupportedFeature(
            "Stored prompt templates live on OpenAI's servers and cannot be resolved by a chat "
            "backend: send the prompt text as instructions/input.",
            param="prompt",
        )
    background = opt_bool(body, "background", "")
    if background:
        raise UnsupportedFeature(
            "Background responses (queued, polled and cancelled later) are not supported: send "
            "the request without background, with stream: true for long generations.",
            param="background",
            code="unsupported_value",
        )


def _map_sampling(body: dict[str, Any], options: BackendProfile, chat: dict[str, Any]) -> None:
    tokens = opt_number(body, "max_output_tokens", integer=True, low=1)
    if tokens is not None:
        if options.max_tokens_field in ("max_tokens", "both"):
            chat["max_tokens"] = tokens
        if options.max_tokens_field in ("max_completion_tokens", "both"):
            chat["max_completion_tokens"] = tokens
    for key, high in (("temperature", 2), ("top_p", 1)):
        value = opt_number(body, key, low=0, high=high)
        if value is not None:
            chat[key] = value
    for key in ("presence_penalty", "frequency_penalty"):  # Open Responses fields, chat's names
        value = opt_number(body, key, low=-2, high=2)
        if value:
            chat[key] = value


def _map_reasoning(reasoning: Any, chat: dict[str, Any], ignored: list[str]) -> None:
    if reasoning is None:
        return
    reasoning = expect_dict(reasoning, "reasoning")
    effort = opt_str(reasoning, "effort", "reasoning")
    if effort is not None:
        chat["reasoning_effort"] = effort
    for key in ("summary", "generate_summary"):  # typed (strings or null); the stream machine reads summary
        opt_str(reasoning, key, "reasoning")
    ignored.extend(
        f"reasoning.{k}"
        for k, v in reasoning.items()
        if k not in ("effort", "summary", "generate_summary") and v is not None
    )


def _map_include(body: dict[str, Any], chat: dict[str, Any], ignored: list[str]) -> None:
    include = body.get("include")
    wanted = False
    for i, value in enumerate(expect_list(include, "include") if include is not None else ()):
        if not isinstance(value, str):
            raise type_error(f"include[{i}]", "a string", value)
        wanted = wanted or value == _LOGPROBS_INCLUDE
        if value not in _HANDLED_INCLUDES:
            ignored.append(f"include {value}")
    top = opt_number(body, "top_logprobs", integer=True, low=0, high=20)
    if wanted or top:
        chat["logprobs"] = True
        if top:
            chat["top_logprobs"] = top


def _map_misc(body: dict[str, Any], chat: dict[str, Any], ignored: list[str]) -> None:
    user = opt_str(body, "user", "")
    if user is not None:
        chat["user"] = user
    stream = opt_bool(body, "stream", "")
    chat["stream"] = bool(stream)
    if stream:
        chat["stream_options"] = {"include_usage": True}
    opt_str(body, "previous_response_id", "")
    opt_bool(body, "store", "")
    metadata = body.get("metadata")
    if metadata is not None:
        for key, value in expect_dict(metadata, "metadata").items():
            if not isinstance(value, str):
                raise type_error(f"metadata.{key}", "a string", value)
    truncation = body.get("truncation")
    if truncation not in (None, "disabled", "auto"):
        raise value_error("truncation", f"expected 'auto' or 'disabled', got {truncation!r}.")
    if truncation == "auto":
        ignored.append("truncation auto")
    if not body.keys().isdisjoint(_CHECKED_IGNORED_KEYS):
        _check_ignored(body)
    if body.get("service_tier") not in (None, "auto", "default"):
        ignored.append(f"service_tier {body['service_tier']}")
    ignored.extend(key for key in _IGNORED_FIELDS if body.get(key) is not None)
    ignored.extend(key for key in body if key not in _HANDLED_FIELDS and key not in _IGNORED_FIELDS)


def _check_ignored(body: dict[str, Any]) -> None:
    """Accepted-and-not-sent fields still have to be of the type the Responses API documents:
    a client that sends ``max_tool_calls: "x"`` gets the 400 OpenAI would give, not a 200."""
    opt_number(body, "max_tool_calls", integer=True, low=1)
    for key in ("service_tier", "prompt_cache_key", "prompt_cache_retention", "safety_identifier"):
        opt_str(body, key, "")
    options = body.get("stream_options")
    if options is not None:
        opt_bool(expect_dict(options, "stream_options"), "include_obfuscation", "stream_options")
    moderation = body.get("moderation")
    if moderation is not None:
        opt_str(expect_dict(moderation, "moderation"), "model", "moderation")
    management = body.get("context_management")
    if management is not None:
        for i, raw in enumerate(expect_list(management, "context_management")):
            entry = expect_dict(raw, f"context_management[{i}]")
            req_str(entry, "type", f"context_management[{i}]")
            threshold = entry.get("compact_threshold")
            if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int)):
                raise type_error(f"context_management[{i}].compact_threshold", "an integer", threshold)
