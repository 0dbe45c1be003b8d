"""The repository's copy of the shared captures is the shared captures, unedited."""

from __future__ import annotations

import pytest

from tests.support.captures import CAPTURES, SHARED


def _files(root):  # type: ignore[no-untyped-def]
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_copy_has_the_streams_and_their_readme() -> None:
    files = _files(CAPTURES)
    assert any(str(p).startswith("chat/") for p in files) and any(str(p).startswith("responses/") for p in files)
    assert "README.md" in {str(p) for p in files}


def test_the_copy_is_byte_for_byte_the_shared_captures() -> None:
    if not SHARED.is_dir():
        pytest.skip(f"no shared captures at {SHARED} to compare with (a clone of the repository alone)")
    copy, shared = _files(CAPTURES), _files(SHARED)
    missing = sorted(str(p) for p in shared.keys() - copy.keys())
    extra = sorted(str(p) for p in copy.keys() - shared.keys())
    changed = sorted(str(p) for p in copy.keys() & shared.keys() if copy[p] != shared[p])
    assert not (missing or extra or changed), f"missing {missing}, not in shared {extra}, edited {changed}"
