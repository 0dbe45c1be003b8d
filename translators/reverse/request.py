"""Chat Completions create request -> Responses create request (the reverse direction:
a chat client in front of a Responses backend).

``chat_request_to_responses`` validates the chat client's JSON (``InvalidRequest`` /
``UnsupportedFeature`` naming the ``param`` OpenAI-style: ``messages[2].content[0].type``,
``temperature``), maps every field it knows (docs/wire-facts.md, "Chat Completions to Responses"), and rejects the fields whose effect a
Responses backend cannot reproduce, unless the upstream's ``drop_params`` names them. ``n`` and
``stop`` are not sent: the proxy runs them (``choice_count``, ``stop_sequences``). The table with
the reason for each choice is ``docs/reverse-mapping.md``.
"""

from __future__ import annotations

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
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.reverse.messages import ChatMessages, unsupported
from crossfeed.translators.reverse.stop_sequences import normalize

_LOGPROBS_INCLUDE = "message.output_text.logprobs"
# Same name, same meaning: copied when set (strings).
_PASS_STR = ("user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "service_tier")
# Accepted, not sent (only tune caching), reported in `ignored`.
_DROPPED = ("prompt_cache_options",)
_HANDLED = frozenset(
    {
        "model",
        "messages",
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "response_format",
        "verbosity",
        "reasoning_effort",
        "metadata",
        "store",
        "stream",
        "stream_options",
        "n",
        "logprobs",
        "top_logprobs",
        "web_search_options",
        "stop",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "audio",
        "modalities",
        "prediction",
        "moderation",
        *_PASS_STR,
        *_DROPPED,
    }
)
# Never dropped by drop_params: without them there is no request.
_NOT_DROPPABLE = frozenset({"model", "messages", "stream"})
# The fields each group of checks reads: a group whose fields are all absent (the usual request
# sends a handful) is skipped with one set test instead of a lookup per field.
_REJECTED_KEYS = frozenset({"n", "stop", "seed", "logit_bias", "modalities", "audio", "prediction", "moderation"})
_TOOL_KEYS = frozenset({"tools", "functions", "web_search_options"})
_SAMPLING_KEYS = frozenset(
    {
        "max_completion_tokens",
        "max_tokens",
        "temperature",
        "top_p",
        "frequency_penalty",
        "presence_penalty",
        "response_format",
        "verbosity",
        "reasoning_effort",
        "logprobs",
        "top_logprobs",
    }
)
MAX_CHOICES = 8  # n: that many Responses calls run for one request
MAX_STOP_SEQUENCES = 4  # as OpenAI's Chat API


def include_usage(body: dict[str, Any]) -> bool:
    """True when the chat client asked for the final usage chunk (``stream_options.include_usage``)."""
    so = body.get("stream_options")
    return isinstance(so, dict) and so.get("include_usage") is True


def stop_sequences(body: dict[str, Any], options: BackendProfile) -> tuple[str, ...]:
    """The request's ``stop``, for crossfeed to apply (the Responses API has none): a string or
    up to 4 strings; ``null``, ``""`` and ``[]`` (and empty strings in the list) mean none, as
    does ``stop`` listed in the upstream's ``drop_params``. Invalid -> 400 ``stop``."""
    if "stop" in options.drop_params:
        return ()
    raw = body.get("stop")
    if raw is None:
        return ()
    if isinstance(raw, str):
        return normalize((raw,))
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise type_error("stop", "a string or an array of strings", raw)
    if len(raw) > MAX_STOP_SEQUENCES:
        raise value_error("stop", f"expected at most {MAX_STOP_SEQUENCES} stop sequences, got {len(raw)}.")
    return normalize(raw)


def choice_count(body: dict[str, Any], options: BackendProfile) -> int:
    """The request's ``n`` (1 when absent, null, or listed in ``drop_params``): an integer from
    1 to ``MAX_CHOICES``, else 400 ``n``. Each choice is its own Responses call."""
    if "n" in options.drop_params:
        return 1
    n = opt_number(body, "n", integer=True, low=1, high=MAX_CHOICES)
    return 1 if n is None else int(n)


def chat_request_to_responses(
    body: Any, options: BackendProfile, *, ignored: list[str] | None = None
) -> dict[str, Any]:
    """Map a Chat Completions request onto a Responses request.

    Rules:
    - body not an object, ``model`` missing/not a string, ``messages`` missing/empty -> 400;
    - ``messages`` -> ``instructions`` + ``input`` (see translators/reverse/messages.py);
    - ``tools`` nested -> flat (``strict`` always explicit, false when omitted: Responses would
      make the schema strict), ``custom`` tools flattened (grammar format too), legacy
      ``functions`` -> function tools; ``web_search_options`` -> a ``web_search`` tool;
    - ``tool_choice`` none/auto/required kept, ``{type:function, function:{name}}`` -> flat,
      ``allowed_tools`` unwrapped with flat entries; legacy ``function_call`` when no tool_choice;
    - ``max_completion_tokens`` (else ``max_tokens``) -> ``max_output_tokens``, raised to the profile's ``min_output_tokens``
      (OpenAI rejects less than 16) when lower;
    - ``temperature``, ``top_p``, ``parallel_tool_calls``, ``metadata``, ``user``,
      ``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_retention``, ``service_tier`` copied;
    - ``response_format`` -> ``text.format`` (json_schema flattened, ``strict`` explicit);
      ``verbosity`` -> ``text.verbosity``; ``reasoning_effort`` -> ``reasoning.effort``;
    - ``logprobs: true`` -> ``include: ["message.output_text.logprobs"]``, ``top_logprobs`` copied
      (400 without ``logprobs: true``, as OpenAI does);
    - ``store`` -> ``store``, false unless the client sent ``true`` (Responses defaults to true);
      ``stream`` copied as a bool (the caller sets it anyway); ``stream_options.include_obfuscation``
      copied; ``include_usage`` is for the stream machine (see ``include_usage``);
    - ``frequency_penalty`` / ``presence_penalty`` (-2..2) copied when not 0 (the default);
    - ``n`` (1..8) and ``stop`` (a string or up to 4) are checked and not sent: crossfeed runs
      them (``choice_count``, ``stop_sequences``: n calls, the text cut at the stop sequence);
    - ``seed``, non-empty ``logit_bias``, ``audio``, ``modalities`` other than ``["text"]``,
      ``prediction``, ``moderation`` -> 400 ``unsupported_parameter`` naming the param (they
      change the output);
    - ``prompt_cache_options`` accepted and dropped (listed in ``ignored``); any other field -> 400
      ``Unrecognized request argument`` (as OpenAI answers), never silently dropped;
    - fields named in ``options.drop_params`` (the upstream's ``drop_params``) are removed first,
      whatever they are (``model``, ``messages`` and ``stream`` aside), and listed in ``ignored``
      when they had a value: the operator's choice to drop what the backend lacks.
    """
    dropped = ignored if ignored is not None else []
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    if options.drop_params:
        body = _drop_params(body, options.drop_params, dropped)
    for key in body:
        if key not in _HANDLED:
            raise UnsupportedFeature(
                f"Unrecognized request argument supplied: {key}", param=key, code="unknown_parameter"
            )
    model = body.get("model")
    if model is None:
        raise missing("model")
    if not isinstance(model, str) or not model:
        raise type_error("model", "a non-empty string", model)
    _reject_unsupported(body, options)
    msgs = ChatMessages(options, dropped)
    messages = body.get("messages")
    if messages is None:
        raise missing("messages")
    if not expect_list(messages, "messages"):
        raise value_error("messages", "expected a non-empty array.")
    for i, raw in enumerate(messages):
        msgs.add(raw, i)
    out: dict[str, Any] = {"model": model}
    if msgs.instructions:
        out["instructions"] = "\n\n".join(msgs.instructions)
    out["input"] = msgs.items
    tools = _map_tools(body) if not body.keys().isdisjoint(_TOOL_KEYS) else None
    if tools:
        out["tools"] = tools
    choice = _map_tool_choice(body.get("tool_choice"), "tool_choice")
    if choice is None and body.get("function_call") is not None:
        choice = _map_legacy_choice(body["function_call"])
    if choice is not None:
        out["tool_choice"] = choice
    parallel = opt_bool(body, "parallel_tool_calls", "")
    if parallel is not None:
        out["parallel_tool_calls"] = parallel
    _map_sampling(body, out, options.min_output_tokens)
    _map_copied(body, out)
    if not body.keys().isdisjoint(_DROPPED):
        dropped.extend(key for key in _DROPPED if body.get(key) is not None)
    return out


def _map_copied(body: dict[str, Any], out: dict[str, Any]) -> None:
    """The fields copied after a check: the strings, ``metadata``, ``store``, ``stream`` and
    ``stream_options.include_obfuscation``."""
    if not body.keys().isdisjoint(_PASS_STR):
        for key in _PASS_STR:
            if opt_str(body, key, "") is not None:
                out[key] = body[key]
    metadata = body.get("metadata")
    if metadata is not None:
        for key, value in expect_dict(metadata, "metadata").items():
            if not isinstance(value, str):
                raise type_error(f"metadata.{key}", "a string", value)
        out["metadata"] = metadata
    out["store"] = opt_bool(body, "store", "") is True
    out["stream"] = opt_bool(body, "stream", "") is True
    so = body.get("stream_options")
    if so is not None:
        so = expect_dict(so, "stream_options")
        opt_bool(so, "include_usage", "stream_options")
        if opt_bool(so, "include_obfuscation", "stream_options") is not None:
            out["stream_options"] = {"include_obfuscation": so["include_obfuscation"]}


def _drop_params(body: dict[str, Any], names: tuple[str, ...], dropped: list[str]) -> dict[str, Any]:
    """``body`` without the fields the upstream's ``drop_params`` names (each reported once in
    ``dropped`` when it was given a value); ``model``, ``messages`` and ``stream`` are kept."""
    gone = [key for key in dict.fromkeys(names) if key in body and key not in _NOT_DROPPABLE]
    if not gone:
        return body
    dropped.extend(key for key in gone if body[key] is not None)
    return {k: v for k, v in body.items() if k not in gone}


def _reject_unsupported(body: dict[str, Any], options: BackendProfile) -> None:
    if body.keys().isdisjoint(_REJECTED_KEYS):
        return
    # n and stop are crossfeed's to run (several calls; the text cut): checked here, not sent.
    choice_count(body, options)
    stop_sequences(body, options)
    if body.get("seed") is not None:
        raise unsupported("seed")
    if body.get("logit_bias") not in (None, {}):
        raise unsupported("logit_bias")
    modalities = body.get("modalities")
    if modalities is not None and expect_list(modalities, "modalities") != ["text"]:
        raise unsupported("modalities", "only text output is available")
    for key in ("audio", "prediction", "moderation"):
        if body.get(key) is not None:
            raise unsupported(key)


def _map_sampling(body: dict[str, Any], out: dict[str, Any], floor: int) -> None:
    if body.keys().isdisjoint(_SAMPLING_KEYS):
        return
    tokens = opt_number(body, "max_completion_tokens", integer=True, low=1)
    if tokens is None:
        tokens = opt_number(body, "max_tokens", integer=True, low=1)
    else:
        opt_number(body, "max_tokens", integer=True, low=1)
    if tokens is not None:
        out["max_output_tokens"] = max(tokens, floor)
    for key, high in (("temperature", 2), ("top_p", 1)):
        value = opt_number(body, key, low=0, high=high)
        if value is not None:
            out[key] = value
    for key in ("frequency_penalty", "presence_penalty"):  # same names in Responses (Open Responses)
        value = opt_number(body, key, low=-2, high=2)
        if value:  # 0 is the default: not sent, for backends that do not know the field
            out[key] = value
    text: dict[str, Any] = {}
    rf = body.get("response_format")
    if rf is not None:
        text["format"] = _map_response_format(expect_dict(rf, "response_format"))
    if opt_str(body, "verbosity", "") is not None:
        text["verbosity"] = body["verbosity"]
    if text:
        out["text"] = text
    if opt_str(body, "reasoning_effort", "") is not None:
        out["reasoning"] = {"effort": body["reasoning_effort"]}
    logprobs = opt_bool(body, "logprobs", "")
    top = opt_number(body, "top_logprobs", integer=True, low=0, high=20)
    if logprobs:
        out["include"] = [_LOGPROBS_INCLUDE]
    if top is not None:
        if not logprobs:
            raise value_error("top_logprobs", "logprobs must be set to true if top_logprobs is used.")
        out["top_logprobs"] = top


def _map_response_format(rf: dict[str, Any]) -> dict[str, Any]:
    kind = rf.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind != "json_schema":
        raise value_error("response_format.type", f"expected 'text', 'json_object' or 'json_schema', got {kind!r}.")
    js = expect_dict(rf.get("json_schema"), "response_format.json_schema")
    fmt: dict[str, Any] = {"type": "json_schema", "name": req_str(js, "name", "response_format.json_schema")}
    if opt_str(js, "description", "response_format.json_schema") is not None:
        fmt["description"] = js["description"]
    if js.get("schema") is not None:
        fmt["schema"] = expect_dict(js["schema"], "response_format.json_schema.schema")
    fmt["strict"] = opt_bool(js, "strict", "response_format.json_schema") is True
    return fmt


# ---------------------------------------------------------------- tools


def _map_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    raw_tools = body.get("tools")
    for i, raw in enumerate(expect_list(raw_tools, "tools") if raw_tools is not None else ()):
        p = f"tools[{i}]"
        tool = expect_dict(raw, p)
        kind = tool.get("type")
        if kind == "function":
            tools.append(_function(expect_dict(tool.get("function"), f"{p}.function"), f"{p}.function"))
        elif kind == "custom":
            tools.append(_custom(expect_dict(tool.get("custom"), f"{p}.custom"), f"{p}.custom"))
        elif kind is None:
            raise missing(f"{p}.type")
        else:
            raise UnsupportedFeature(
                f"Tool type {kind!r} is not supported: declare function or custom tools.", param=f"{p}.type"
            )
    functions = body.get("functions")
    for i, raw in enumerate(expect_list(functions, "functions") if functions is not None else ()):
        tools.append(_function(expect_dict(raw, f"functions[{i}]"), f"functions[{i}]"))
    wso = body.get("web_search_options")
    if wso is not None:
        tools.append(_web_search(expect_dict(wso, "web_search_options")))
    return tools


def _function(fn: dict[str, Any], p: str) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": req_str(fn, "name", p)}
    if opt_str(fn, "description", p) is not None:
        tool["description"] = fn["description"]
    params = fn.get("parameters")
    # Chat: parameters omitted = a function without arguments.
    tool["parameters"] = (
        expect_dict(params, f"{p}.parameters") if params is not None else {"type": "object", "properties": {}}
    )
    tool["strict"] = opt_bool(fn, "strict", p) is True
    return tool


def _custom(c: dict[str, Any], p: str) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "custom", "name": req_str(c, "name", p)}
    if opt_str(c, "description", p) is not None:
        tool["description"] = c["description"]
    fmt = c.get("format")
    if fmt is not None:
        fmt = expect_dict(fmt, f"{p}.format")
        kind = fmt.get("type")
        if kind == "text":
            tool["format"] = {"type": "text"}
        elif kind == "grammar":
            g = expect_dict(fmt.get("grammar"), f"{p}.format.grammar")
            tool["format"] = {
                "type": "grammar",
                "syntax": req_str(g, "syntax", f"{p}.format.grammar"),
                "definition": req_str(g, "definition", f"{p}.format.grammar"),
            }
        else:
            raise value_error(f"{p}.format.type", f"expected 'text' or 'grammar', got {kind!r}.")
    return tool


def _web_search(wso: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "web_search"}
    if opt_str(wso, "search_context_size", "web_search_options") is not None:
        tool["search_context_size"] = wso["search_context_size"]
    loc = wso.get("user_location")
    if loc is not None:
        loc = expect_dict(loc, "web_search_options.user_location")
        approx = expect_dict(loc.get("approximate"), "web_search_options.user_location.approximate")
        tool["user_location"] = {"type": "approximate", **{k: v for k, v in approx.items() if v is not None}}
    return tool


def _named(entry: dict[str, Any], p: str) -> dict[str, Any]:
    """``{type:function, function:{name}}`` / ``{type:custom, custom:{name}}`` -> flat."""
    kind = entry.get("type")
    if kind not in ("function", "custom"):
        raise value_error(f"{p}.type", f"expected 'function' or 'custom', got {kind!r}.")
    inner = expect_dict(entry.get(kind), f"{p}.{kind}")
    return {"type": kind, "name": req_str(inner, "name", f"{p}.{kind}")}


def _map_tool_choice(choice: Any, p: str) -> Any:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise value_error(p, f"expected 'none', 'auto' or 'required', got {choice!r}.")
        return choice
    choice = expect_dict(choice, p)
    if choice.get("type") != "allowed_tools":
        return _named(choice, p)
    at = expect_dict(choice.get("allowed_tools"), f"{p}.allowed_tools")
    mode = at.get("mode")
    if mode not in ("auto", "required"):
        raise value_error(f"{p}.allowed_tools.mode", f"expected 'auto' or 'required', got {mode!r}.")
    entries = expect_list(at.get("tools"), f"{p}.allowed_tools.tools")
    return {
        "type": "allowed_tools",
        "mode": mode,
        "tools": [
            _named(expect_dict(e, f"{p}.allowed_tools.tools[{i}]"), f"{p}.allowed_tools.tools[{i}]")
            for i, e in enumerate(entries)
        ],
    }


def _map_legacy_choice(fc: Any) -> Any:
    if isinstance(fc, str):
        if fc not in ("none", "auto"):
            raise value_error("function_call", f"expected 'none', 'auto' or an object, got {fc!r}.")
        return fc
    return {"type": "function", "name": req_str(expect_dict(fc, "function_call"), "name", "function_call")}
