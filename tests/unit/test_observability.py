"""The token counts the summary line and ``crossfeed_tokens_total`` take from a usage object."""

from __future__ import annotations

from proxy.observability import usage_counts, usage_summary

RESPONSES_USAGE = {
    "input_tokens": 11,
    "input_tokens_details": {"cached_tokens": 3},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 5},
    "total_tokens": 18,
}


def test_usage_counts_take_only_whole_non_negative_numbers() -> None:
    assert usage_counts(RESPONSES_USAGE) == {"in": 11, "out": 7}
    assert usage_counts({"prompt_tokens": 4, "completion_tokens": 2}) == {"in": 4, "out": 2}
    assert usage_counts({"input_tokens": "11", "output_tokens": -3}) == {"in": 0, "out": 0}
    assert usage_counts({"input_tokens": True, "output_tokens": 2.5}) == {"in": 0, "out": 0}
    assert usage_counts("nonsense") is None and usage_counts(None) is None
    assert usage_summary({"usage": RESPONSES_USAGE}) == {"in": 11, "out": 7} and usage_summary(None) is None
