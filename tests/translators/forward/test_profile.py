"""The backend profile is the one place for dialects.

- Every field of ``BackendProfile`` comes from an upstream's configuration (a switch that the
  config cannot set would be a dead quirk).
- Every field the forward machine reads off a chunk, a choice or a delta is declared in the typed
  chunk structs (translators/forward/chunk_frames.py): the structs skip undeclared fields, so a field read
  but not declared would be silently None on the fast path.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import msgspec
import pytest

from crossfeed.proxy.runtime.config import Upstream
from crossfeed.translators.forward.chunk_frames import Choice, Chunk, Delta
from crossfeed.translators.options import BackendProfile

ROOT = Path(__file__).resolve().parents[3]
NON_DEFAULT = {
    "reasoning_field": "reasoning",
    "max_tokens_field": "max_tokens",
    "system_role": "developer",
    "system_placement": "user",
    "compaction_prompt": "Summarise.",
    "think_tags": True,
    "tool_markup": "hermes",
    "normalize_stream": True,
    "min_output_tokens": 1,
    "drop_params": ("seed", "logit_bias"),
}
CONFIG_NAME = {"system_placement": "system_messages"}


def test_every_profile_field_is_configurable() -> None:
    fields = {f.name for f in dataclasses.fields(BackendProfile)}
    assert fields == set(NON_DEFAULT), "a new profile field needs a config key and a line here"
    responses_only = {"normalize_stream", "min_output_tokens", "drop_params"}
    chat_only = {"think_tags", "tool_markup"}
    for api, skip in (("chat", responses_only), ("responses", chat_only)):
        given = {k: v for k, v in NON_DEFAULT.items() if k not in skip}
        up = Upstream(api=api, **{CONFIG_NAME.get(k, k): v for k, v in given.items()})
        got = dataclasses.asdict(up.profile)
        assert {k: got[k] for k in given} == given


def test_a_switch_for_the_other_api_is_refused() -> None:
    with pytest.raises(ValueError, match='tool_markup only applies to api = "chat" upstreams'):
        Upstream(api="responses", tool_markup="hermes")
    with pytest.raises(ValueError, match='normalize_stream only applies to api = "responses" upstreams'):
        Upstream(api="chat", normalize_stream=True)


def _reads(path: Path, receivers: set[str]) -> dict[str, set[str]]:
    """Field names read as ``x.get("name")`` or ``x.name`` where ``x`` is one of ``receivers``."""
    found: dict[str, set[str]] = {r: set() for r in receivers}
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in receivers
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found[node.func.value.id].add(node.args[0].value)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in receivers
            and node.attr != "get"
            and isinstance(node.ctx, ast.Load)
        ):
            found[node.value.id].add(node.attr)
    return found


def test_every_field_the_forward_machine_reads_is_declared() -> None:
    declared = {
        "chunk": set(Chunk.__struct_fields__),
        "choice": set(Choice.__struct_fields__),
        "delta": set(Delta.__struct_fields__),
    }
    reads: dict[str, set[str]] = {r: set() for r in declared}
    for name in ("machine.py", "content_writer.py", "assembler.py"):  # the chunk reader and the layers it extends
        path = ROOT / "translators" / "forward" / name
        for receiver, names in _reads(path, set(declared)).items():
            reads[receiver] |= names
    assert reads["delta"] >= {"content", "tool_calls", "function_call", "reasoning_content"}  # the scan works
    for receiver, names in reads.items():
        missing = names - declared[receiver] - _DICT_METHODS
        assert not missing, f"{receiver} fields read but not declared in chunk_frames.py: {sorted(missing)}"


_DICT_METHODS = {"items", "keys", "values", "__class__"}


def test_undeclared_fields_are_skipped() -> None:
    """What the structs are for: a field nobody reads costs nothing and cannot fail a stream."""
    chunk = msgspec.json.decode(b'{"id": [1, 2], "choices": [{"delta": {"content": "a", "novel": 1}}]}', type=Chunk)
    assert chunk.choices is not None and chunk.choices[0].delta is not None
    assert chunk.choices[0].delta.content == "a"
