"""Remote MCP tools as the chat backend sees them (pure): function names, approval rules, and
how the MCP items of earlier turns are replayed.

- A server's tool is offered as ``mcp__<label>__<tool>`` (the label cut to chat's name
  alphabet; names over chat's 64 characters are cut and made unique with a hash, as namespace
  members are), with ``_2``, ``_3``... when the client has a function of that name.
- ``require_approval``: ``"never"``, ``"always"``, or filters ``{"never": {"tool_names": [...]},
  "always": {"tool_names": [...]}}``; a tool neither filter names needs approval, as with no
  setting at all (the API asks before sharing anything with a server by default).
- Replay: an ``mcp_call`` item becomes the tool exchange it was (an assistant call, a tool
  message with its output or its error); an ``mcp_approval_request`` answered in the same input
  becomes the assistant call, and its ``mcp_approval_response`` the tool message with what came
  of it (the proxy made the call, or the user refused); an unanswered request, and the
  ``mcp_list_tools`` items, send nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from crossfeed.translators.forward.tools import flat_name

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def function_name(label: str, tool: str, taken: Iterable[str] = ()) -> str:
    base = flat_name(f"mcp__{_UNSAFE.sub('_', label)}__", _UNSAFE.sub("_", tool))
    taken = set(taken)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[:60]}_{n}"
    return name


def needs_approval(rule: Any, tool: str) -> bool:
    if rule == "never":
        return False
    if isinstance(rule, dict):
        for key, verdict in (("never", False), ("always", True)):
            names = rule.get(key, {}).get("tool_names") if isinstance(rule.get(key), dict) else None
            if isinstance(names, list) and tool in names:
                return verdict
    return True


def allowed(rule: Any, tool: str, read_only: bool) -> bool:
    """``allowed_tools``: a list of names, or ``{"tool_names": [...], "read_only": bool}``."""
    if rule is None:
        return True
    if isinstance(rule, list):
        return tool in rule
    if isinstance(rule, dict):
        names = rule.get("tool_names")
        if isinstance(names, list) and tool not in names:
            return False
        return not (rule.get("read_only") is True and not read_only)
    return True


def call_exchange(item: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the assistant's tool_calls entry, the tool message) of an earlier ``mcp_call`` item."""
    call_id = str(item.get("id") or "mcp_call")
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": str(item.get("arguments") or "{}")},
    }
    if item.get("error"):
        return call, {"role": "tool", "tool_call_id": call_id, "content": f"Error: {item['error']}"}
    return call, {"role": "tool", "tool_call_id": call_id, "content": str(item.get("output") or "")}


def approval_call(item: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "id": str(item.get("id")),
        "type": "function",
        "function": {"name": name, "arguments": str(item.get("arguments") or "{}")},
    }


def redacted(body: dict[str, Any]) -> dict[str, Any]:
    """The request as the Response echoes it: no MCP headers or authorization."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools):
        return body
    clean = [
        {k: v for k, v in t.items() if k not in ("headers", "authorization")}
        if isinstance(t, dict) and t.get("type") == "mcp"
        else t
        for t in tools
    ]
    return {**body, "tools": clean}


def answered(items: Iterable[Any]) -> dict[str, bool]:
    """approval_request_id -> approve, for the ``mcp_approval_response`` items among ``items``."""
    out: dict[str, bool] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") == "mcp_approval_response":
            rid = item.get("approval_request_id")
            if isinstance(rid, str):
                out[rid] = item.get("approve") is True
    return out


def requests(items: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """id -> the ``mcp_approval_request`` items among ``items`` (the last of an id)."""
    return {str(i.get("id")): i for i in items if isinstance(i, dict) and i.get("type") == "mcp_approval_request"}


def listed(items: Iterable[Any]) -> Mapping[str, list[dict[str, Any]]]:
    """server_label -> the tools of the last successful ``mcp_list_tools`` item for it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if isinstance(item, dict) and item.get("type") == "mcp_list_tools" and not item.get("error"):
            label, tools = item.get("server_label"), item.get("tools")
            if isinstance(label, str) and isinstance(tools, list):
                out[label] = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
    return out
