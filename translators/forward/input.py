"""Responses input items -> chat messages (pure): the folding the request mapping uses for the
history and the input alike (translators/forward/request.py). Also the pure half of
``item_reference`` items: finding them (``item_references``) and putting in their place the
items the proxy looked up in its store (``resolve_references``), and of reasoning items replayed
by id only (``bare_reasoning``, ``fill_reasoning``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from crossfeed.translators.checks import expect_dict, expect_list, missing, opt_str, req_str, type_error, value_error
from crossfeed.translators.errors import InvalidRequest, UnsupportedFeature
from crossfeed.translators.forward import compaction as cmp
from crossfeed.translators.forward import mcp_items as mcp
from crossfeed.translators.forward import tool_search as ts
from crossfeed.translators.forward.tools import flat_name
from crossfeed.translators.forward.web_search_items import replayed
from crossfeed.translators.options import CUSTOM_ARG, BackendProfile

# An ``encrypted_content`` token -> (reasoning text, the backend's reasoning_details), or None.
Reveal = Callable[[str], "tuple[str, list[dict[str, Any]]] | None"]
# A compaction item's ``encrypted_content`` -> the summary it holds, or None.
OpenSummary = Callable[[str], "str | None"]
# Responses input item types with no chat equivalent that only record hosted-tool activity.
_DROPPED_ITEM_TYPES = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "computer_call",
        "computer_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "compaction_summary",
    }
)
_MCP_ITEMS = frozenset({"mcp_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response"})
_TOOL_IMAGE_NOTE = "(The tool returned image or file content; it follows in the next message.)"
ITEM_REFERENCE = "item_reference"
_REFERENCE_KEYS = frozenset({"id", "type"})


def is_item_reference(item: Any) -> bool:
    """``{"type": "item_reference", "id": ...}``, or the same without a type (it is optional in
    the API: an object of only ``id``, with ``type`` absent or null)."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type")
    return kind == ITEM_REFERENCE or (kind is None and "id" in item and item.keys() <= _REFERENCE_KEYS)


def item_references(inp: Any) -> list[tuple[int, str]]:
    """``(i, id)`` of each item reference in a request's ``input`` (none unless it is a list);
    an id that is not a non-empty string -> 400 ``input[i].id``."""
    if not isinstance(inp, list):
        return []
    refs = []
    for i, item in enumerate(inp):
        if item.__class__ is dict and item.get("type") not in (None, ITEM_REFERENCE):
            continue  # the usual item, told apart without a call
        if not is_item_reference(item):
            continue
        ref = item.get("id")
        if ref is None or ref == "":
            raise missing(f"input[{i}].id")
        if not isinstance(ref, str):
            raise type_error(f"input[{i}].id", "a string", ref)
        refs.append((i, ref))
    return refs


def resolve_references(inp: list[Any], found: Mapping[str, dict[str, Any]]) -> list[Any]:
    """A copy of ``inp`` with each item reference replaced by (a copy of) the item ``found``
    holds for its id; the input itself is not changed. An id ``found`` lacks (the proxy did not
    find it, or not for this key) -> 400 ``input[i].id`` saying what to send instead."""
    out = list(inp)
    for i, ref in item_references(inp):
        item = found.get(ref)
        if item is None:
            raise InvalidRequest(
                f"Item with id '{ref}' not found: an item_reference can only name an item of a "
                "response crossfeed stored for this API key (created with store not false, and not "
                "expired or deleted). Send the item itself in `input` instead, or continue the "
                "conversation with `previous_response_id`.",
                param=f"input[{i}].id",
                code="item_not_found",
            )
        out[i] = dict(item)
    return out


def bare_reasoning(inp: Any) -> list[tuple[int, str]]:
    """``(i, id)`` of each reasoning item of ``input`` replayed by its id only: no summary, no
    content, no encrypted_content (LangChain's stream merge sends ``{"type": "reasoning", "id",
    "summary": [], "content": []}``). OpenAI fills such an item from its store; so does the proxy
    (``fill_reasoning``)."""
    if not isinstance(inp, list):
        return []
    out = []
    for i, item in enumerate(inp):
        if isinstance(item, dict) and item.get("type") == "reasoning":
            rid = item.get("id")
            if (
                isinstance(rid, str)
                and rid
                and not item.get("summary")
                and not item.get("content")
                and not item.get("encrypted_content")
            ):
                out.append((i, rid))
    return out


def fill_reasoning(inp: list[Any], found: Mapping[str, dict[str, Any]]) -> list[Any]:
    """A copy of ``inp`` with each id-only reasoning item replaced by (a copy of) the reasoning
    item ``found`` holds for its id; one not found stays as it came (it then carries nothing)."""
    out = list(inp)
    for i, rid in bare_reasoning(inp):
        item = found.get(rid)
        if item is not None and item.get("type") == "reasoning":
            out[i] = dict(item)
    return out


def _no_call(call_id: str, p: str, kind: str) -> None:
    """A tool output answering no call: the 400 OpenAI answers (its words, then where to look)."""
    what = "function call" if kind == "function_call_output" else "custom tool call"
    raise InvalidRequest(
        f"No tool call found for {what} output with call_id {call_id}. The call must come before its "
        "output: earlier in `input`, or in the response `previous_response_id` names.",
        param=f"{p}.call_id",
        code="tool_call_not_found",
    )


_CUSTOM_HEAD = '{"' + CUSTOM_ARG + '": '


def custom_arguments(text: str) -> str:
    """The arguments of the function a custom tool call is replayed as: ``{"input": text}``, the
    bytes ``json.dumps(..., ensure_ascii=False)`` writes (orjson escapes a string exactly as it
    does: tests/translators/forward/test_input.py checks every code point), at a tenth of its
    cost. A Codex history carries an ``apply_patch`` patch of a few KB in each such call."""
    try:
        return _CUSTOM_HEAD + orjson.dumps(text).decode() + "}"
    except orjson.JSONEncodeError:  # a lone surrogate (never from a JSON body): as json writes it
        return json.dumps({CUSTOM_ARG: text}, ensure_ascii=False)


def _text_of(parts: list[str]) -> str:
    return "\n".join(parts)


_TEXT_KINDS = ("input_text", "output_text")
_REASONING_KINDS = (("content", ("reasoning_text", "text")), ("summary", ("summary_text",)))


def _plain_texts(content: Any, kinds: tuple[str, ...]) -> list[str] | None:
    """The texts of ``content`` when it is a list of parts all of ``kinds``, each with a string
    ``text`` (the usual message: a long history holds hundreds); None for anything else, which
    the checked loops read and, where it is wrong, refuse naming the part."""
    if content.__class__ is not list:
        return None
    texts = []
    for part in content:
        if part.__class__ is not dict or part.get("type") not in kinds:
            return None
        text = part.get("text")
        if text.__class__ is not str:
            return None
        texts.append(text)
    return texts


class InputMessages:
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
          and file parts move to one user message placed after the run of tool messages; with
          check_outputs (the request's own input), a call_id no earlier item calls (a function,
          custom, shell... call of the history or of the input before it) -> 400
          input[i].call_id, OpenAI's "No tool call found" (a chat backend would get an orphan
          tool message: lenient ones answer it, OpenAI refuses it)
      reasoning -> text (content reasoning_text, else summary_text, else the text of
          reveal_reasoning(encrypted_content)) set as options.reasoning_field on the assistant
          message of the same turn (joined with "\\n\\n"), and the backend's reasoning_details
          sealed in encrypted_content set as that message's reasoning_details (OpenRouter and
          others want them back: Gemini's thought signatures, signed thinking); the turn is the
          next assistant item's, or the open one's when a non-assistant item comes first; no
          assistant item around it -> dropped and listed in ignored
      item_reference (or {id} alone) -> 400: the proxy replaces references with the stored items
          before mapping (resolve_references); one left here was not resolved
      hosted-tool items (web_search_call, ...) -> dropped, ignored
      other/unknown types -> 400 input[i].type
    """

    def __init__(
        self,
        options: BackendProfile,
        reveal: Reveal | None,
        ignored: list[str],
        open_summary: OpenSummary | None = None,
        search_function: str | None = None,
    ) -> None:
        self.options = options
        self.reveal = reveal
        self.open_summary = open_summary
        self.search_function = search_function
        self.mcp_results: Mapping[str, str] | None = None  # approval_request_id -> what came of it
        self.client_functions: frozenset[Any] = frozenset()
        self.answers: dict[str, bool] = {}  # approval_request_id -> approve, for the input's responses
        self.answered_at: dict[str, str] = {}  # approval_request_id -> the param of its first response
        self.ignored = ignored
        self.out: list[dict[str, Any]] = []
        self.turn: dict[str, Any] | None = None  # the open assistant message
        self.reasoning: list[str] = []  # pending, for the next assistant content
        self.details: list[dict[str, Any]] = []  # pending reasoning_details, likewise
        self.reasoning_at: str | None = None
        self.deferred: list[dict[str, Any]] = []  # tool-output media for a following user message
        self.extra_tools: list[tuple[str, Any]] = []  # tools declared by additional_tools items
        self.tool_search: str | None = None  # the search function, when the request has deferred tools
        self.loaded: list[tuple[str, Any]] = []  # tools tool_search_output items loaded
        self.revealed: set[str] = set()  # their chat names
        self.searches: dict[Any, dict[str, Any]] = {}  # call_id -> a tool_search_call not yet answered
        self.calls: set[Any] = set()  # the call_id of every call item so far
        self.check_outputs = False  # a tool output must answer one of them (set for the input)

    def add_item(self, raw: Any, p: str) -> None:
        item = expect_dict(raw, p)
        kind = item.get("type")
        if kind is None:  # a typed item_reference keeps its kind
            if "role" in item:
                kind = "message"
            elif is_item_reference(item):
                kind = ITEM_REFERENCE
        if kind == "message":
            self._message(item, p)
        elif kind in ("function_call", "custom_tool_call"):
            name = req_str(item, "name", p)
            ns = opt_str(item, "namespace", p)
            args = (
                req_str(item, "arguments", p)
                if kind == "function_call"
                else custom_arguments(req_str(item, "input", p))
            )
            self._call(item, p, flat_name(ns, name) if ns else name, args)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._tool_output(item, p, kind)
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
        elif kind in ("tool_search_call", "tool_search_output"):
            self._tool_search(kind, item, p)
        elif kind in _MCP_ITEMS:
            self._mcp(kind, item, p)
        elif kind == cmp.ITEM:
            self._compaction(item, p)
        elif kind == cmp.TRIGGER:
            pass  # its place was checked (compaction.trigger_in): it asks for this request's kind
        elif kind == ITEM_REFERENCE:
            raise UnsupportedFeature(
                "this item_reference could not be resolved to a stored item "
                "here: send the item itself, or continue the conversation "
                "with previous_response_id.",
                param=p,
            )
        elif kind in _DROPPED_ITEM_TYPES:
            self.calls.add(item.get("call_id"))  # a function_call_output may answer it (Codex's local_shell_call)
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
        call = {
            "id": req_str(item, "call_id", p),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        self.calls.add(call["id"])
        self._assistant().setdefault("tool_calls", []).append(call)

    def _close(self) -> None:
        """A non-assistant item follows: end the assistant turn and flush what waits for it."""
        if (self.reasoning or self.details) and self.turn is not None:
            self._attach_reasoning(self.turn)  # the end of the turn's own output
        elif self.reasoning or self.details:
            self.ignored.append(f"{self.reasoning_at} reasoning (no assistant message follows)")
            self.reasoning, self.details, self.reasoning_at = [], [], None
        turn = self.turn
        if turn is not None and turn["content"] is None and turn.get("tool_calls"):
            # No text beside the calls: the content is left out (the spec's "required unless
            # tool_calls"), not null, which llama-cpp-python rejects and templates print as "None".
            del turn["content"]
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
            raise value_error(f"{p}.role", f"expected 'user', 'assistant', 'system' or 'developer', got {role!r}.")
        self._close()
        chat_role = self.options.system_role if role == "developer" else role
        mapped = content if isinstance(content, str) else self._parts(content, p, media=role == "user")
        self.out.append({"role": chat_role, "content": mapped})

    def _assistant_text(self, content: Any, p: str) -> str:
        plain = _plain_texts(content, _TEXT_KINDS)
        if plain is not None:
            return _text_of(plain)
        texts = []
        for j, raw in enumerate(expect_list(content, f"{p}.content")):
            part = expect_dict(raw, f"{p}.content[{j}]")
            kind = part.get("type")
            if kind in ("output_text", "input_text"):
                texts.append(req_str(part, "text", f"{p}.content[{j}]"))
            elif kind == "refusal":
                texts.append(req_str(part, "refusal", f"{p}.content[{j}]"))
            else:
                raise value_error(
                    f"{p}.content[{j}].type", f"assistant content must be output_text or refusal, got {kind!r}."
                )
        return _text_of(texts)

    def _parts(self, content: Any, p: str, *, media: bool) -> str | list[dict[str, Any]]:
        plain = _plain_texts(content, _TEXT_KINDS)
        if plain is not None:
            return _text_of(plain)
        parts = [
            self._part(raw, f"{p}.content[{j}]", media) for j, raw in enumerate(expect_list(content, f"{p}.content"))
        ]
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
                raise UnsupportedFeature(
                    "input_image.file_id refers to a file stored on OpenAI; send image_url (an https or data: URL).",
                    param=f"{p}.file_id",
                )
            image: dict[str, Any] = {"url": req_str(part, "image_url", p)}
            detail = opt_str(part, "detail", p)
            if detail is not None:
                if detail not in ("low", "high", "auto", "original"):
                    raise value_error(f"{p}.detail", f"expected 'low', 'high', 'auto' or 'original', got {detail!r}.")
                image["detail"] = "high" if detail == "original" else detail
            return {"type": "image_url", "image_url": image}
        if part.get("file_url") is not None:
            raise UnsupportedFeature(
                "input_file.file_url cannot be passed to a chat backend: send file_data (base64) instead.",
                param=f"{p}.file_url",
            )
        file = {k: opt_str(part, k, p) for k in ("file_id", "file_data", "filename")}
        if file["file_id"] is None and file["file_data"] is None:
            raise missing(f"{p}.file_data")
        return {"type": "file", "file": {k: v for k, v in file.items() if v is not None}}

    def _tool_output(self, item: dict[str, Any], p: str, kind: str) -> None:
        call_id = req_str(item, "call_id", p)
        output = item.get("output")
        if output is None:
            raise missing(f"{p}.output")
        text: Any
        if isinstance(output, str) or output.__class__ is orjson.Fragment:  # a long one as JSON (create_body.py)
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
        if self.check_outputs and call_id not in self.calls:
            _no_call(call_id, p, kind)
        pending = self.deferred
        self.deferred = []
        self._close()
        self.deferred = pending
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def _tool_search(self, kind: str, item: dict[str, Any], p: str) -> None:
        """An earlier tool search: the tools it loaded stay loaded (``loaded``, ``revealed``);
        with a search function offered, the call and its output are the tool exchange they were
        (the call waits for its output: a call with none is left out), else both are dropped."""
        call_id = item.get("call_id") or item.get("id")
        if kind == "tool_search_call":
            self.calls.add(call_id)
            if self.tool_search and isinstance(call_id, str):
                self.searches[call_id] = item
                return
        else:
            tools = expect_list(item.get("tools") or [], f"{p}.tools")
            self.loaded += [(f"{p}.tools[{j}]", t) for j, t in enumerate(tools)]
            self.revealed |= ts.loaded_names(tools)
            call = self.searches.pop(call_id, None)
            if self.tool_search and call is not None and isinstance(call_id, str):
                self._assistant().setdefault("tool_calls", []).append(ts.replayed_call(call, self.tool_search, call_id))
                self._close()
                self.out.append(ts.replayed_output(item, call_id))
                return
        self.ignored.append(f"{p} {kind}")

    def _mcp(self, kind: str, item: dict[str, Any], p: str) -> None:
        """MCP items of earlier turns, as the tool exchanges they were (mcp_items.py)."""
        if kind == "mcp_approval_response" and self.check_outputs:  # the input answers it (mcp_items.answered)
            rid = item.get("approval_request_id")
            if isinstance(rid, str):
                self.answers[rid] = item.get("approve") is True
                self.answered_at.setdefault(rid, f"{p}.approval_request_id")
        label, tool = item.get("server_label"), item.get("name")
        name = mcp.function_name(str(label), str(tool), self.client_functions) if label and tool else ""
        if kind == "mcp_call" and name:
            call, result = mcp.call_exchange(item, name)
            self._assistant().setdefault("tool_calls", []).append(call)
            self._close()
            if result is not None:
                self.out.append(result)
        elif (
            kind == "mcp_approval_request"
            and name
            and self.mcp_results is not None
            and str(item.get("id")) in self.mcp_results
        ):
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
                "history instead.",
                param=f"{p}.encrypted_content",
                code="invalid_encrypted_content",
            )
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
        for key, kinds in _REASONING_KINDS:
            raw = item.get(key)
            if raw is None:
                continue
            texts = _plain_texts(raw, kinds)
            if texts is None:  # parts of other kinds (skipped), or wrong ones (refused)
                texts = []
                for j, part in enumerate(expect_list(raw, f"{p}.{key}")):
                    part = expect_dict(part, f"{p}.{key}[{j}]")
                    if part.get("type") in kinds:
                        texts.append(req_str(part, "text", f"{p}.{key}[{j}]"))
            if any(texts):
                return ("" if key == "content" else "\n\n").join(texts)
        return None
