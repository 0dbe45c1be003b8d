"""The backend profile is the one place for dialects: every field of ``BackendProfile`` comes from an
upstream's configuration (a switch that the config cannot set would be a dead quirk), and a switch
for the other API is refused. (That the typed chunk structs declare every field the forward machine
reads is tests/translators/forward/test_chunk_fields.py.)"""

from __future__ import annotations

import dataclasses

import pytest

from crossfeed.proxy.runtime.config import Upstream
from crossfeed.translators.options import BackendProfile

NON_DEFAULT = {
    "reasoning_field": "reasoning",
    "max_tokens_field": "max_tokens",
    "system_role": "developer",
    "system_placement": "user",
    "compaction_prompt": "Summarise.",
    "think_tags": True,
    "tool_markup": "hermes",
    "normalize_stream": True,
    "min_output_tokens": 1,
    "drop_params": ("seed", "logit_bias"),
    "reasoning_effort_map": (("minimal", "low"), ("xhigh", "omit")),
}


CONFIG_NAME = {"system_placement": "system_messages"}
# Profile values the config spells otherwise: the effort map is a table in the config, pairs in the profile.
CONFIG_VALUE = {"reasoning_effort_map": dict}


def test_every_profile_field_is_configurable() -> None:
    fields = {f.name for f in dataclasses.fields(BackendProfile)}
    assert fields == set(NON_DEFAULT), "a new profile field needs a config key and a line here"
    responses_only = {"normalize_stream", "min_output_tokens", "drop_params"}
    chat_only = {"think_tags", "tool_markup", "reasoning_effort_map"}
    for api, skip in (("chat", responses_only), ("responses", chat_only)):
        given = {k: v for k, v in NON_DEFAULT.items() if k not in skip}
        up = Upstream(api=api, **{CONFIG_NAME.get(k, k): CONFIG_VALUE.get(k, lambda v: v)(v) for k, v in given.items()})
        got = dataclasses.asdict(up.profile)
        assert {k: got[k] for k in given} == given


def test_a_switch_for_the_other_api_is_refused() -> None:
    with pytest.raises(ValueError, match='tool_markup only applies to api = "chat" upstreams'):
        Upstream(api="responses", tool_markup="hermes")
    with pytest.raises(ValueError, match='normalize_stream only applies to api = "responses" upstreams'):
        Upstream(api="chat", normalize_stream=True)
