"""A neighbour distribution shipping a package named ``proxy`` or ``translators`` is pointed out."""

from __future__ import annotations

import pytest

from proxy import install_check


def test_crossfeed_alone_is_quiet() -> None:
    assert install_check.foreign_owners() == {}
    assert install_check.warning() is None


def test_a_neighbour_under_our_names_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        install_check,
        "packages_distributions",
        lambda: {"proxy": ["crossfeed", "proxy.py"], "translators": ["crossfeed"], "yaml": ["PyYAML"]},
    )
    assert install_check.foreign_owners() == {"proxy": ["proxy.py"]}
    text = install_check.warning()
    assert text is not None and "'proxy' also from proxy.py" in text and "virtual environment" in text
