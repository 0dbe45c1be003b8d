"""Every field the forward machine reads off a chunk, a choice or a delta is declared in the typed
chunk structs (translators/forward/chunk_frames.py): the structs skip undeclared fields, so a field
read but not declared would be silently None on the fast path. (That every field of the backend
profile is configurable is tests/proxy/runtime/test_profile.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec

from crossfeed.translators.forward.chunk_frames import Choice, Chunk, Delta
from tests.support.paths import ROOT


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
