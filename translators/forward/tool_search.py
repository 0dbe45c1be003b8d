"""Deferred tools and ``tool_search`` on a chat backend (pure): the catalogue, the search, the
items, and how an earlier search is replayed.

A tool declared with ``defer_loading: true`` (a function, a custom tool, or a namespace member)
is kept out of the backend's ``tools``. The backend gets one more function instead,
``tool_search`` (``crossfeed_tool_search`` when the client has a function of that name), whose
description is a compact catalogue of the deferred tools: one line each, name and the first line
of its description. It lives in the function's description, not in a system message, so the
prompt's text does not change when a tool is revealed. The proxy runs the calls to it (a runner
of the hosted tool loop, proxy/turns/hosted/tool_search_runner.py): ``search`` picks the matching
tools, they join the tools of every later leg, and the client sees a ``tool_search_call`` and a
``tool_search_output`` item (``execution: "server"``: crossfeed is the server that ran it).

The order of the backend's tools is stable (``ToolCatalog.tools``): the request's other tools in
their order, then the revealed deferred ones in the request's order, then the search function,
so a backend's prefix cache survives a reveal up to the first newly revealed tool.

A request without deferred tools is not touched: no search function, the same bytes.
Deferred tools without a ``tool_search`` tool are still deferred: the API defines them as loaded
only by a tool search, and their point is to stay out of the prompt.

A ``tool_search`` tool with ``execution: "client"`` is searched by the client itself (Codex
declares one, and keeps its MCP tools out of ``tools`` altogether: it names their namespaces in a
developer message). The backend then gets the search function with the client's description and
parameters (the deferred tools' catalogue appended, if the request has any), deferred tools or
not; a call to it goes to the client as a ``tool_search_call`` item (``execution: "client"``,
``ToolContext.client_search``), ending the Response as a function call does; the client's next
request carries the ``tool_search_output`` item whose tools are then sent (input.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import orjson

from crossfeed.translators.forward.tools import flat_name
from crossfeed.translators.options import ToolContext

SEARCH_FUNCTION = "tool_search"
CLASH_NAME = "crossfeed_tool_search"
DEFAULT_LIMIT = 8  # tools a search returns when the call does not say (Codex's own default)
MAX_LIMIT = 20
_LINE = 120  # characters of a catalogue line's description
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"the", "and", "for", "with", "from", "that", "this", "into", "tool", "tools", "use", "can"})


@dataclass(frozen=True, slots=True)
class Deferred:
    """One deferred tool: its chat function, and what the catalogue and the search read."""

    name: str  # the chat function name (``ns__member`` for a namespace member)
    chat: dict[str, Any]  # the chat tool, sent once revealed
    tool: dict[str, Any]  # the Responses definition as the client sent it
    namespace: dict[str, Any] | None  # the namespace tool it belongs to, if any
    label: str  # its name in the catalogue (``ns.member`` for a namespace member)
    line: str  # one line of its description


@dataclass(frozen=True, slots=True)
class ToolCatalog:
    """The request's tools with the deferred ones set apart (request.py builds it)."""

    function: str  # the search function's name
    visible: tuple[dict[str, Any], ...]  # the chat tools always sent, in request order
    deferred: tuple[Deferred, ...]  # in request order
    revealed: frozenset[str]  # chat names an earlier search (or tool_choice) revealed
    allowed: frozenset[str] | None = None  # tool_choice allowed_tools, in chat names
    client: dict[str, Any] | None = None  # the request's tool_search tool when the client runs it

    def tools(self, revealed: frozenset[str] | set[str]) -> list[dict[str, Any]]:
        """The chat tools of a leg: the visible ones, the revealed deferred ones, the search."""
        ok = self.allowed
        shown = [d.chat for d in self.deferred if d.name in revealed and (ok is None or d.name in ok)]
        return [*self.visible, *shown, self.search_tool()]

    def search_tool(self) -> dict[str, Any]:
        lines = "\n".join(f"- {d.label}: {d.line}" if d.line else f"- {d.label}" for d in self.deferred)
        if self.client is not None:
            return _client_search_tool(self.function, self.client, lines)
        description = (
            "Load tools that are not in your tool list yet. Search the deferred tools below by name or "
            "keywords; the matching tools become callable functions from your next step on (call them "
            "then by the name the search returns).\n\nDeferred tools:\n" + lines
        )
        return _function(self.function, description, _PARAMETERS)

    def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[Deferred]:
        """The best matches of ``query``: a tool named in it first (by its chat name, its
        catalogue name or its member name), then by the query's words found in the tool's name
        (3 each) and description (1 each); ties keep the request's order; at most ``limit``, and
        none scoring under half the best (a word in passing does not load a tool)."""
        text = query.lower()
        words = {w for w in _words(text) if len(w) > 2 and w not in _STOP}
        scored = []
        for order, d in enumerate(self.deferred):
            names = {d.name.lower(), d.label.lower(), d.label.lower().rsplit(".", 1)[-1]}
            exact = any(re.search(rf"(?<![a-z0-9_.]){re.escape(n)}(?![a-z0-9_])", text) for n in names)
            name_words = _words(d.label)
            desc_words = _words(str(d.tool.get("description") or ""))
            score = 100 * exact + sum(3 * (w in name_words) + (w in desc_words) for w in words)
            if score:
                scored.append((-score, order, d))
        scored.sort(key=lambda s: (s[0], s[1]))
        best = -scored[0][0] if scored else 0
        return [d for score, _, d in scored[: max(1, min(limit, MAX_LIMIT))] if -score * 2 >= best]


_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "tool names or keywords of what you need"},
        "limit": {"type": "integer", "description": f"at most this many tools (default {DEFAULT_LIMIT})"},
    },
    "required": ["query"],
}


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters, "strict": False},
    }


def _client_search_tool(name: str, tool: dict[str, Any], lines: str) -> dict[str, Any]:
    """The search function of a client-run tool search: the client's description and parameters
    (its search reads its own catalogue), the request's deferred tools listed after them."""
    description = tool.get("description")
    description = description if isinstance(description, str) and description.strip() else _CLIENT_DESCRIPTION
    if lines:
        description += "\n\nDeferred tools:\n" + lines
    parameters = tool.get("parameters")
    return _function(name, description, parameters if isinstance(parameters, dict) else _PARAMETERS)


_CLIENT_DESCRIPTION = (
    "Search the tools that are not in your tool list yet by name or keywords; the matching tools "
    "become callable functions from your next step on."
)


def client_tool(tools: Any, choice: Any = None) -> dict[str, Any] | None:
    """The request's ``tool_search`` tool when the client runs it (``execution: "client"``), unless
    a ``tool_choice`` of ``allowed_tools`` leaves it out."""
    if not isinstance(tools, list):
        return None
    listed = choice.get("tools") if isinstance(choice, dict) and choice.get("type") == "allowed_tools" else None
    if isinstance(listed, list) and not any(isinstance(t, dict) and t.get("type") == "tool_search" for t in listed):
        return None
    return next(
        (t for t in tools if isinstance(t, dict) and t.get("type") == "tool_search" and t.get("execution") == "client"),
        None,
    )


def with_client_search(tools: ToolContext, catalog: ToolCatalog | None) -> ToolContext:
    """The request's tool context, knowing the search function when the client runs the search."""
    if catalog is None or catalog.client is None:
        return tools
    return dataclasses.replace(tools, client_search=catalog.function)


def search_arguments(raw: str) -> dict[str, Any]:
    """A search call's arguments as the object a ``tool_search_call`` item carries ({} when
    they are not a JSON object)."""
    return arguments(raw)[0]


def _words(text: str) -> set[str]:
    """Lower-case words (``snake_case`` and ``camelCase`` split), a plural's ``s`` dropped."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _WORD.findall(spaced)}


def one_line(description: Any) -> str:
    """The first line of a description, cut to a catalogue line."""
    if not isinstance(description, str):
        return ""
    line = next((s.strip() for s in description.splitlines() if s.strip()), "")
    return line if len(line) <= _LINE else line[: _LINE - 3].rstrip() + "..."


def is_deferred(tool: Any) -> bool:
    return isinstance(tool, dict) and tool.get("defer_loading") is True


def has_deferred(tools: Any) -> bool:
    """Does the request declare a deferred tool (a namespace's member included)?"""
    if not isinstance(tools, list):
        return False
    return any(
        is_deferred(t)
        or (isinstance(t, dict) and t.get("type") == "namespace" and any(map(is_deferred, t.get("tools") or ())))
        for t in tools
    )


def function_name(tools: Any) -> str:
    clash = isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "function" and t.get("name") == SEARCH_FUNCTION for t in tools
    )
    return CLASH_NAME if clash else SEARCH_FUNCTION


def arguments(raw: str) -> tuple[dict[str, Any], str, int]:
    """A search call's arguments: (the object, the query, the limit); unreadable -> empty."""
    try:
        args = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        args = {}
    args = args if isinstance(args, dict) else {}
    query = args.get("query")
    names = args.get("names")
    text = query if isinstance(query, str) else ""
    if isinstance(names, list):
        text = " ".join([text, *(n for n in names if isinstance(n, str))])
    limit = args.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 1:
        limit = DEFAULT_LIMIT
    return args, text.strip()[:500], int(limit)


def output_tools(found: list[Deferred]) -> list[dict[str, Any]]:
    """The definitions a ``tool_search_output`` carries: each tool as the client declared it, a
    namespace member inside its namespace (one entry per namespace, holding the members found)."""
    out: list[dict[str, Any]] = []
    spaces: dict[str, dict[str, Any]] = {}
    for d in found:
        if d.namespace is None:
            out.append(d.tool)
            continue
        name = str(d.namespace.get("name"))
        entry = spaces.get(name)
        if entry is None:
            desc = d.namespace.get("description")
            entry = {
                "type": "namespace",
                "name": name,
                "description": desc if isinstance(desc, str) else "",
                "tools": [],
            }
            spaces[name] = entry
            out.append(entry)
        entry["tools"].append(d.tool)
    return out


def result_text(query: str, found: list[Deferred]) -> str:
    """The tool message the backend gets for a search."""
    if not found:
        return f'No deferred tool matches "{query}". Try other words, or a name from the list.'
    listed = "\n".join(f"- {d.name}: {d.line}" if d.line else f"- {d.name}" for d in found)
    return f"Loaded {len(found)} tool(s); call them by these names from now on:\n{listed}"


def loaded_names(tools: Any) -> set[str]:
    """The chat names of the tools a ``tool_search_output`` item loaded."""
    names: set[str] = set()
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        if t.get("type") == "namespace":
            names |= {
                flat_name(t["name"], m["name"])
                for m in t.get("tools") or ()
                if isinstance(m, dict) and isinstance(m.get("name"), str)
            }
        else:
            names.add(t["name"])
    return names


def replayed_call(item: dict[str, Any], name: str, call_id: str) -> dict[str, Any]:
    """The tool_calls entry of an earlier ``tool_search_call`` item."""
    args = item.get("arguments")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args if isinstance(args, dict) else {}).decode()},
    }


def replayed_output(item: dict[str, Any], call_id: str) -> dict[str, Any]:
    """The tool message of an earlier ``tool_search_output`` item."""
    names = sorted(loaded_names(item.get("tools")))
    text = (
        "Loaded tool(s); call them by these names from now on:\n" + "\n".join(f"- {n}" for n in names)
        if names
        else "No deferred tool matched."
    )
    return {"role": "tool", "tool_call_id": call_id, "content": text}
