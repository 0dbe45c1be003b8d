"""The backend profile and the per-request context shared by the request mapping and the machines.

Both are frozen and passed explicitly: no translator reads configuration or globals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

MaxTokensField = Literal["max_tokens", "max_completion_tokens", "both"]
# The markup a chat server without a tool parser writes tool calls in (translators/forward/tool_markup.py).
Dialect = Literal["hermes", "qwen3_coder", "mistral"]


@dataclass(frozen=True, slots=True)
class BackendProfile:
    """Everything about the dialect one backend speaks, in one place: what the request mappers
    send it and what the stream machines expect from it. A new quirk is one field here, the code
    path that reads it, and its test (the README's backend notes say which server needs which)."""

    # Field that carries reasoning text on chat messages and deltas, for replay to the backend
    # (forward) and for chat clients (reverse). DeepSeek, GLM, Qwen, llama.cpp: reasoning_content;
    # vLLM >= 0.11, Ollama, OpenRouter: reasoning.
    reasoning_field: str = "reasoning_content"
    # Which token-limit field(s) to send upstream for ``max_output_tokens``.
    max_tokens_field: MaxTokensField = "both"
    # Role used for ``instructions`` and ``developer`` messages (many servers reject "developer").
    system_role: str = "system"
    # Where system/developer messages after the first go (translators/compaction.place_system):
    # "merge" into one leading system message, "user" messages, or "keep" them in place.
    system_placement: Literal["merge", "keep", "user"] = "merge"
    # The prompt that asks the backend for a compaction summary (None: compaction.COMPACTION_PROMPT).
    compaction_prompt: str | None = None
    # The content may open with <think>...</think> reasoning (translators/forward/think_tags.py).
    think_tags: bool = False
    # Tool calls written as markup in the content, in this dialect (translators/forward/tool_markup.py).
    tool_markup: Dialect | None = None
    # A Responses backend's stream is re-emitted through translators/responses/normalize.py.
    normalize_stream: bool = False
    # The smallest max_output_tokens the Responses backend accepts (OpenAI: 16; llama-server: 1):
    # a chat client's smaller max_tokens is raised to it.
    min_output_tokens: int = 16
    # Chat request fields a Responses backend lacks (seed, logit_bias, vendor extras...) that the
    # reverse request mapping drops, reported in its ``ignored`` list, instead of answering 400.
    drop_params: tuple[str, ...] = ()
    # reasoning.effort values -> what the chat backend accepts ("omit": the field is not sent);
    # pairs, so the profile stays hashable. Values not listed pass as they are.
    reasoning_effort_map: tuple[tuple[str, str], ...] = ()


DEFAULT_PROFILE = BackendProfile()


# The single string argument of the chat function that stands for a ``custom`` tool.
CUSTOM_ARG = "input"


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What the stream machine must know about the tools declared in the request.

    ``custom_tools``: chat function names that stand for Responses ``custom`` (freeform) tools;
    a call to one becomes a ``custom_tool_call`` item whose input is unwrapped from the single
    string argument named ``custom_arg``.
    ``namespaced``: chat function name -> (namespace, member name) for flattened namespace tools.
    ``hosted``: chat function names that stand for tools crossfeed runs itself (web search): a
    call to one streams nothing to the client; the exchange reads it from the leg's end.
    ``client_search``: the chat function standing for a ``tool_search`` the client runs itself
    (``execution: "client"``, Codex's): a call to it becomes a ``tool_search_call`` item for the
    client, as a function call would (forward/tool_search.py).
    """

    custom_tools: frozenset[str] = frozenset()
    namespaced: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    custom_arg: str = CUSTOM_ARG
    hosted: frozenset[str] = frozenset()
    client_search: str | None = None


NO_TOOLS = ToolContext()


# The client's dialect of the Responses events: OpenAI's names (the SDKs', Codex's; the default)
# or the Open Responses specification's, which names the raw reasoning events differently.
EventDialect = Literal["openai", "open_responses"]


@dataclass(frozen=True, slots=True)
class EventNames:
    """The names of the events the two dialects name differently (the raw reasoning deltas and
    their done event; every field they carry, and the ``reasoning_text`` content part, are the
    same in both). Chosen once per stream: the machine reads them when an item opens or closes."""

    reasoning_delta: str = "response.reasoning_text.delta"
    reasoning_done: str = "response.reasoning_text.done"


OPENAI_EVENTS = EventNames()
OPEN_RESPONSES_EVENTS = EventNames("response.reasoning.delta", "response.reasoning.done")
EVENT_NAMES: Mapping[EventDialect, EventNames] = {"openai": OPENAI_EVENTS, "open_responses": OPEN_RESPONSES_EVENTS}
