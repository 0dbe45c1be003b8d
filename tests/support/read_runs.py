"""What the tests of the machines' runs (a read of text frames taken at once) share: every read
offered to ``feed_run``, and a spy on a decode. Used by tests/translators/forward/test_text_frames.py
and tests/translators/reverse/test_text_runs.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest

import crossfeed.translators.pump as pump_mod


@pytest.fixture(autouse=True)
def every_read_is_offered() -> Iterator[None]:
    """The pump offers runs only to reads of 1 KiB or more; here to every read, so that short
    streams and reads cut anywhere take the run too (each module's
    test_a_short_read_is_not_offered checks the bound itself)."""
    with mock.patch.object(pump_mod, "RUN_MIN", 0):
        yield


def calls_to(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Any]:
    """The first argument of every call to ``owner.name`` from now on (a module's decode:
    which frames took the decode)."""
    seen: list[Any] = []
    real: Callable[..., Any] = getattr(owner, name)

    def spy(first: Any, *rest: Any) -> Any:
        seen.append(first)
        return real(first, *rest)

    monkeypatch.setattr(owner, name, spy)
    return seen
