"""Where things are, for tests at any depth: the repository's root and the tests folder."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent  # the repository: proxy/, translators/, bench/, deploy/, README.md
