"""The frames of a run written at once (translators/run_frames.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import crossfeed.translators.run_frames as run_frames
from crossfeed.translators.run_frames import frames, numbers


def test_the_table_of_numbers_grows_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_frames, "_WRITTEN", [])
    monkeypatch.setattr(run_frames, "_WRITTEN_MAX", 2000)
    assert numbers(8, 4) == [b"8", b"9", b"10", b"11"]
    assert len(run_frames._WRITTEN) == 1024
    assert numbers(1020, 10) == [b"%d" % i for i in range(1020, 1030)]
    assert len(run_frames._WRITTEN) == 2000
    assert numbers(1995, 10) == [b"%d" % i for i in range(1995, 2005)]  # past the table's end
    assert len(run_frames._WRITTEN) == 2000
    assert numbers(5, 0) == []


_parts = st.lists(st.binary(max_size=5), max_size=8)


@given(st.binary(max_size=4), _parts, st.binary(max_size=4), _parts, st.binary(max_size=4))
def test_frames_are_each_pair_between_lead_and_close(
    lead: bytes, first: list[bytes], mid: bytes, second: list[bytes], close: bytes
) -> None:
    want = b"".join(lead + a + mid + b + close for a, b in zip(first, second, strict=False))
    assert frames(lead, first, mid, second, close, close + lead) == want
