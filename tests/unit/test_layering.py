"""translators/ stays pure: no I/O, async, logging or proxy imports (docs/DESIGN.md)."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {
    "aiohttp",
    "asyncio",
    "structlog",
    "proxy",
    "socket",
    "requests",
    "httpx",
    "time",
    "random",
    "os",
    "uuid",
    "secrets",
    "logging",
    "datetime",
}


def test_translators_import_nothing_impure() -> None:
    root = Path(__file__).resolve().parents[2] / "translators"
    offenders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.name}: {n}")
    assert offenders == []
