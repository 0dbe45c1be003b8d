"""External services a test needs (redis, node, a built llama.cpp...): absent locally, the test is
skipped; absent in CI, it fails."""

from __future__ import annotations

import os

import pytest


def require_service(name: str, hint: str) -> None:
    """Skip locally when an external service is missing; in CI its absence is a failure."""
    if os.environ.get("CI"):
        pytest.fail(f"{name} is required in CI but is not available: {hint}")
    pytest.skip(f"{name} not available: {hint}")
