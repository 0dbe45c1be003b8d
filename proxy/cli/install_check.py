"""crossfeed installs one top-level package, ``crossfeed`` (the repository's ``proxy/`` and
``translators/`` folders go in as ``crossfeed.proxy`` and ``crossfeed.translators``). Another
distribution in the same environment that ships a package of that name shares its files with
crossfeed's, and whichever was installed last wins. This finds such a neighbour so that ``serve``
and ``check-config`` can say so plainly, instead of failing later with an import error."""

from __future__ import annotations

from importlib.metadata import packages_distributions

OURS = ("crossfeed",)


def foreign_owners() -> dict[str, list[str]]:
    """Top-level package name -> the other distributions that also install it."""
    try:
        owners = packages_distributions()
    except Exception:
        return {}
    found = {}
    for name in OURS:
        others = sorted({d for d in owners.get(name, ()) if d.lower() != "crossfeed"})
        if others:
            found[name] = others
    return found


def warning() -> str | None:
    found = foreign_owners()
    if not found:
        return None
    clash = "; ".join(f"'{name}' also from {', '.join(dists)}" for name, dists in found.items())
    return (
        f"this environment has other packages under crossfeed's top-level name ({clash}): one may have "
        "overwritten the other's files; install crossfeed in its own virtual environment (python3 -m venv, "
        "or pipx install .)"
    )
