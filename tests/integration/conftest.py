"""Fixtures of the integration tests beyond tests/conftest.py: the pinned Node SDK."""

from tests.support.node_sdk import node_sdk

__all__ = ["node_sdk"]
