"""The tests mirror the product (docs/DESIGN.md, "The layout"): a unit test sits in the room of the
module it tests, ``tests/translators/<room>/`` or ``tests/proxy/<room>/``; the other folders of
``tests/`` are kinds of test (golden, faults, integration, e2e, real, store, layout, bench, deploy)
and the helpers they share (support, fakes).

A translator test is as pure as the translators: it runs no server and imports nothing of the proxy,
so ``pytest tests/translators`` needs no network, no event loop and no port.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT, TESTS

KINDS = {"golden", "faults", "integration", "e2e", "real", "store", "layout", "bench", "deploy"}
HELPERS = {"support", "fakes", "fixtures"}
MIRRORS = {"translators", "proxy"}

# What a translator test may not import: the proxy, anything that does I/O or runs a loop, and the
# test helpers that start servers or clients (tests/conftest.py, tests/fakes/, the app, serve and SDK helpers).
NOT_PURE = {
    "aiohttp",
    "asyncio",
    "socket",
    "subprocess",
    "threading",
    "httpx",
    "httpx2",
    "openai",
    "structlog",
    "sqlite3",
    "redis",
}
NOT_PURE_PREFIXES = (
    "crossfeed.proxy",
    "tests.conftest",
    "tests.fakes",
    "tests.support.app_server",
    "tests.support.clients",
    "tests.support.serve_process",
)


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, node.module)]
    return found


def test_every_folder_of_tests_is_a_room_a_kind_or_a_helper() -> None:
    top = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert top <= KINDS | HELPERS | MIRRORS, "a new kind of test is a decision: add it here and to docs/DESIGN.md"


def test_unit_tests_sit_in_a_room_of_the_product() -> None:
    """``tests/translators/forward/`` exists because ``translators/forward/`` does, and so on down."""
    bad = []
    for mirror in MIRRORS:
        for path in sorted((TESTS / mirror).rglob("test_*.py")):
            folder = path.parent.relative_to(TESTS)
            if not (ROOT / folder / "__init__.py").is_file():
                bad.append(f"{path.relative_to(ROOT)}: no room {folder}/ in the product")
    assert bad == []


def test_every_mirror_folder_is_a_package() -> None:
    """Two test files of one name in two rooms (test_body.py, test_machine.py) need their folders to
    be packages, or pytest imports the second as the first."""
    bad = [
        str(folder.relative_to(ROOT))
        for mirror in MIRRORS
        for folder in [TESTS / mirror, *(p for p in (TESTS / mirror).rglob("*") if p.is_dir())]
        if folder.name != "__pycache__" and not (folder / "__init__.py").is_file()
    ]
    assert bad == []


def test_translator_tests_are_pure() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((TESTS / "translators").rglob("*.py"))
        for line, name in imports(path)
        if name.split(".")[0] in NOT_PURE or name.startswith(NOT_PURE_PREFIXES)
    ]
    assert bad == []


def test_no_test_module_imports_another() -> None:
    """What two test files share lives in a helper (tests/support/, tests/fakes/, or a kind's own
    module such as tests/store/helpers.py), never in one of them: a test file is read alone. A
    conftest.py only makes fixtures; nothing imports it."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted(TESTS.rglob("*.py"))
        if "fixtures" not in path.relative_to(TESTS).parts
        for line, name in imports(path)
        if name.startswith("tests.") and (name.split(".")[-1].startswith("test_") or name.endswith(".conftest"))
    ]
    assert bad == []


def test_one_app_start_up_and_one_chunk_builder() -> None:
    """crossfeed's app is served in-process only by tests/support/app_server.py (the one place that
    imports ``make_runner``), and a chat chunk is built only by tests/support/chat_chunks.py (no
    other module defines a ``chunk``, ``chat_chunk``, ``_chunk`` or ``usage_chunk`` function of
    its own)."""
    builders = {"chunk", "chat_chunk", "_chunk", "usage_chunk"}
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS)
        if "fixtures" in rel.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        if str(rel) != "support/app_server.py":
            bad += [
                f"{path.relative_to(ROOT)}:{node.lineno}: make_runner"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and any(a.name == "make_runner" for a in node.names)
            ]
        if str(rel) != "support/chat_chunks.py":
            bad += [
                f"{path.relative_to(ROOT)}:{node.lineno}: def {node.name}"
                for node in tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in builders
            ]
    assert bad == []


def test_the_rule_finds_an_impure_import(tmp_path: Path) -> None:
    sample = tmp_path / "test_x.py"
    sample.write_text("import asyncio\nfrom crossfeed.proxy.app import create_app\nfrom tests.support import paths\n")
    assert imports(sample) == [(1, "asyncio"), (2, "crossfeed.proxy.app"), (3, "tests.support")]
