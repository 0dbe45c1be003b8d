"""Fixtures shared by the rooms of tests/proxy/."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.search import PAGE_A as A
from tests.fakes.search import PAGE_B as B
from tests.fakes.search import FakeSearch


@pytest.fixture
async def fake_search() -> AsyncIterator[FakeSearch]:
    f = FakeSearch(
        pages={
            "*": [
                (A, "  A   title\n", "x" * 5000),
                ("javascript:alert(1)", "bad", ""),
                ("ftp://c.example/", "ftp", ""),
                (B, "", "b"),
                (A, "dup", "dup"),
            ]
        }
    )
    await f.start()
    yield f
    await f.close()
