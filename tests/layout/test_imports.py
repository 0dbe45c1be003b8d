"""The import rules of the house (docs/DESIGN.md, "The layout"), read from the source with ``ast``.

Every rule is about direct imports, at any depth of a module (a function-level import counts the
same as one at the top; ``if TYPE_CHECKING:`` blocks count too: a type is a dependency). Each test
names the offending file and import, so a failure says which line to move.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("proxy", "translators")

# translators/ is pure: nothing that does I/O, awaits, logs, or reads a clock or randomness.
IMPURE = {
    "aiohttp",
    "asyncio",
    "structlog",
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
    "sqlite3",
    "redis",
}


@dataclass(frozen=True)
class Edge:
    path: Path  # the importing file
    module: str  # its dotted name, e.g. crossfeed.proxy.turns.exchange
    target: str  # what it imports: a module, or a package when the names are not modules
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "crossfeed." + ".".join(parts)


def product_files() -> dict[str, Path]:
    return {module_name(p): p for top in PRODUCT for p in sorted((ROOT / top).rglob("*.py"))}


MODULES = product_files()


def edges(path: Path) -> Iterator[Edge]:
    """Every import in ``path``; ``from package import module`` counts as importing the module."""
    me = module_name(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(path, me, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.relative_to(ROOT)}:{node.lineno}: relative import (write it absolute)"
            base = node.module or ""
            modules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            for target in modules or [base]:
                yield Edge(path, me, target, node.lineno)


ALL_EDGES = [e for p in MODULES.values() for e in edges(p)]


def room(module: str) -> str:
    """``proxy.turns``, ``translators.forward``, ``proxy.app``, ``translators`` (the kernel)...

    A module directly in ``proxy/`` is a room of its own (app, keys, errors, upstream);
    a module directly in ``translators/`` belongs to the kernel."""
    parts = module.split(".")[1:]  # drop "crossfeed"
    if len(parts) == 1:
        return parts[0]
    if parts[0] == "translators":
        is_package = (ROOT.joinpath(*parts) / "__init__.py").is_file()
        return "translators" if len(parts) == 2 and not is_package else f"translators.{parts[1]}"
    return f"proxy.{parts[1]}"


def internal(target: str) -> bool:
    return target.split(".")[0] == "crossfeed" and target != "crossfeed"


def offenders(source_rooms: set[str], forbidden_rooms: set[str]) -> list[str]:
    return [
        str(e)
        for e in ALL_EDGES
        if room(e.module) in source_rooms and internal(e.target) and room(e.target) in forbidden_rooms
    ]


def test_every_product_module_is_in_a_known_room() -> None:
    rooms = {room(m) for m in MODULES}
    assert rooms == {
        "proxy",
        "proxy.app",
        "proxy.keys",
        "proxy.errors",
        "proxy.upstream",
        "proxy.__main__",
        "proxy.cli",
        "proxy.runtime",
        "proxy.http",
        "proxy.turns",
        "proxy.streaming",
        "proxy.state",
        "translators",
        "translators.forward",
        "translators.reverse",
        "translators.responses",
    }, "a new room is a decision: add it here, to the rules below and to docs/DESIGN.md"


def test_imports_use_the_one_package_name() -> None:
    """Product, tests and benchmark import ``crossfeed.proxy`` / ``crossfeed.translators``, never
    the bare folder names (which refuse to import: see proxy/__init__.py)."""
    bad = []
    for top in (*PRODUCT, "tests", "bench", "crossfeed"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if top == "crossfeed" and path.parent != ROOT / "crossfeed":
                continue  # the links to proxy/ and translators/, read above
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in PRODUCT]
    assert bad == []


def test_translators_import_nothing_impure_and_nothing_of_the_proxy() -> None:
    bad = [
        str(e)
        for e in ALL_EDGES
        if room(e.module).startswith("translators")
        and (e.target.split(".")[0] in IMPURE or e.target.startswith("crossfeed.proxy"))
    ]
    assert bad == []


def test_the_two_directions_never_import_each_other() -> None:
    assert offenders({"translators.forward"}, {"translators.reverse"}) == []
    assert offenders({"translators.reverse"}, {"translators.forward"}) == []


def test_the_translator_kernel_imports_no_subpackage() -> None:
    assert offenders({"translators"}, {"translators.forward", "translators.reverse", "translators.responses"}) == []


def test_responses_streams_import_neither_direction() -> None:
    assert offenders({"translators.responses"}, {"translators.forward", "translators.reverse"}) == []


def test_the_streaming_engine_never_imports_routes_plans_or_the_store() -> None:
    assert offenders({"proxy.streaming"}, {"proxy.http", "proxy.turns", "proxy.state", "proxy.cli", "proxy.app"}) == []


def test_plans_never_import_the_transport() -> None:
    assert offenders({"proxy.turns"}, {"proxy.http", "proxy.cli", "proxy.app"}) == []


def test_state_imports_no_turn_engine_or_route() -> None:
    assert offenders({"proxy.state"}, {"proxy.turns", "proxy.streaming", "proxy.http", "proxy.cli", "proxy.app"}) == []


def test_runtime_is_the_floor() -> None:
    """Configuration, logs, metrics and ids lean on nothing of the proxy but its error tree."""
    proxy_rooms = {room(m) for m in MODULES if room(m).startswith("proxy")} - {"proxy.runtime", "proxy.errors"}
    assert offenders({"proxy.runtime"}, proxy_rooms) == []


def test_the_http_edge_never_imports_the_command_line() -> None:
    assert offenders({"proxy.http"}, {"proxy.cli", "proxy.app"}) == []


def test_only_the_command_line_imports_the_app_factory() -> None:
    bad = [str(e) for e in ALL_EDGES if e.target == "crossfeed.proxy.app" and room(e.module) not in {"proxy.cli"}]
    assert bad == []


def test_only_the_store_backends_import_sqlite3_or_redis() -> None:
    backends = {
        "crossfeed.proxy.state.store.sqlite",
        "crossfeed.proxy.state.store.redis",
        # their background-run parts (mixins of the two stores)
        "crossfeed.proxy.state.store.sqlite_runs",
        "crossfeed.proxy.state.store.redis_runs",
    }
    bad = [str(e) for e in ALL_EDGES if e.target.split(".")[0] in {"sqlite3", "redis"} and e.module not in backends]
    assert bad == []


def test_only_the_tracing_module_imports_opentelemetry() -> None:
    """Tracing is an optional extra: one module imports it, and only when tracing is on
    (proxy/runtime/tracing.py imports it inside ``configure``)."""
    allowed = {"crossfeed.proxy.runtime.tracing_otel"}
    bad = [str(e) for e in ALL_EDGES if e.target.split(".")[0] == "opentelemetry" and e.module not in allowed]
    assert bad == []


def test_the_streaming_engine_is_not_traced() -> None:
    """The per-chunk path has no tracing hook: the relay's figures are read after it (run_leg)."""
    tracing = ("crossfeed.proxy.runtime.tracing", "opentelemetry")
    bad = [str(e) for e in ALL_EDGES if room(e.module) == "proxy.streaming" and e.target.startswith(tracing)]
    assert bad == []


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_product_modules() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in ALL_EDGES:
        if e.target in MODULES and e.target != e.module:
            graph[e.module].add(e.target)
    assert find_cycles(graph) == []
