"""Configuration errors in plain words, each blamed on where the value came from.

``load_config`` records the source of every value it sets from the environment or a flag
(``$CROSSFEED_PORT``, ``--port``); everything else came from the file. A validation error is
then one line per problem: the key's path, its source, what is wrong in words a user reads
(not the validator's), and a fix where one is known: "did you mean" for an unknown key, two
brackets for ``[upstreams]`` written as a table. ``misspelt_variables`` catches a
``CROSSFEED_*`` variable that is almost one crossfeed reads, which would otherwise be ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

Sources = dict[tuple[Any, ...], str]  # a resolved key path -> "$VAR" or "--flag"

# CROSSFEED_* variables crossfeed reads that are not config keys.
OTHER_VARIABLES = frozenset(
    {
        "CROSSFEED_CONFIG",
        "CROSSFEED_DATA_DIR",
        "CROSSFEED_INBOUND_KEYS",
        "CROSSFEED_REASONING_KEY",
        "CROSSFEED_REDIS_URL",
    }
)


def source_of(loc: tuple[Any, ...], sources: Sources, path: Path | None) -> str:
    """Where the value at ``loc`` came from: the variable or flag that set it (or a parent of
    it), else the file."""
    for n in range(len(loc), 0, -1):
        found = sources.get(tuple(loc[:n]))
        if found:
            return f"from {found}"
    below = sorted({label for key, label in sources.items() if key[: len(loc)] == loc})
    if below:  # a check of the whole section, whose keys came from there
        return "from " + ", ".join(below) + (f" and {path}" if path else "")
    return f"in {path}" if path else "as set"


def _fields(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where ``loc`` points (its parent's fields)."""
    node: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = node.model_fields.get(part) if node is not None and hasattr(node, "model_fields") else None
        if field is None:
            return []
        node = _model_of(field.annotation)
    return list(node.model_fields) if node is not None and hasattr(node, "model_fields") else []


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def explain(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    """One validation error in plain words."""
    kind = err.get("type", "")
    loc = tuple(err.get("loc", ()))
    got = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        known = _fields(model, loc)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        return "unknown key" + (
            f"; did you mean {close[0]!r}?" if close else (f" (known here: {', '.join(known)})" if known else "")
        )
    if loc == ("upstreams",) and isinstance(got, dict):
        return (
            "must be an array of tables: write [[upstreams]] (two brackets) above each backend's keys, not [upstreams]"
        )
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, got {got!r}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number, got {got!r}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false, got {got!r}"
    if kind in ("string_type",):
        return f"must be a string, got {got!r}"
    if kind in ("tuple_type", "list_type"):
        return f"must be a list, got {got!r}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a table, got {got!r}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}, got {got!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = {
            "greater_than": "above",
            "greater_than_equal": "at least",
            "less_than": "below",
            "less_than_equal": "at most",
        }[kind]
        limit = next(iter(ctx.values()), "")
        return f"must be {bound} {limit}, got {got!r}"
    if kind == "missing":
        return "is required"
    if kind == "string_too_short":
        return "must not be empty"
    message = str(err.get("msg", "is not valid"))
    return message.removeprefix("Value error, ")


def misspelt_variables(environ: Iterable[str], known: Iterable[str], named: Iterable[str]) -> list[str]:
    """Lines for ``CROSSFEED_*`` variables that crossfeed does not read but that are a typo of
    one it does: at most two letters wrong, missing, extra or swapped (``CROSSFEED_UPSTRAEM``).
    Other ``CROSSFEED_*`` variables (a script's own, ``CROSSFEED_TEST_REDIS_URL``), the ones the
    config names (``*_env`` values) and section paths (``CROSSFEED_X__Y``) are left alone."""
    known = set(known) | OTHER_VARIABLES
    named = set(named)
    out = []
    for env in environ:
        if not env.startswith("CROSSFEED_") or "__" in env or env in known or env in named:
            continue
        close = sorted(k for k in known if _typo(env, k))
        if close:
            out.append(f"  ${env}: crossfeed reads no such variable; did you mean ${close[0]}?")
    return out


def _typo(a: str, b: str) -> bool:
    """Optimal string alignment distance of ``a`` and ``b`` at most 2 (a swap counts one)."""
    if abs(len(a) - len(b)) > 2:
        return False
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[len(b)] <= 2
