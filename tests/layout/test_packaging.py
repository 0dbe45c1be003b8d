"""One package name (docs/DESIGN.md, "The layout"): what pyproject.toml installs matches the folders,
the checkout's links point at them, and the bare folder names refuse to import.

The installed side (a regular ``pip install .`` beside PyPI's ``translators``) is proven by
``.ci/check-install.sh``, which ``.ci/run`` calls.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def setuptools_table() -> dict[str, object]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert isinstance(table, dict)
    return table


def test_every_room_is_installed_and_nothing_else() -> None:
    folders = {"crossfeed"}
    for top in ("proxy", "translators"):
        for init in (ROOT / top).rglob("__init__.py"):
            folders.add("crossfeed." + ".".join(init.parent.relative_to(ROOT).parts))
    assert set(setuptools_table()["packages"]) == folders  # type: ignore[arg-type]


def test_the_folders_are_mapped_under_one_name() -> None:
    assert setuptools_table()["package-dir"] == {
        "crossfeed": "crossfeed",
        "crossfeed.proxy": "proxy",
        "crossfeed.translators": "translators",
    }
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"crossfeed": "crossfeed.proxy.cli.main:main"}


def test_the_checkout_links_point_at_the_folders() -> None:
    for name in ("proxy", "translators"):
        link = ROOT / "crossfeed" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", link
        assert link.resolve() == (ROOT / name).resolve()


def test_a_bare_folder_name_refuses_to_import() -> None:
    for name in ("proxy", "translators"):
        out = subprocess.run(
            [sys.executable, "-c", f"import {name}"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
        assert out.returncode == 1, out
        assert f"ImportError: import crossfeed.{name}, not {name}" in out.stderr, out.stderr


def test_python_dash_m_crossfeed_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "crossfeed", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.startswith("crossfeed "), out
