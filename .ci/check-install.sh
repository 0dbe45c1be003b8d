#!/usr/bin/env bash
# crossfeed claims one name in site-packages. Proof: a virtual environment that already has PyPI's
# `translators` (an unrelated, popular library) gets a regular (non-editable) `pip install .` of
# crossfeed; afterwards both import as themselves and `crossfeed demo --no-sdk` runs. Run from
# outside the checkout so that nothing is imported from the working tree.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install -q translators
"$py" -m pip install -q "$repo"
cd "$work"
# PyPI's translators looks up its region on the internet when imported unless told.
export translators_default_region=EN
"$py" - <<'PY'
import importlib.metadata as md
import sys
from pathlib import Path

import translators

import crossfeed
from crossfeed import proxy
from crossfeed import translators as ours
from crossfeed.translators.forward.machine import ChatToResponsesStream

site = Path(translators.__file__).resolve().parents[1]
problems = []
if not hasattr(translators, "translate_text"):
    problems.append(f"`import translators` is not PyPI's translators: {translators.__file__}")
for mod in (crossfeed, proxy, ours):
    if not Path(mod.__file__).resolve().is_relative_to(site / "crossfeed"):
        problems.append(f"{mod.__name__} imported from {mod.__file__}, not {site / 'crossfeed'}")
tops = {name for name, dists in md.packages_distributions().items() if "crossfeed" in dists}
if tops != {"crossfeed"}:
    problems.append(f"crossfeed installs the top-level names {sorted(tops)}, not only 'crossfeed'")
# the inspector's page (package data, proxy/http/inspector_page/) is in the regular install
page = Path(proxy.__file__).resolve().parent / "http" / "inspector_page"
for name in ("index.html", "app.js", "style.css"):
    if not (page / name).is_file() or not (page / name).stat().st_size:
        problems.append(f"the installed package has no inspector page file {page / name}")
if problems:
    print("check-install: FAILED\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"check-install: translators {md.version('translators')} and crossfeed {md.version('crossfeed')} side by side; "
      f"crossfeed claims only {sorted(tops)}; {ChatToResponsesStream.__module__} imports; "
      f"the inspector's page is installed")
PY
"$work/venv/bin/crossfeed" demo --no-sdk > "$work/demo.log" 2>&1 || { cat "$work/demo.log"; echo "check-install: crossfeed demo --no-sdk failed" >&2; exit 1; }
"$py" -m crossfeed --version
tail -n 3 "$work/demo.log"
echo "check-install: passed"
