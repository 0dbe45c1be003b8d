"""The flat-to-nested shapes of a Responses request (pure): ``tools``, ``tool_choice`` and
``text`` (``text.format`` -> ``response_format``): docs/wire-facts.md, "Responses to Chat Completions".

The field checks it uses are translators/checks.py's.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from crossfeed.translators.checks import (
    expect_dict,
    expect_list,
    missing,
    opt_bool,
    opt_str,
    req_str,
    type_error,
    value_error,
)
from crossfeed.translators.options import CUSTOM_ARG, NO_TOOLS, ToolContext

NAMESPACE_SEPARATOR = "__"


# ---------------------------------------------------------------- text.format


def map_text(text: Any, chat: dict[str, Any], ignored: list[str]) -> None:
    """Map Responses ``text`` onto ``chat``.

    Rules:
      format {type:json_schema, name, schema, description?, strict?} (flat)
          -> response_format {type:json_schema, json_schema:{name, schema, description?, strict?}}
      format {type:json_object}    -> response_format {type:json_object}
      format {type:text}           -> nothing (the chat default)
      verbosity low|medium|high    -> verbosity
      other keys                   -> listed in ignored
    """
    if text is None:
        return
    text = expect_dict(text, "text")
    fmt = text.get("format")
    if fmt is not None:
        fmt = expect_dict(fmt, "text.format")
        kind = fmt.get("type")
        if kind == "json_schema":
            schema = expect_dict(fmt.get("schema"), "text.format.schema")
            spec: dict[str, Any] = {"name": req_str(fmt, "name", "text.format"), "schema": schema}
            if opt_str(fmt, "description", "text.format") is not None:
                spec["description"] = fmt["description"]
            if opt_bool(fmt, "strict", "text.format") is not None:
                spec["strict"] = fmt["strict"]
            chat["response_format"] = {"type": "json_schema", "json_schema": spec}
        elif kind == "json_object":
            chat["response_format"] = {"type": "json_object"}
        elif kind != "text":
            raise value_error("text.format.type", f"expected 'text', 'json_schema' or 'json_object', got {kind!r}.")
    verbosity = opt_str(text, "verbosity", "text")
    if verbosity is not None:
        if verbosity not in ("low", "medium", "high"):
            raise value_error("text.verbosity", f"expected 'low', 'medium' or 'high', got {verbosity!r}.")
        chat["verbosity"] = verbosity
    ignored.extend(f"text.{k}" for k in text if k not in ("format", "verbosity"))


# ---------------------------------------------------------------- tools

_CHAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what Chat Completions accepts as a function name


def flat_name(namespace: str, member: str) -> str:
    """Chat function name for a namespace member: ``ns__member`` (``mcp__demo__`` + ``x`` ->
    ``mcp__demo__x``: a namespace already ending in the separator is not doubled).

    Chat function names are at most 64 characters of ``[A-Za-z0-9_-]``, where each Responses
    name may be that long on its own (``mcp__google_workspace__`` + a long member). A joined
    name that does not fit is cut and made unique with a hash of the whole: the same pair
    always gives the same name (history replay relies on it), and calls map back through the
    request's tool table, never by splitting the name."""
    sep = "" if namespace.endswith(NAMESPACE_SEPARATOR) else NAMESPACE_SEPARATOR
    name = f"{namespace}{sep}{member}"
    if _CHAT_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', name)[:55]}_{digest}"


def strict_conformant(schema: Any) -> bool:
    """True if ``schema`` already satisfies strict mode: every object schema lists all its
    properties in ``required`` and sets ``additionalProperties: false`` (recursively)."""
    if isinstance(schema, list):
        return all(strict_conformant(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    props = schema.get("properties")
    if schema.get("type") == "object" or isinstance(props, dict):
        if schema.get("additionalProperties") is not False:
            return False
        props = props if isinstance(props, dict) else {}
        if set(schema.get("required") or ()) != set(props):
            return False
    for key in ("properties", "$defs", "definitions"):
        sub = schema.get(key)
        if isinstance(sub, dict) and not all(strict_conformant(s) for s in sub.values()):
            return False
    return all(strict_conformant(schema.get(k)) for k in ("items", "anyOf", "oneOf", "allOf"))


def _custom_description(tool: dict[str, Any], param: str, arg: str) -> str:
    description = opt_str(tool, "description", param) or ""
    fmt = tool.get("format")
    if fmt is None:
        fmt = {"type": "text"}
    fmt = expect_dict(fmt, f"{param}.format")
    kind = fmt.get("type")
    if kind == "text":
        note = f"The `{arg}` argument is the raw free-form input (plain text, not JSON)."
    elif kind == "grammar":
        syntax = req_str(fmt, "syntax", f"{param}.format")
        definition = req_str(fmt, "definition", f"{param}.format")
        note = f"The `{arg}` argument is the raw input, which must match this {syntax} grammar:\n```\n{definition}\n```"
    else:
        raise value_error(f"{param}.format.type", f"expected 'text' or 'grammar', got {kind!r}.")
    return f"{description}\n\n{note}" if description else note


def _function(name: str, tool: dict[str, Any], param: str) -> dict[str, Any]:
    params = tool.get("parameters")
    if params is not None:
        expect_dict(params, f"{param}.parameters")
    strict = opt_bool(tool, "strict", param)
    if strict is None:  # Responses: omitted means strict (docs/wire-facts.md)
        strict = params is not None and strict_conformant(params)
    fn: dict[str, Any] = {"name": name}
    description = opt_str(tool, "description", param)
    if description is not None:
        fn["description"] = description
    if params is not None:
        fn["parameters"] = params
    fn["strict"] = strict
    return {"type": "function", "function": fn}


def _custom(name: str, tool: dict[str, Any], param: str, arg: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {arg: {"type": "string"}},
        "required": [arg],
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": _custom_description(tool, param, arg),
            "parameters": schema,
            "strict": False,
        },
    }


class ToolTable:
    """Chat tools built from the request, and the name lookups tool_choice needs."""

    def __init__(self) -> None:
        self.chat: list[dict[str, Any]] = []
        self.custom: set[str] = set()
        self.namespaced: dict[str, tuple[str, str]] = {}
        self.by_choice: dict[tuple[str, str | None], str] = {}  # (name, namespace) -> chat name
        # (chat name, tool, its namespace tool or None) of each defer_loading tool, in order
        self.deferred: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        self.loading = False  # mapping tools a tool_search_output loaded: a name already here is skipped

    def add(
        self, chat_tool: dict[str, Any], param: str, *, namespace: str | None = None, member: str, custom: bool
    ) -> None:
        name = chat_tool["function"]["name"]
        if any(t["function"]["name"] == name for t in self.chat):
            if self.loading:
                return
            raise value_error(f"{param}.name", f"duplicate tool name {name!r}.")
        self.chat.append(chat_tool)
        if custom:
            self.custom.add(name)
        if namespace is not None:
            self.namespaced[name] = (namespace, member)
        self.by_choice[(member, namespace)] = name
        self.by_choice.setdefault((name, None), name)

    def context(self, arg: str) -> ToolContext:
        if not self.custom and not self.namespaced and arg == CUSTOM_ARG:
            return NO_TOOLS  # the usual request: shared, not built anew
        return ToolContext(custom_tools=frozenset(self.custom), namespaced=dict(self.namespaced), custom_arg=arg)


def map_tools(
    tools: Any,
    ignored: list[str],
    arg: str,
    extra: list[tuple[str, Any]] | None = None,
    loaded: list[tuple[str, Any]] | None = None,
) -> ToolTable:
    """Map Responses ``tools`` onto Chat function tools.

    Rules:
      function {name, description?, parameters?, strict?} -> {type:function, function:{...}};
          strict always sent: as given, else true iff the schema is already strict-conformant
          (Responses treats an omitted strict as strict; a chat backend cannot normalise a schema)
      defer_loading true (function, custom, namespace member) -> mapped, and recorded in
          ToolTable.deferred: the request mapping keeps it out of the backend's tools until a
          tool search reveals it (tool_search.py); defer_loading false -> listed in ignored
      custom {name, description?, format?} -> function taking one required string `arg`; the
          description carries the original text plus the grammar (syntax + definition) or a
          free-text note; the name is recorded in ToolContext.custom_tools
      namespace {name, tools:[function|custom]} -> each member flattened to `<ns>__<member>`,
          recorded in ToolContext.namespaced; the namespace description is not sent
      hosted/other types (web_search, tool_search, mcp, ...) -> dropped, listed in ignored
      duplicate chat names -> 400 tools[i].name
      extra: (param, tool) pairs declared elsewhere (Codex's ``additional_tools`` input items),
          mapped by the same rules after ``tools``
      loaded: (param, tool) pairs a ``tool_search_output`` item of the conversation loaded, mapped
          last; one whose name is already declared is skipped (it is that tool), the others are
          sent like any tool
    """
    table = ToolTable()
    pairs = [] if tools is None else [(f"tools[{i}]", raw) for i, raw in enumerate(expect_list(tools, "tools"))]
    pairs += extra or []
    for param, raw in pairs:
        _map_tool(table, param, raw, ignored, arg)
    table.loading = True
    for param, raw in loaded or ():
        _map_tool(table, param, raw, ignored, arg)
    table.loading = False
    return table


def _map_tool(table: ToolTable, param: str, raw: Any, ignored: list[str], arg: str) -> None:
    tool = expect_dict(raw, param)
    kind = tool.get("type")
    if kind == "function" or kind == "custom":
        name = req_str(tool, "name", param)
        _add_member(table, tool, kind, param, name, None, name, ignored, arg)
    elif kind == "namespace":
        ns = req_str(tool, "name", param)
        for j, raw_member in enumerate(expect_list(tool.get("tools") or [], f"{param}.tools")):
            mparam = f"{param}.tools[{j}]"
            member = expect_dict(raw_member, mparam)
            mkind = member.get("type")
            if mkind not in ("function", "custom"):
                ignored.append(f"{mparam} {mkind}")
                continue
            mname = req_str(member, "name", mparam)
            _add_member(table, member, mkind, mparam, flat_name(ns, mname), ns, mname, ignored, arg, tool)
    elif isinstance(kind, str):
        ignored.append(f"{param} {kind}")
    else:
        raise missing(f"{param}.type") if kind is None else type_error(f"{param}.type", "a string", kind)


def _add_member(
    table: ToolTable,
    tool: dict[str, Any],
    kind: str,
    param: str,
    chat_name: str,
    ns: str | None,
    member: str,
    ignored: list[str],
    arg: str,
    space: dict[str, Any] | None = None,
) -> None:
    chat_tool = _function(chat_name, tool, param) if kind == "function" else _custom(chat_name, tool, param, arg)
    defer = opt_bool(tool, "defer_loading", param)
    if defer and not table.loading:
        table.deferred.append((chat_name, tool, space))
    elif defer is not None and kind == "function":
        ignored.append(f"{param}.defer_loading")
    table.add(chat_tool, param, namespace=ns, member=member, custom=kind == "custom")


def map_tool_choice(choice: Any, table: ToolTable, ignored: list[str]) -> tuple[Any, set[str] | None]:
    """Map Responses ``tool_choice``; returns (chat tool_choice or None, allowed chat names or None).

    Rules:
      "none" / "auto" / "required"        -> same string
      {type:function|custom, name, namespace?} -> {type:function, function:{name: chat name}};
                                             unknown name -> 400 tool_choice.name
      {type:allowed_tools, mode, tools}   -> `mode` string, and the upstream tools list is cut
                                             down to the allowed ones (every chat server accepts
                                             this; few accept chat's allowed_tools object); hosted
                                             entries are dropped and listed in ignored
      hosted-tool choice ({type:web_search_preview}, mcp, ...) -> "auto", listed in ignored
    """
    if choice is None:
        return None, None
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise value_error("tool_choice", f"expected 'none', 'auto' or 'required', got {choice!r}.")
        return choice, None
    choice = expect_dict(choice, "tool_choice")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        return {"type": "function", "function": {"name": _choice_name(choice, table, "tool_choice")}}, None
    if kind == "allowed_tools":
        mode = choice.get("mode")
        if mode not in ("auto", "required"):
            raise value_error("tool_choice.mode", f"expected 'auto' or 'required', got {mode!r}.")
        allowed: set[str] = set()
        for i, raw in enumerate(expect_list(choice.get("tools"), "tool_choice.tools")):
            entry = expect_dict(raw, f"tool_choice.tools[{i}]")
            if entry.get("type") in ("function", "custom"):
                allowed.add(_choice_name(entry, table, f"tool_choice.tools[{i}]"))
            else:
                ignored.append(f"tool_choice.tools[{i}] {entry.get('type')}")
        return mode, allowed
    if isinstance(kind, str):
        ignored.append(f"tool_choice {kind}")
        return "auto", None
    raise missing("tool_choice.type") if kind is None else type_error("tool_choice.type", "a string", kind)


def _choice_name(choice: dict[str, Any], table: ToolTable, param: str) -> str:
    name = req_str(choice, "name", param)
    ns = opt_str(choice, "namespace", param)
    chat = table.by_choice.get((name, ns))
    if chat is None:
        raise value_error(f"{param}.name", f"no tool named {name!r} is declared in 'tools'.")
    return chat
