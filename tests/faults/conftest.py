"""The fault suite's fixture: the fault upstream on a real port. Everything else the suite shares is
tests/faults/harness.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.faults.fault_upstream import FaultUpstream


@pytest.fixture
async def fault_upstream() -> AsyncIterator[FaultUpstream]:
    up = FaultUpstream()
    await up.start()
    yield up
    await up.close()
