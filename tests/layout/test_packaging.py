"""One package name (docs/DESIGN.md, "The layout"): what pyproject.toml installs matches the folders,
the checkout's links point at them, and the bare folder names refuse to import.

The installed side (a regular ``pip install .`` beside PyPI's ``translators``) is proven by
``.ci/check-install.sh``, which ``.ci/run`` calls.
"""

from __future__ import annotations

import fnmatch
import os
import re
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


PAGE_FILES = ("index.html", "app.js", "style.css")


def test_the_inspector_page_is_package_data_without_a_cdn() -> None:
    """The inspector's page ships in the package (a regular install has it: ``.ci/check-install.sh``
    checks the installed files) and loads nothing from the network: no http(s) URL in its files."""
    data = setuptools_table()["package-data"]
    assert isinstance(data, dict)
    patterns = data.get("crossfeed.proxy.http", [])
    page = ROOT / "proxy" / "http" / "inspector_page"
    for name in PAGE_FILES:
        assert any(fnmatch.fnmatch(f"inspector_page/{name}", p) for p in patterns), (name, patterns)
        text = (page / name).read_text()
        found = re.findall(r"https?://\S*", text, flags=re.IGNORECASE)
        assert not found, (name, found)
    assert {p.name for p in page.iterdir()} == set(PAGE_FILES)
