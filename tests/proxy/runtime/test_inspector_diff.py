"""The inspector's rows of what changed (proxy/runtime/inspector_diff.py) and the session a turn
belongs to (proxy/runtime/sessions.py), as pure functions. The same on real turns:
tests/integration/test_inspector_changes.py."""

from __future__ import annotations

from crossfeed.proxy.runtime import sessions
from crossfeed.proxy.runtime.inspector_diff import changes, session_of


def by_field(client: dict[str, object], sent: dict[str, object]) -> dict[str, tuple[str, str]]:
    return {row["field"]: (row["change"], row["detail"]) for row in changes(client, sent)}


def test_a_field_the_backend_does_not_get_is_dropped() -> None:
    client = {"model": "m", "input": "hi", "metadata": {"a": "b"}, "include": [], "truncation": "auto"}
    rows = by_field(client, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False})
    assert rows["metadata"] == rows["include"] == rows["truncation"] == ("dropped", "not sent to the backend")
    assert "model" not in rows  # passed unchanged


def test_a_value_crossfeed_fills_in_is_defaulted() -> None:
    rows = by_field({"model": "m", "messages": []}, {"model": "m", "input": [], "store": False, "stream": False})
    assert rows["store"][0] == rows["stream"][0] == "defaulted"
    assert rows["store"][1].endswith(": False")
    rows = by_field({"tools": []}, {"tools": [], "parallel_tool_calls": True})
    assert rows["parallel_tool_calls"][0] == "defaulted"
    # a value the client sent is never defaulted: passed, or changed
    assert by_field({"stream": True}, {"stream": True}) == {}
    assert by_field({"store": True}, {"store": False})["store"][0] == "changed"
    # an addition that is not a default stays added
    assert (
        by_field({"stream": True}, {"stream": True, "stream_options": {"include_usage": True}})["stream_options"][0]
        == "added"
    )


def test_sessions_resolve_in_order() -> None:
    known = {"resp_2": ("chain", "resp_1")}
    assert sessions.resolve({"conversation": {"id": "conv_1"}}, {}, {}) == ("conversation", "conv_1")
    assert sessions.resolve({"previous_response_id": "resp_2"}, {"session_id": "s"}, known) == ("chain", "resp_1")
    assert sessions.resolve({"previous_response_id": "resp_9"}, {}, known) == ("chain", "resp_9")
    assert sessions.resolve({}, {"session_id": "codex-1"}, {}) == ("session", "codex-1")
    assert sessions.resolve({"prompt_cache_key": "k" * 300}, {}, {}) == ("session", "k" * 128)
    assert sessions.resolve({}, {}, {}) is None
    assert session_of({"conversation": "conv_1"}, {}, {}) == "conversation conv_1"
    assert session_of({"previous_response_id": "resp_2"}, {}, known) == "chain resp_1"
    assert session_of({}, {}, {}) is None
