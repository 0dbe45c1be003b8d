"""The allocator's thresholds (proxy/runtime/allocator.py): what ``tune_allocator`` asks of the C
library, and, on glibc, that a large body's parse then faults no pages in."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from crossfeed.proxy.runtime.allocator import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, MIB, _glibc, tune_allocator
from tests.support.paths import ROOT


class FakeLibc:
    def __init__(self, answer: int = 1) -> None:
        self.answer = answer
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: object) -> int:
        self.calls.append((param, getattr(value, "value", value)))
        return self.answer


def test_both_thresholds_are_set_to_what_is_kept() -> None:
    libc = FakeLibc()
    assert tune_allocator(64, libc) == "retain 64 MiB"
    assert libc.calls == [(M_MMAP_THRESHOLD, 64 * MIB), (M_TRIM_THRESHOLD, 64 * MIB)]


def test_zero_leaves_the_allocator_alone() -> None:
    libc = FakeLibc()
    assert tune_allocator(0, libc) == "off"
    assert libc.calls == []


def test_a_refusal_is_reported() -> None:
    assert tune_allocator(64, FakeLibc(answer=0)) == "refused"


# A body of about 3 MiB (1,500 strings of 2 KiB): orjson's parse buffer for it is about 38 MiB,
# above glibc's own mmap threshold ceiling (32 MiB). The page faults of the last five parses of six.
PARSES = """
import resource, sys
import orjson
from crossfeed.proxy.runtime.allocator import tune_allocator
print(tune_allocator(int(sys.argv[1])))
body = orjson.dumps({"input": [{"type": "message", "content": "x" * 2048 + str(i)} for i in range(1500)]})
orjson.loads(body)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    orjson.loads(body)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def _faults_per_parse(retain_mb: int) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}  # glibc's own tunables
    out = subprocess.run(
        [sys.executable, "-c", PARSES, str(retain_mb)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] if retain_mb == 0 else " ".join(out[:-1]), float(out[-1])


@pytest.mark.skipif(_glibc() is None, reason="glibc's mallopt only")
def test_on_glibc_a_large_body_is_parsed_without_page_faults() -> None:
    setting, tuned = _faults_per_parse(64)
    assert setting == "retain 64 MiB"
    assert tuned < 10, f"{tuned} page faults per parse of a 3 MiB body with the thresholds set"
    _, untouched = _faults_per_parse(0)
    if untouched < 100:
        pytest.skip(f"glibc's own thresholds already spare this parse ({untouched} faults): nothing to show")
    assert untouched > 10 * max(tuned, 1)
