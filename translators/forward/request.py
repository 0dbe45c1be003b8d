"""Responses API create request -> Chat Completions request (pure; docs/wire-facts.md, Requests).

``responses_request_to_chat`` validates the client's JSON (400 naming the ``param`` on a wrong
type), maps every field it knows, rejects the ones whose meaning cannot be kept, and reports
the ones it accepts but does not send in ``MappedRequest.ignored``. The full table, with the
reason for each choice, is ``docs/request-mapping.md``.

The request is read here once: what the proxy needs of it later (``stream``, ``store``,
``max_output_tokens``, ``max_tool_calls``, the ``include`` flags, and for the tools crossfeed runs
itself the hosted search options, the MCP tools, the approvals the input answers and the
conversation's listings and approval requests, the image_generation tool: ``HostedTools``) is on the ``MappedRequest``; no
proxy code reads the body for it after the mapping. The approvals' results are the proxy's (it
makes the calls): ``with_mcp_results`` puts them in the messages mapped for them.

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
  reasoning.effort             -> reasoning_effort (renamed by the profile's reasoning_effort_map;
      "omit": not sent); reasoning.summary: the reasoning streams as a
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
  web_search_call items, with web_search (crossfeed runs web search) -> the tool
      exchange they were (web_search_items.replayed); without it -> dropped, ignored
  conversation                 -> not sent: its items are the history the caller resolved (the
      proxy's Conversations API, proxy/state/conversations.py); ``history`` holds them
  prompt, background:true -> 400 naming the param
  truncation:"auto", service_tier, prompt_cache_key, safety_identifier, max_tool_calls,
  stream_options, unknown fields (client_metadata...) -> not sent, listed in ignored; the
  documented ones are still type-checked (_check_ignored): a wrong type -> 400 naming it
"""

from __future__ import annotations

import dataclasses
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
from crossfeed.translators.forward import mcp_items
from crossfeed.translators.forward import tool_search as ts
from crossfeed.translators.forward.image_items import ImageRequest, image_request
from crossfeed.translators.forward.input import InputMessages, OpenSummary, Reveal
from crossfeed.translators.forward.tools import ToolTable, map_text, map_tool_choice, map_tools
from crossfeed.translators.forward.web_search_items import WebSearchRequest, search_function_name, search_request
from crossfeed.translators.options import CUSTOM_ARG, BackendProfile, ToolContext
from crossfeed.translators.records import quick_init

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
_UNSUPPORTED_KEYS = frozenset({"prompt", "background"})
_SAMPLING_KEYS = frozenset({"max_output_tokens", "temperature", "top_p", "presence_penalty", "frequency_penalty"})
_INCLUDE_KEYS = frozenset({"include", "top_logprobs"})
_TOOL_KEYS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
_KNOWN_FIELDS = _HANDLED_FIELDS | frozenset(_IGNORED_FIELDS)
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


# The content of the tool message of an answered MCP approval in ``HostedTools.approved``, until
# the proxy knows what came of it (``with_mcp_results``).
PENDING = "\x00crossfeed: the result of an MCP approval\x00"


@dataclass(frozen=True, slots=True)
class HostedTools:
    """What a request asks of the tools crossfeed runs itself (proxy/turns/hosted/)."""

    search: WebSearchRequest | None  # a hosted web_search tool (the proxy runs it with a search backend)
    mcp: tuple[tuple[int, dict[str, Any]], ...]  # (i, tools[i]) of each mcp tool (the proxy checks them)
    answers: Mapping[str, bool]  # approval_request_id -> approve, for the input's mcp_approval_response
    answered_at: Mapping[str, str]  # approval_request_id -> the param of the response answering it
    requests: Mapping[str, dict[str, Any]]  # the conversation's mcp_approval_request items, by id
    listed: Mapping[str, list[dict[str, Any]]]  # server_label -> the tools the conversation listed
    client_functions: frozenset[Any]  # the names of the client's own functions
    approved: list[dict[str, Any]] | None = None  # the messages with the answered approvals (PENDING)
    catalog: ts.ToolCatalog | None = None  # deferred tools: the proxy runs the tool search
    images: ImageRequest | None = None  # an image_generation tool (the proxy runs it, or refuses it)


@quick_init
@dataclass(frozen=True)
class MappedRequest:
    chat: dict  # the body to POST to the upstream /chat/completions
    tools: ToolContext  # for the stream machine (custom tool names, namespace map)
    ignored: tuple[str, ...]  # accepted but not sent, for one info log line
    model: str
    # "trigger": the input ends with compaction_trigger and ``chat`` asks for the summary.
    compact: str | None = None
    # context_management's compact_threshold: compact first when the input counts more tokens.
    threshold: int | None = None
    stream: bool = False
    store: bool | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    include: frozenset[str] = frozenset()
    hosted: HostedTools | None = None  # None: no hosted tool, no MCP approval answered


def responses_request_to_chat(
    body: Any,
    options: BackendProfile,
    *,
    history: list[dict] | None = None,
    reveal_reasoning: Reveal | None = None,
    open_summary: OpenSummary | None = None,
    web_search: bool = False,
    mcp_results: Mapping[str, str] | None = None,
) -> MappedRequest:
    """Map a Responses create request onto a Chat Completions request (the rules: the module's docstring)."""
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
    search_function = search_function_name(body.get("tools")) if web_search else None
    msgs = InputMessages(options, reveal_reasoning, ignored, open_summary, search_function)
    msgs.client_functions = frozenset(
        t.get("name") for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"
    )
    searched = (
        ts.has_deferred(body.get("tools")) or ts.client_tool(body.get("tools"), body.get("tool_choice")) is not None
    )
    msgs.tool_search = ts.function_name(body.get("tools")) if searched else None
    chat["messages"] = _messages(body, history, msgs, mcp_results)
    if not chat["messages"]:
        raise missing("input")

    table, catalog = _map_tool_fields(body, chat, ignored, msgs)
    tokens = _map_sampling(body, options, chat) if not keys.isdisjoint(_SAMPLING_KEYS) else None
    map_text(body.get("text"), chat, ignored)
    _map_reasoning(body.get("reasoning"), chat, ignored, options)
    include = _map_include(body, chat, ignored) if not keys.isdisjoint(_INCLUDE_KEYS) else frozenset()
    store, max_tool_calls = _map_misc(body, chat, ignored)
    stream = chat["stream"]
    threshold = cmp.compact_threshold(body)
    if trigger:
        chat = cmp.summary_request(chat, options.compaction_prompt or cmp.COMPACTION_PROMPT)
    run_search = catalog if catalog is not None and catalog.client is None else None  # the client runs its own
    hosted = _hosted(body, history, msgs, include, run_search) if body.get("tools") or msgs.answers else None
    if hosted is not None and msgs.answers and mcp_results is None and not trigger:
        again = InputMessages(options, reveal_reasoning, [], open_summary, search_function)
        again.client_functions, again.tool_search = msgs.client_functions, msgs.tool_search
        approved = _messages(body, history, again, dict.fromkeys(msgs.answers, PENDING))
        hosted = dataclasses.replace(hosted, approved=approved)
    return MappedRequest(
        chat=chat,
        tools=ts.with_client_search(table.context(CUSTOM_ARG), catalog),
        ignored=tuple(ignored),
        model=model,
        compact="trigger" if trigger else None,
        threshold=None if trigger else threshold,
        stream=stream,
        store=store,
        max_output_tokens=tokens,
        max_tool_calls=max_tool_calls,
        include=include,
        hosted=hosted,
    )


def with_mcp_results(mapped: MappedRequest, results: Mapping[str, str]) -> MappedRequest:
    """The request with what came of the MCP approvals its input answers (the proxy made the
    calls, or says why not): the approved calls and their results in the messages."""
    approved = mapped.hosted.approved if mapped.hosted is not None else None
    if approved is None:
        return mapped
    messages = [
        {**m, "content": results.get(m["tool_call_id"], "")}
        if m.get("role") == "tool" and m.get("content") == PENDING
        else m
        for m in approved
    ]
    return dataclasses.replace(mapped, chat={**mapped.chat, "messages": messages})


def _messages(
    body: dict[str, Any], history: list[dict] | None, msgs: InputMessages, mcp_results: Mapping[str, str] | None
) -> list[dict[str, Any]]:
    """The instructions, the stored history and the input as chat messages (input.InputMessages)."""
    options = msgs.options
    msgs.mcp_results = mcp_results
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
    return cmp.place_system(msgs.finish(), options.system_placement, options.system_role)


def _map_tool_fields(
    body: dict[str, Any], chat: dict[str, Any], ignored: list[str], msgs: InputMessages
) -> tuple[ToolTable, ts.ToolCatalog | None]:
    """tools, tool_choice and parallel_tool_calls (tools.map_tools / map_tool_choice); with
    deferred tools, the catalogue that keeps them out until a tool search reveals them."""
    if body.keys().isdisjoint(_TOOL_KEYS) and not msgs.extra_tools and not msgs.loaded:
        return ToolTable(), None  # no tools anywhere: nothing to map, nothing to choose
    table = map_tools(body.get("tools"), ignored, CUSTOM_ARG, msgs.extra_tools, msgs.loaded)
    choice, allowed = map_tool_choice(body.get("tool_choice"), table, ignored)
    tools = [t for t in table.chat if allowed is None or t["function"]["name"] in allowed]
    client = ts.client_tool(body.get("tools"), body.get("tool_choice"))
    catalog = (
        _catalog(table, msgs, choice, allowed, client) if (table.deferred or client) and msgs.tool_search else None
    )
    if catalog is not None:
        tools = catalog.tools(catalog.revealed)
    parallel = opt_bool(body, "parallel_tool_calls", "")
    if tools:
        chat["tools"] = tools
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    elif choice not in (None, "none", "auto"):
        ignored.append(f"tool_choice {choice} (no function tools to call)")
    return table, catalog


def _catalog(
    table: ToolTable, msgs: InputMessages, choice: Any, allowed: set[str] | None, client: dict[str, Any] | None
) -> ts.ToolCatalog:
    """The deferred tools set apart: revealed are those an earlier tool search of the
    conversation loaded, and one ``tool_choice`` names (the backend must know the function).
    ``client``: the tool_search tool the client runs itself (then deferred tools may be none)."""
    hidden = {name for name, _, _ in table.deferred}
    revealed = set(msgs.revealed) & hidden
    if isinstance(choice, dict):
        revealed.add(choice["function"]["name"])
    deferred = tuple(
        ts.Deferred(
            name=name,
            chat=next(t for t in table.chat if t["function"]["name"] == name),
            tool=tool,
            namespace=space,
            label=f"{space.get('name')}.{tool.get('name')}" if space is not None else name,
            line=ts.one_line(tool.get("description")),
        )
        for name, tool, space in table.deferred
    )
    assert msgs.tool_search is not None
    return ts.ToolCatalog(
        function=msgs.tool_search,
        visible=tuple(
            t
            for t in table.chat
            if t["function"]["name"] not in hidden and (allowed is None or t["function"]["name"] in allowed)
        ),
        deferred=deferred,
        revealed=frozenset(revealed & hidden),
        allowed=frozenset(allowed) if allowed is not None else None,
        client=client,
    )


def _hosted(
    body: dict[str, Any],
    history: list[dict] | None,
    msgs: InputMessages,
    include: frozenset[str],
    catalog: ts.ToolCatalog | None,
) -> HostedTools | None:
    """The request's hosted search, image and MCP tools, the MCP approvals its input answers, and
    its deferred tools' catalogue."""
    tools = body.get("tools")
    search = search_request(tools, body.get("tool_choice"), include)
    images = image_request(tools, body.get("tool_choice"))
    servers = (
        tuple((i, t) for i, t in enumerate(tools) if isinstance(t, dict) and t.get("type") == "mcp")
        if isinstance(tools, list)
        else ()
    )
    if search is None and images is None and not servers and not msgs.answers and catalog is None:
        return None
    inp = body.get("input")
    earlier = [*(history or ()), *(inp if isinstance(inp, list) else ())] if servers or msgs.answers else []
    return HostedTools(
        search=search,
        mcp=servers,
        answers=msgs.answers,
        answered_at=msgs.answered_at,
        requests=mcp_items.requests(earlier),
        listed=mcp_items.listed(earlier),
        client_functions=msgs.client_functions,
        catalog=catalog,
        images=images,
    )


def _reject_unsupported(body: dict[str, Any]) -> None:
    if body.get("prompt") is not None:
        raise UnsupportedFeature(
            "Stored prompt templates live on OpenAI's servers and cannot be resolved by a chat "
            "backend: send the prompt text as instructions/input.",
            param="prompt",
        )
    # background: run by proxy/turns/background.py; its events are kept, so it must be stored
    if opt_bool(body, "background", "") and body.get("store") is False:
        raise InvalidRequest(
            "Background responses must be stored: `store` cannot be false when `background` is true.",
            param="store",
            code="invalid_value",
        )


def _map_sampling(body: dict[str, Any], options: BackendProfile, chat: dict[str, Any]) -> int | None:
    """The sampling fields; returns max_output_tokens."""
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
    return tokens


def _map_reasoning(reasoning: Any, chat: dict[str, Any], ignored: list[str], options: BackendProfile) -> None:
    if reasoning is None:
        return
    reasoning = expect_dict(reasoning, "reasoning")
    effort = opt_str(reasoning, "effort", "reasoning")
    if effort is not None and options.reasoning_effort_map:  # what this backend accepts ("omit": nothing)
        effort = dict(options.reasoning_effort_map).get(effort, effort)
    if effort is not None and effort != "omit":
        chat["reasoning_effort"] = effort
    for key in ("summary", "generate_summary"):  # typed (strings or null); the stream machine reads summary
        opt_str(reasoning, key, "reasoning")
    ignored.extend(
        f"reasoning.{k}"
        for k, v in reasoning.items()
        if k not in ("effort", "summary", "generate_summary") and v is not None
    )


def _map_include(body: dict[str, Any], chat: dict[str, Any], ignored: list[str]) -> frozenset[str]:
    """include and top_logprobs; returns the include values (the proxy honours some of them)."""
    include = body.get("include")
    values = expect_list(include, "include") if include is not None else []
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise type_error(f"include[{i}]", "a string", value)
        if value not in _HANDLED_INCLUDES:
            ignored.append(f"include {value}")
    top = opt_number(body, "top_logprobs", integer=True, low=0, high=20)
    if _LOGPROBS_INCLUDE in values or top:
        chat["logprobs"] = True
        if top:
            chat["top_logprobs"] = top
    return frozenset(values)


def _map_misc(body: dict[str, Any], chat: dict[str, Any], ignored: list[str]) -> tuple[bool | None, int | None]:
    """The other fields; returns (store, max_tool_calls)."""
    user = opt_str(body, "user", "")
    if user is not None:
        chat["user"] = user
    stream = opt_bool(body, "stream", "")
    chat["stream"] = bool(stream)
    if stream:
        chat["stream_options"] = {"include_usage": True}
    opt_str(body, "previous_response_id", "")
    store = opt_bool(body, "store", "")
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
    max_tool_calls = _check_ignored(body) if not body.keys().isdisjoint(_CHECKED_IGNORED_KEYS) else None
    if body.get("service_tier") not in (None, "auto", "default"):
        ignored.append(f"service_tier {body['service_tier']}")
    keys = body.keys()
    if not keys.isdisjoint(_IGNORED_FIELDS):
        ignored.extend(key for key in _IGNORED_FIELDS if body.get(key) is not None)
    if not keys <= _KNOWN_FIELDS:
        ignored.extend(key for key in body if key not in _KNOWN_FIELDS)
    return store, max_tool_calls


def _check_ignored(body: dict[str, Any]) -> int | None:
    """Accepted-and-not-sent fields still have to be of the type the Responses API documents:
    a client that sends ``max_tool_calls: "x"`` gets the 400 OpenAI would give, not a 200.
    Returns max_tool_calls (the proxy's tool loop honours it)."""
    max_tool_calls = opt_number(body, "max_tool_calls", integer=True, low=1)
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
    return max_tool_calls
