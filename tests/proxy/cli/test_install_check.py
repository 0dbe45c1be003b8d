"""A neighbour distribution shipping a package named ``crossfeed`` is pointed out; ``proxy`` and
``translators`` from other distributions no longer touch crossfeed."""

from __future__ import annotations

import pytest

from crossfeed.proxy.cli import install_check


def test_crossfeed_alone_is_quiet() -> None:
    assert install_check.foreign_owners() == {}
    assert install_check.warning() is None


def test_a_neighbour_under_our_names_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        install_check,
        "packages_distributions",
        lambda: {
            "crossfeed": ["crossfeed", "crossfeed-tools"],
            "proxy": ["proxy.py"],
            "translators": ["translators"],
            "yaml": ["PyYAML"],
        },
    )
    assert install_check.foreign_owners() == {"crossfeed": ["crossfeed-tools"]}
    text = install_check.warning()
    assert text is not None and "'crossfeed' also from crossfeed-tools" in text and "virtual environment" in text
