"""The model catalog Codex reads, served beside the usual model list on ``GET /v1/models``.

Codex fetches a provider's ``model_catalog_url`` (``[model_providers.<id>] model_catalog_url``)
and reads its top-level ``models`` array; OpenAI clients read ``data``. One body carries both.
A catalog entry tells Codex, for a local model name it does not know, what its bundled entries
tell it for OpenAI's: the context window, the reasoning levels, and how to offer ``apply_patch``
(a freeform custom tool). Without one, Codex uses fallback metadata: no ``apply_patch`` at all
and a guessed context window.

Entries are built for every model the chat upstreams list (their ``/models`` answer and the exact
names in ``models`` / ``model_map``) and for every ``[codex_models."name"]`` section, which sets
the fields below; the rest are the values Codex 0.171.0's own entries carry for a coding model.
Checked against that version: it parses these entries and offers ``apply_patch`` as a custom tool
(tests/e2e/test_codex.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from crossfeed.proxy.runtime.config import CodexModel, Config, Upstream

DEFAULT_CONTEXT = 128_000
INSTRUCTIONS = """You are a coding agent working in the user's terminal through the Codex CLI.
You can read and change files and run commands with the tools you are given. Work in small,
checked steps: look before you change, keep edits to what the task needs, run the relevant
command or test after a change, and read its output before going on. Use apply_patch for file
edits. Do not guess at file contents or command results: read them. When the task is done, say
briefly what you changed and what you checked; if you could not finish, say what is left and why."""
_LEVELS = {
    "minimal": "Fastest, least reasoning",
    "low": "Fast responses with lighter reasoning",
    "medium": "Balances speed and reasoning depth",
    "high": "Deeper reasoning for hard problems",
    "xhigh": "The most reasoning",
}


def entry(slug: str, model: CodexModel, upstream: Upstream | None, priority: int) -> dict[str, Any]:
    window = (
        model.context_window
        or (upstream.context_window if upstream and upstream.context_window else None)
        or DEFAULT_CONTEXT
    )
    return {
        "slug": slug,
        "display_name": model.display_name or slug,
        "description": model.description,
        "default_reasoning_level": model.default_reasoning,
        "supported_reasoning_levels": [{"effort": e, "description": _LEVELS[e]} for e in model.reasoning_levels],
        "shell_type": "shell_command",
        "visibility": "list",
        "supported_in_api": True,
        "priority": priority,
        "upgrade": None,
        # Codex requires base instructions in an entry (its own are only in its bundled ones).
        "model_messages": {"instructions_template": model.instructions or INSTRUCTIONS},
        "supports_reasoning_summaries": True,
        "supports_reasoning_summary_parameter": True,
        "default_reasoning_summary": "auto",
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": None if model.apply_patch == "none" else model.apply_patch,
        "web_search_tool_type": "text",
        "truncation_policy": {"mode": "tokens", "limit": 10_000},
        "supports_parallel_tool_calls": True,
        "context_window": window,
        "max_context_window": window,
        "auto_compact_token_limit": None,
        "input_modalities": ["text", "image"],
        "experimental_supported_tools": [],
        "prefer_websockets": False,
        "use_responses_lite": False,
        "supports_search_tool": False,
        "available_in_plans": [],
        "service_tiers": [],
        "additional_speed_tiers": [],
        "default_service_tier": None,
        "minimal_client_version": "0.124.0",
        "comp_hash": "",
        "tool_mode": None,
        "multi_agent_version": None,
        "multi_agent_reasoning_effort": None,
        "model_specialty": None,
        "availability_nux": None,
        "guardian": None,
        "auto_review_model_override": None,
        "include_skills_usage_instructions": False,
        "include_apps_usage_instructions": False,
        "include_plugin_usage_instructions": False,
        "node_repl_auto_review_required": False,
        "node_repl_disabled": False,
        "requires_sandboxed_review": False,
        "supports_experimental_context": False,
        "supports_image_detail_original": False,
        "supports_reasoning_effort_updates": False,
    }


def catalog(config: Config, listed: Iterable[tuple[str, Upstream]]) -> list[dict[str, Any]]:
    """One entry per model name: those the chat upstreams list (with the upstream that serves
    them), then the configured ones; a ``[codex_models]`` section sets its model's fields."""
    seen: dict[str, Upstream | None] = {}
    for name, up in listed:
        if up.api == "chat":
            seen.setdefault(name, up)
    for name in config.codex_models:
        seen.setdefault(name, None)
    return [
        entry(name, config.codex_models.get(name) or CodexModel(), up, i) for i, (name, up) in enumerate(seen.items())
    ]
