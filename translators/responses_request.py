"""Responses API create request -> Chat Completions request (pure; wire-spec section 3).

``responses_request_to_chat`` validates the client's JSON (400 naming the ``param`` on a wrong
type), maps every field it knows, rejects the ones whose meaning cannot be kept, and reports
the ones it accepts but does not send in ``MappedRequest.ignored``. The full table, with the
reason for each choice, is ``docs/request-mapping.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import compaction as cmp
from . import mcp_items as mcp
from .errors import InvalidRequest, UnsupportedFeature
from .options import CUSTOM_ARG, MappingOptions, ToolContext
from .tools_mapping import (
    expect_dict, expect_list, flat_name, map_text, map_tool_choice, map_tools, missing, opt_bool,
    opt_number, opt_str, req_str, type_error, value_error,
)
from .web_search_items import replayed

# An ``encrypted_content`` token -> (reasoning text, the backend's reasoning_details), or None.
Reveal = Callable[[str], "tuple[str, list[dict[str, Any]]] | None"]
# A compaction item's ``encrypted_content`` -> the summary it holds, or None.
OpenSummary = Callable[[str], "str | None"]

# Top-level fields that are accepted, not sent upstream, and listed in `ignored` when set.
_IGNORED_FIELDS = ("prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                   "max_tool_calls", "context_management", "moderation", "stream_options")
# Fields handled elsewhere (the proxy, or the Response echo): accepted, never forwarded, not logged.
_HANDLED_FIELDS = frozenset({"store", "previous_response_id", "metadata", "model", "input",
                             "instructions", "tools", "tool_choice", "parallel_tool_calls",
                             "max_output_tokens", "temperature", "top_p", "top_logprobs", "text",
                             "reasoning", "include", "user", "stream", "background", "prompt",
                             "conversation", "truncation", "service_tier"})
# The fields each group of checks reads: a group whose fields are all absent (the usual request
# sends a handful of fields) is skipped with one set test instead of a lookup per field.
_UNSUPPORTED_KEYS = frozenset({"conversation", "prompt", "background"})
_SAMPLING_KEYS = frozenset({"max_output_tokens", "temperature", "top_p"})
_INCLUDE_KEYS = frozenset({"include", "top_logprobs"})
_CHECKED_IGNORED_KEYS = frozenset({"max_tool_calls", "service_tier", "prompt_cache_key", "prompt_cache_retention",
                                   "safety_identifier", "stream_options", "moderation", "context_management"})
_LOGPROBS_INCLUDE = "message.output_text.logprobs"
_HANDLED_INCLUDES = frozenset({_LOGPROBS_INCLUDE, "reasoning.encrypted_content"})
# Responses input item types with no chat equivalent that only record hosted-tool activity.
_DROPPED_ITEM_TYPES = frozenset({
    "web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call",
    "computer_call", "computer_call_output", "local_shell_call", "local_shell_call_output",
    "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
    "tool_search_call", "tool_search_output", "compaction_summary",
})
_MCP_ITEMS = frozenset({"mcp_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response"})
_TOOL_IMAGE_NOTE = "(The tool returned image or file content; it follows in the next message.)"


@dataclass(frozen=True, slots=True)
class MappedRequest:
    chat: dict            # the body to POST to the upstream /chat/completions
    tools: ToolContext    # for the stream machine (custom tool names, namespace map)
    ignored: tuple[str, ...]  # accepted but not sent, for one info log line
    model: str
    # "trigger": the input ends with compaction_trigger and ``chat`` asks for the summary.
    compact: str | None = None
    # context_management's compact_threshold: compact first when the input counts more tokens.
    threshold: int | None = None


def responses_request_to_chat(body: Any, options: MappingOptions, *,
                              history: list[dict] | None = None,
                              reveal_reasoning: Reveal | None = None,
                              open_summary: OpenSummary | None = None,
                              search_function: str | None = None,
                              mcp_results: Mapping[str, str] | None = None) -> MappedRequest:
    """Map a Responses create request onto a Chat Completions request.

    Rules:
      body not an object           -> 400 param None; model missing -> 400 param "model"
      instructions                 -> first message, role options.system_role ("" is skipped)
      history (previous_response_id, resolved by the proxy) + input -> messages (see _Messages)
      input string                 -> one user message; no messages at all -> 400 "input"
      tools / tool_choice          -> tools_mapping.map_tools / map_tool_choice
      parallel_tool_calls          -> same (only when tools are sent)
      max_output_tokens (int >= 1) -> max_tokens and/or max_completion_tokens (options)
      temperature (0..2), top_p (0..1), user -> same names
      text.format json_schema      -> response_format {type:json_schema, json_schema:{...}}
      text.format json_object      -> response_format {type:json_object}; text -> nothing
      text.verbosity               -> verbosity
      reasoning.effort             -> reasoning_effort; reasoning.summary/others -> ignored
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
    msgs = _Messages(options, reveal_reasoning, ignored, open_summary, search_function)
    msgs.mcp_results = mcp_results
    msgs.client_functions = frozenset(t.get("name") for t in body.get("tools") or ()
                                      if isinstance(t, dict) and t.get("type") == "function")
    instructions = opt_str(body, "instructions", "")
    if instructions:
        msgs.out.append({"role": options.system_role, "content": instructions})
    for i, item in enumerate(history or ()):
        try:
            msgs.add_item(item, f"input[{i}]")
        except InvalidRequest as exc:  # our own stored data: blame the id that brought it in
            raise InvalidRequest(f"Stored conversation item {i}: {exc.message}",
                                 param="previous_response_id") from exc
    inp = body.get("input")
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
    return MappedRequest(chat=chat, tools=table.context(arg), ignored=tuple(ignored), model=model,
                         compact="trigger" if trigger else None, threshold=None if trigger else threshold)


def _reject_unsupported(body: dict[str, Any]) -> None:
    if body.get("conversation") is not None:
        raise UnsupportedFeature(
            "crossfeed keeps no conversation objects: send the full input, or chain turns with "
            "previous_response_id.", param="conversation")
    if body.get("prompt") is not None:
        raise UnsupportedFeature(
            "Stored prompt templates live on OpenAI's servers and cannot be resolved by a chat "
            "backend: send the prompt text as instructions/input.", param="prompt")
    background = opt_bool(body, "background", "")
    if background:
        raise UnsupportedFeature(
            "Background responses (queued, polled and cancelled later) are not supported: send "
            "the request without background, with stream: true for long generations.",
            param="background", code="unsupported_value")


def _map_sampling(body: dict[str, Any], options: MappingOptions, chat: dict[str, Any]) -> None:
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


def _map_reasoning(reasoning: Any, chat: dict[str, Any], ignored: list[str]) -> None:
    if reasoning is None:
        return
    reasoning = expect_dict(reasoning, "reasoning")
    effort = opt_str(reasoning, "effort", "reasoning")
    if effort is not None:
        chat["reasoning_effort"] = effort
    for key in ("summary", "generate_summary"):  # ignored, but typed (strings or null)
        opt_str(reasoning, key, "reasoning")
    ignored.extend(f"reasoning.{k}" for k, v in reasoning.items() if k != "effort" and v is not None)


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


# ---------------------------------------------------------------- input items -> messages

def _text_of(parts: list[str]) -> str:
    return "\n".join(parts)


class _Messages:
    """Folds Responses input items into chat messages.

    Rules:
      message user/system          -> same role; developer -> options.system_role
      content string               -> string; parts: input_text/output_text -> text,
          input_image -> image_url part, input_file -> file part; text-only parts -> one
          string joined with "\\n", otherwise an array of parts (images stay arrays)
      input_image.file_id, input_file.file_url -> 400 (no chat equivalent)
      system/developer content with images or files -> 400
      assistant message (output_text, input_text, refusal parts) -> text string; consecutive
          assistant items (messages, function_call, custom_tool_call) form one assistant turn:
          ONE chat message, text joined, tool_calls in order
      function_call {call_id, name, arguments, namespace?} -> tool_calls entry; the name is
          flattened to `<ns>__<name>` when namespace is set
      custom_tool_call {call_id, name, input} -> tool_calls entry calling the wrapped function
          with arguments JSON {custom_arg: input}
      function_call_output / custom_tool_call_output -> tool message; text parts joined; image
          and file parts move to one user message placed after the run of tool messages
      reasoning -> text (content reasoning_text, else summary_text, else the text of
          reveal_reasoning(encrypted_content)) set as options.reasoning_field on the assistant
          message of the same turn (joined with "\\n\\n"), and the backend's reasoning_details
          sealed in encrypted_content set as that message's reasoning_details (OpenRouter and
          others want them back: Gemini's thought signatures, signed thinking); the turn is the
          next assistant item's, or the open one's when a non-assistant item comes first; no
          assistant item around it -> dropped and listed in ignored
      item_reference -> 400; hosted-tool items (web_search_call, ...) -> dropped, ignored
      other/unknown types -> 400 input[i].type
    """

    def __init__(self, options: MappingOptions, reveal: Reveal | None, ignored: list[str],
                 open_summary: OpenSummary | None = None, search_function: str | None = None) -> None:
        self.options = options
        self.reveal = reveal
        self.open_summary = open_summary
        self.search_function = search_function
        self.mcp_results: Mapping[str, str] | None = None  # approval_request_id -> what came of it
        self.client_functions: frozenset[Any] = frozenset()
        self.approvals: dict[str, dict[str, Any]] = {}  # approval requests seen, by id
        self.ignored = ignored
        self.out: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None   # the open assistant message
        self.reasoning: list[str] = []            # pending, for the next assistant content
        self.details: list[dict[str, Any]] = []   # pending reasoning_details, likewise
        self.reasoning_at: str | None = None
        self.deferred: list[dict[str, Any]] = []  # tool-output media for a following user message
        self.extra_tools: list[tuple[str, Any]] = []  # tools declared by additional_tools items

    def add_item(self, raw: Any, p: str) -> None:
        item = expect_dict(raw, p)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == "message":
            self._message(item, p)
        elif kind in ("function_call", "custom_tool_call"):
            name = req_str(item, "name", p)
            ns = opt_str(item, "namespace", p)
            args = (req_str(item, "arguments", p) if kind == "function_call" else
                    json.dumps({CUSTOM_ARG: req_str(item, "input", p)}, ensure_ascii=False))
            self._call(item, p, flat_name(ns, name) if ns else name, args)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._tool_output(item, p)
        elif kind == "reasoning":
            self._reasoning(item, p)
        elif kind == "additional_tools":
            # Codex declares tools in the input for some models: they join the request's tools.
            for j, tool in enumerate(expect_list(item.get("tools") or [], f"{p}.tools")):
                self.extra_tools.append((f"{p}.tools[{j}]", tool))
        elif kind == "web_search_call" and self.search_function:
            call_id = opt_str(item, "id", p) or "ws_" + "".join(c for c in p if c.isdigit())
            call, result = replayed(item, self.search_function, call_id)
            self._assistant().setdefault("tool_calls", []).append(call)
            self._close()
            self.out.append(result)
        elif kind in _MCP_ITEMS:
            self._mcp(kind, item, p)
        elif kind == cmp.ITEM:
            self._compaction(item, p)
        elif kind == cmp.TRIGGER:
            pass  # its place was checked (compaction.trigger_in): it asks for this request's kind
        elif kind == "item_reference":
            raise UnsupportedFeature("item_reference needs items stored by id, which crossfeed "
                                     "does not keep: send the item itself.", param=p)
        elif kind in _DROPPED_ITEM_TYPES:
            self.ignored.append(f"{p} {kind}")
        elif kind is None:
            raise missing(f"{p}.type")
        else:
            raise value_error(f"{p}.type", f"unsupported input item type {kind!r}.")

    def finish(self) -> list[dict[str, Any]]:
        self._close()
        return self.out

    # -- assistant turn

    def _assistant(self) -> dict[str, Any]:
        if self.turn is None:
            self._flush_deferred()
            self.turn = {"role": "assistant", "content": None}
            self.out.append(self.turn)
        if self.reasoning or self.details:
            self._attach_reasoning(self.turn)
        return self.turn

    def _attach_reasoning(self, turn: dict[str, Any]) -> None:
        if self.reasoning:
            prev = turn.get(self.options.reasoning_field)
            turn[self.options.reasoning_field] = "\n\n".join(([prev] if prev else []) + self.reasoning)
        if self.details:
            turn["reasoning_details"] = turn.get("reasoning_details", []) + self.details
        self.reasoning, self.details, self.reasoning_at = [], [], None

    def _call(self, item: dict[str, Any], p: str, name: str, arguments: str) -> None:
        call = {"id": req_str(item, "call_id", p), "type": "function",
                "function": {"name": name, "arguments": arguments}}
        self._assistant().setdefault("tool_calls", []).append(call)

    def _close(self) -> None:
        """A non-assistant item follows: end the assistant turn and flush what waits for it."""
        if (self.reasoning or self.details) and self.turn is not None:
            self._attach_reasoning(self.turn)  # the end of the turn's own output
        elif self.reasoning or self.details:
            self.ignored.append(f"{self.reasoning_at} reasoning (no assistant message follows)")
            self.reasoning, self.details, self.reasoning_at = [], [], None
        self.turn = None
        self._flush_deferred()

    def _flush_deferred(self) -> None:
        if self.deferred:
            self.out.append({"role": "user", "content": self.deferred})
            self.deferred = []

    # -- messages

    def _message(self, item: dict[str, Any], p: str) -> None:
        role = item.get("role")
        content = item.get("content")
        if content is None:
            raise missing(f"{p}.content")
        if role == "assistant":
            text = content if isinstance(content, str) else self._assistant_text(content, p)
            turn = self._assistant()
            turn["content"] = text if turn["content"] is None else _text_of([turn["content"], text])
            return
        if role not in ("user", "system", "developer"):
            raise value_error(f"{p}.role", f"expected 'user', 'assistant', 'system' or "
                                           f"'developer', got {role!r}.")
        self._close()
        chat_role = self.options.system_role if role == "developer" else role
        mapped = content if isinstance(content, str) else self._parts(content, p, media=role == "user")
        self.out.append({"role": chat_role, "content": mapped})

    def _assistant_text(self, content: Any, p: str) -> str:
        texts = []
        for j, raw in enumerate(expect_list(content, f"{p}.content")):
            part = expect_dict(raw, f"{p}.content[{j}]")
            kind = part.get("type")
            if kind in ("output_text", "input_text"):
                texts.append(req_str(part, "text", f"{p}.content[{j}]"))
            elif kind == "refusal":
                texts.append(req_str(part, "refusal", f"{p}.content[{j}]"))
            else:
                raise value_error(f"{p}.content[{j}].type",
                                  f"assistant content must be output_text or refusal, got {kind!r}.")
        return _text_of(texts)

    def _parts(self, content: Any, p: str, *, media: bool) -> str | list[dict[str, Any]]:
        parts = [self._part(raw, f"{p}.content[{j}]", media)
                 for j, raw in enumerate(expect_list(content, f"{p}.content"))]
        if all(part["type"] == "text" for part in parts):
            return _text_of([part["text"] for part in parts])
        return parts

    def _part(self, raw: Any, p: str, media: bool) -> dict[str, Any]:
        part = expect_dict(raw, p)
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            return {"type": "text", "text": req_str(part, "text", p)}
        if kind not in ("input_image", "input_file"):
            raise value_error(f"{p}.type", f"unsupported content part type {kind!r}.")
        if not media:
            raise value_error(p, f"{kind} parts are only allowed in user messages and tool outputs.")
        if kind == "input_image":
            if part.get("image_url") is None and part.get("file_id") is not None:
                raise UnsupportedFeature("input_image.file_id refers to a file stored on OpenAI; "
                                         "send image_url (an https or data: URL).", param=f"{p}.file_id")
            image: dict[str, Any] = {"url": req_str(part, "image_url", p)}
            detail = opt_str(part, "detail", p)
            if detail is not None:
                if detail not in ("low", "high", "auto", "original"):
                    raise value_error(f"{p}.detail",
                                      f"expected 'low', 'high', 'auto' or 'original', got {detail!r}.")
                image["detail"] = "high" if detail == "original" else detail
            return {"type": "image_url", "image_url": image}
        if part.get("file_url") is not None:
            raise UnsupportedFeature("input_file.file_url cannot be passed to a chat backend: send "
                                     "file_data (base64) instead.", param=f"{p}.file_url")
        file = {k: opt_str(part, k, p) for k in ("file_id", "file_data", "filename")}
        if file["file_id"] is None and file["file_data"] is None:
            raise missing(f"{p}.file_data")
        return {"type": "file", "file": {k: v for k, v in file.items() if v is not None}}

    def _tool_output(self, item: dict[str, Any], p: str) -> None:
        call_id = req_str(item, "call_id", p)
        output = item.get("output")
        if output is None:
            raise missing(f"{p}.output")
        if isinstance(output, str):
            text = output
        else:
            texts: list[str] = []
            media: list[dict[str, Any]] = []
            for j, raw in enumerate(expect_list(output, f"{p}.output")):
                part = self._part(raw, f"{p}.output[{j}]", media=True)
                if part["type"] == "text":
                    texts.append(part["text"])
                else:
                    media.append(part)
            text = _text_of(texts) if texts or not media else _TOOL_IMAGE_NOTE
            self.deferred.extend(media)
        pending = self.deferred
        self.deferred = []
        self._close()
        self.deferred = pending
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _mcp(self, kind: str, item: dict[str, Any], p: str) -> None:
        """MCP items of earlier turns, as the tool exchanges they were (mcp_items.py)."""
        label, tool = item.get("server_label"), item.get("name")
        name = mcp.function_name(str(label), str(tool), self.client_functions) if label and tool else ""
        if kind == "mcp_call" and name:
            call, result = mcp.call_exchange(item, name)
            self._assistant().setdefault("tool_calls", []).append(call)
            self._close()
            if result is not None:
                self.out.append(result)
        elif kind == "mcp_approval_request" and name and self.mcp_results is not None \
                and str(item.get("id")) in self.mcp_results:
            self._assistant().setdefault("tool_calls", []).append(mcp.approval_call(item, name))
        elif kind == "mcp_approval_response" and self.mcp_results is not None:
            rid = item.get("approval_request_id")
            if isinstance(rid, str) and rid in self.mcp_results:
                self._close()
                self.out.append({"role": "tool", "tool_call_id": rid, "content": self.mcp_results[rid]})
        else:
            self.ignored.append(f"{p} {kind}")

    def _compaction(self, item: dict[str, Any], p: str) -> None:
        """The summary in place of the history it stands for: what came before it is kept only
        where it is a system, developer or user message (compaction.window)."""
        token = cmp.check_item(item, p)
        summary = self.open_summary(token) if self.open_summary is not None else None
        if summary is None:
            raise InvalidRequest(
                f"The compaction item {p} cannot be opened: its encrypted_content was not sealed by crossfeed "
                "with this server's key, or it was altered. The history it stands for is not here; send that "
                "history instead.", param=f"{p}.encrypted_content", code="invalid_encrypted_content")
        self._close()
        self.reasoning, self.details, self.reasoning_at = [], [], None
        self.out[:] = [*cmp.window(self.out, self.options.system_role), cmp.summary_message(summary)]

    def _reasoning(self, item: dict[str, Any], p: str) -> None:
        text = self._visible_reasoning(item, p)
        details: list[dict[str, Any]] = []
        encrypted = opt_str(item, "encrypted_content", p)
        if encrypted:  # opened even next to visible text: it may hold the backend's details
            opened = self.reveal(encrypted) if self.reveal is not None else None
            if opened is None:
                if not text:
                    self.ignored.append(f"{p}.encrypted_content")
            else:
                text = text or opened[0]
                details = opened[1]
        if text:
            self.reasoning.append(text)
        self.details += details
        if text or details:
            self.reasoning_at = self.reasoning_at or p

    def _visible_reasoning(self, item: dict[str, Any], p: str) -> str | None:
        for key, kinds in (("content", ("reasoning_text", "text")), ("summary", ("summary_text",))):
            raw = item.get(key)
            texts = []
            for j, part in enumerate(expect_list(raw, f"{p}.{key}") if raw is not None else ()):
                part = expect_dict(part, f"{p}.{key}[{j}]")
                if part.get("type") in kinds:
                    texts.append(req_str(part, "text", f"{p}.{key}[{j}]"))
            if any(texts):
                return ("" if key == "content" else "\n\n").join(texts)
        return None
