"""Every Responses event and Response object checked against the Open Responses schema, with the
``openresponses-types`` package (the specification's own pydantic models).

Where the two specifications differ, crossfeed keeps OpenAI's wire (the SDKs, Codex and the AI
SDK read it), and this check maps it before validating; each difference is one line below and
in the README:

- OpenAI names reasoning content events ``response.reasoning_text.delta/done``; Open Responses
  ``response.reasoning.delta/done`` (what crossfeed sends with ``event_dialect =
  "open_responses"``: those pass unmapped; the strict validator's ``dialect`` says which to expect).
- Items and tools outside the Open Responses schema (hosted tools: ``web_search_call``, ``mcp_*``,
  ``custom_tool_call``; ``custom``, ``web_search``, ``mcp`` tools) are left out of the Response
  before it is validated, and events of those items are not checked here (the strict validator
  checks them); a ``tool_choice`` naming such a tool is read as ``required``.
- OpenAI's ``error`` event carries ``code``/``message``/``param`` beside its ``error`` object.
"""

from __future__ import annotations

import enum
from typing import Any

import openresponses_types as ort
from pydantic import BaseModel, ValidationError

_RENAMED = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}
_ITEM_TYPES = {"message", "function_call", "function_call_output", "reasoning", "compaction"}


def _event_models() -> dict[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for name in dir(ort):
        cls = getattr(ort, name)
        if name.endswith("StreamingEvent") and isinstance(cls, type) and issubclass(cls, BaseModel):
            kind = cls.model_fields["type"].annotation
            if isinstance(kind, type) and issubclass(kind, enum.Enum):
                for member in kind:
                    models[str(member.value)] = cls
    return models


_EVENTS = _event_models()


class OpenResponsesViolation(AssertionError):
    """A Response or event that the Open Responses schema rejects."""


def _in_schema(response: dict[str, Any]) -> dict[str, Any]:
    out = dict(response)
    out["output"] = [i for i in response.get("output") or () if isinstance(i, dict) and i.get("type") in _ITEM_TYPES]
    out["tools"] = [t for t in response.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    text = response.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        # openresponses-types 2.4.0 types json_schema's ``schema`` as null (a defect of the
        # generated model): the schema itself is left out of the check, the rest is checked.
        out["text"] = {**text, "format": {**fmt, "schema": None}}
    choice = response.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") not in ("function", "allowed_tools"):
        out["tool_choice"] = "required"  # a hosted or custom tool named: outside the schema
    elif isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        out["tool_choice"] = {
            **choice,
            "tools": [t for t in choice.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"],
        }
    return out


def check_response(response: dict[str, Any], where: str = "response") -> None:
    try:
        ort.ResponseResource.model_validate(_in_schema(response))
    except ValidationError as exc:
        raise OpenResponsesViolation(f"{where}: not an Open Responses Response: {exc}") from None


def check_events(events: list[dict[str, Any]]) -> None:
    """Each event of a known type validated by its model; every Response it carries validated."""
    hidden: set[str] = set()  # ids of items outside the schema: their events are not checked here
    for i, event in enumerate(events):
        kind = event.get("type")
        item = event.get("item")
        if isinstance(item, dict) and item.get("type") not in _ITEM_TYPES:
            hidden.add(str(item.get("id")))
            continue
        if event.get("item_id") in hidden or kind == "error":
            continue
        model = _EVENTS.get(_RENAMED.get(str(kind), str(kind)))
        if model is None:
            continue
        body = {**event, "type": _RENAMED.get(str(kind), kind)}
        if isinstance(body.get("response"), dict):
            body["response"] = _in_schema(body["response"])
        try:
            model.model_validate(body)
        except ValidationError as exc:
            raise OpenResponsesViolation(f"event {i} ({kind}): {exc}") from None


def check_compact(body: dict[str, Any]) -> None:
    """``POST /v1/responses/compact``'s answer, by the schema's ``CompactResource``."""
    try:
        ort.CompactResource.model_validate(body)
    except ValidationError as exc:
        raise OpenResponsesViolation(f"compact: not an Open Responses CompactResource: {exc}") from None
