"""The repository's copy of the shared captures is the shared captures, unedited.

``tests/fixtures/captures.sha256`` (beside the copy, not in it) holds each file's SHA-256 as it
was copied: a clone checks its copy against it; where the shared captures are beside the
repository they are checked against it too, so the copy and its source can never drift apart."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.support.captures import CAPTURES, SHARED

MANIFEST = CAPTURES.parent / "captures.sha256"


def _files(root):  # type: ignore[no-untyped-def]
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_copy_has_the_streams_and_their_readme() -> None:
    files = _files(CAPTURES)
    assert any(str(p).startswith("chat/") for p in files) and any(str(p).startswith("responses/") for p in files)
    assert "README.md" in {str(p) for p in files}


def _manifest() -> dict[Path, str]:
    out = {}
    for line in MANIFEST.read_text(encoding="utf-8").splitlines():
        digest, name = line.split(maxsplit=1)
        out[Path(name.removeprefix("./"))] = digest
    return out


def _differences(root: Path) -> str:
    files = {p: hashlib.sha256(data).hexdigest() for p, data in _files(root).items()}
    want = _manifest()
    missing = sorted(str(p) for p in want.keys() - files.keys())
    extra = sorted(str(p) for p in files.keys() - want.keys())
    changed = sorted(str(p) for p in want.keys() & files.keys() if want[p] != files[p])
    return f"missing {missing}, not in the manifest {extra}, edited {changed}" if missing or extra or changed else ""


def test_the_copy_is_byte_for_byte_the_shared_captures() -> None:
    """The copy against the manifest; the shared captures against it too, where they are."""
    assert len(_manifest()) >= 10
    assert not _differences(CAPTURES), _differences(CAPTURES)
    if SHARED.is_dir():
        assert not _differences(SHARED), f"the shared captures changed since they were copied: {_differences(SHARED)}"
