"""Chat ``messages`` -> Responses ``instructions`` + ``input`` items (the reverse request mapping,
translators/reverse/request.py): ``ChatMessages``."""

from __future__ import annotations

from typing import Any

from crossfeed.translators.checks import expect_dict, expect_list, missing, opt_str, req_str, value_error
from crossfeed.translators.errors import UnsupportedFeature
from crossfeed.translators.options import BackendProfile

NO_EQUIVALENT = (
    "the Responses API has no equivalent, and dropping it would change the output (the "
    "upstream's drop_params can list it to have it dropped)"
)


def unsupported(param: str, what: str = NO_EQUIVALENT) -> UnsupportedFeature:
    """The 400 for a chat parameter whose effect a Responses backend cannot reproduce."""
    return UnsupportedFeature(f"'{param}' is not supported by crossfeed's Responses upstream: {what}.", param=param)


_MESSAGE_KEYS = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "refusal",
        "audio",
        "function_call",
        "reasoning_content",
        "reasoning",
    }
)


class ChatMessages:
    """Chat ``messages`` -> Responses ``instructions`` + ``input`` items.

    Rules:
    - system/developer messages before the first other message -> ``instructions`` (joined with a
      blank line); later ones -> ``{type:message, role:system|developer, content:text}`` items;
      their content must be text (a string or text parts);
    - user: string content kept; parts ``text`` -> ``input_text``, ``image_url`` -> ``input_image``
      (``detail`` default ``auto``), ``file`` -> ``input_file`` (file_id / file_data / filename);
      ``input_audio`` -> 400 ``messages[i].content[j]``; other part types -> 400 ``...type``;
    - assistant: the reasoning field (``options.reasoning_field``, else ``reasoning_content`` /
      ``reasoning``) -> a ``reasoning`` item ``{summary:[], content:[{type:reasoning_text, text}]}``
      (no id: it was never stored upstream) first; text parts and ``refusal`` -> one
      ``{type:message, role:assistant, content:text}`` item; ``tool_calls`` function ->
      ``function_call {call_id, name, arguments}``, custom -> ``custom_tool_call {call_id, name,
      input}``; legacy ``function_call`` -> ``function_call`` with call_id ``call_legacy_<i>``;
      ``audio`` -> 400;
    - tool -> ``function_call_output {call_id, output}`` (``custom_tool_call_output`` when the id
      belongs to a custom call); text parts are joined; legacy ``function`` role -> the output
      of the latest legacy call;
    - message ``name`` and unknown message keys are dropped (listed in ``ignored``).
    """

    def __init__(self, options: BackendProfile, ignored: list[str]) -> None:
        self.instructions: list[str] = []
        self.items: list[dict[str, Any]] = []
        self._rfield = options.reasoning_field
        self._ignored = ignored
        self._custom_ids: set[str] = set()
        self._legacy_id: str | None = None

    def add(self, raw: Any, i: int) -> None:
        p = f"messages[{i}]"
        msg = expect_dict(raw, p)
        role = msg.get("role")
        for key in msg:
            if key == "name" or (key not in _MESSAGE_KEYS and key != self._rfield):
                self._ignored.append(f"{p}.{key}")
        if role in ("system", "developer"):
            text = self._text(msg.get("content"), p)
            if not self.items:
                self.instructions.append(text)
            else:
                self.items.append({"type": "message", "role": role, "content": text})
        elif role == "user":
            self.items.append({"type": "message", "role": "user", "content": self._user(msg.get("content"), p)})
        elif role == "assistant":
            self._assistant(msg, p, i)
        elif role == "tool":
            call_id = req_str(msg, "tool_call_id", p)
            kind = "custom_tool_call_output" if call_id in self._custom_ids else "function_call_output"
            self.items.append({"type": kind, "call_id": call_id, "output": self._text(msg.get("content"), p)})
        elif role == "function":
            if self._legacy_id is None:
                raise value_error(p, "a function message must follow an assistant function_call.")
            self.items.append(
                {
                    "type": "function_call_output",
                    "call_id": self._legacy_id,
                    "output": self._text(msg.get("content"), p),
                }
            )
        elif role is None:
            raise missing(f"{p}.role")
        else:
            raise value_error(
                f"{p}.role", f"expected 'system', 'developer', 'user', 'assistant' or 'tool', got {role!r}."
            )

    def _text(self, content: Any, p: str) -> str:
        """String content, or text parts joined."""
        if content is None:
            raise missing(f"{p}.content")
        if isinstance(content, str):
            return content
        texts = []
        for j, raw in enumerate(expect_list(content, f"{p}.content")):
            part = expect_dict(raw, f"{p}.content[{j}]")
            if part.get("type") != "text":
                raise value_error(f"{p}.content[{j}].type", f"expected 'text', got {part.get('type')!r}.")
            texts.append(req_str(part, "text", f"{p}.content[{j}]"))
        return "".join(texts)

    def _user(self, content: Any, p: str) -> str | list[dict[str, Any]]:
        if content is None:
            raise missing(f"{p}.content")
        if isinstance(content, str):
            return content
        parts = []
        for j, raw in enumerate(expect_list(content, f"{p}.content")):
            pp = f"{p}.content[{j}]"
            part = expect_dict(raw, pp)
            kind = part.get("type")
            if kind == "text":
                parts.append({"type": "input_text", "text": req_str(part, "text", pp)})
            elif kind == "image_url":
                image = part.get("image_url")
                if isinstance(image, str):
                    url, detail = image, None
                else:
                    image = expect_dict(image, f"{pp}.image_url")
                    url, detail = req_str(image, "url", f"{pp}.image_url"), opt_str(image, "detail", f"{pp}.image_url")
                parts.append({"type": "input_image", "image_url": url, "detail": detail or "auto"})
            elif kind == "file":
                f = expect_dict(part.get("file"), f"{pp}.file")
                out: dict[str, Any] = {"type": "input_file"}
                for key in ("file_id", "file_data", "filename"):
                    if opt_str(f, key, f"{pp}.file") is not None:
                        out[key] = f[key]
                if "file_id" not in out and "file_data" not in out:
                    raise missing(f"{pp}.file.file_data")
                parts.append(out)
            elif kind == "input_audio":
                raise UnsupportedFeature(
                    "Audio input is not supported by crossfeed's Responses upstream "
                    "(Responses messages take no audio parts).",
                    param=pp,
                )
            elif kind is None:
                raise missing(f"{pp}.type")
            else:
                raise value_error(f"{pp}.type", f"expected 'text', 'image_url' or 'file', got {kind!r}.")
        return parts

    def _assistant(self, msg: dict[str, Any], p: str, i: int) -> None:
        if msg.get("audio") is not None:
            raise unsupported(f"{p}.audio", "earlier audio answers cannot be replayed")
        for field in (self._rfield, "reasoning_content", "reasoning"):
            value = msg.get(field)
            if isinstance(value, str) and value:
                self.items.append(
                    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": value}]}
                )
                break
        content = msg.get("content")
        text = ""
        if isinstance(content, str):
            text = content
        elif content is not None:
            for j, raw in enumerate(expect_list(content, f"{p}.content")):
                part = expect_dict(raw, f"{p}.content[{j}]")
                kind = part.get("type")
                if kind not in ("text", "refusal"):
                    raise value_error(f"{p}.content[{j}].type", f"expected 'text' or 'refusal', got {kind!r}.")
                text += req_str(part, kind, f"{p}.content[{j}]")
        refusal = opt_str(msg, "refusal", p)
        if refusal:
            text += refusal
        if text:
            self.items.append({"type": "message", "role": "assistant", "content": text})
        calls = msg.get("tool_calls")
        for k, raw in enumerate(expect_list(calls, f"{p}.tool_calls") if calls is not None else ()):
            self._tool_call(expect_dict(raw, f"{p}.tool_calls[{k}]"), f"{p}.tool_calls[{k}]")
        fc = msg.get("function_call")
        if fc is not None:
            fc = expect_dict(fc, f"{p}.function_call")
            self._legacy_id = f"call_legacy_{i}"
            self.items.append(
                {
                    "type": "function_call",
                    "call_id": self._legacy_id,
                    "name": req_str(fc, "name", f"{p}.function_call"),
                    "arguments": req_str(fc, "arguments", f"{p}.function_call"),
                }
            )

    def _tool_call(self, call: dict[str, Any], p: str) -> None:
        call_id = req_str(call, "id", p)
        kind = call.get("type", "function")
        if kind == "function":
            fn = expect_dict(call.get("function"), f"{p}.function")
            self.items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": req_str(fn, "name", f"{p}.function"),
                    "arguments": req_str(fn, "arguments", f"{p}.function"),
                }
            )
        elif kind == "custom":
            c = expect_dict(call.get("custom"), f"{p}.custom")
            self._custom_ids.add(call_id)
            self.items.append(
                {
                    "type": "custom_tool_call",
                    "call_id": call_id,
                    "name": req_str(c, "name", f"{p}.custom"),
                    "input": req_str(c, "input", f"{p}.custom"),
                }
            )
        else:
            raise value_error(f"{p}.type", f"expected 'function' or 'custom', got {kind!r}.")
