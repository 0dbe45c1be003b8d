"""The official Node SDK (npm ``openai``) the Node tests drive: where .ci/install-node-sdk.sh put
it, checked to be the pinned version (else skipped locally, a failure in CI)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.services import require_service

NODE_OPENAI_VERSION = "7.59.0"  # keep in sync with .ci/install-node-sdk.sh
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def node_sdk() -> Path:
    """The directory .ci/install-node-sdk.sh installed the pinned SDK into."""
    directory = Path(os.environ.get("CROSSFEED_NODE_OPENAI_DIR") or REPO / ".tools" / "node-openai")
    pkg = directory / "node_modules" / "openai" / "package.json"
    version = None
    if pkg.is_file():
        version = json.loads(pkg.read_text()).get("version")
    if (
        shutil.which("node") is None
        or version != NODE_OPENAI_VERSION
        or not (directory / "node_modules" / "ws" / "package.json").is_file()
    ):
        require_service(
            f"the Node SDK openai@{NODE_OPENAI_VERSION}",
            f"bash .ci/install-node-sdk.sh (found {version or 'nothing'} in {directory})",
        )
    return directory
