"""Each kind of quirk crossfeed repairs, end to end (issue 37): a real turn through the proxy on a
backend with that quirk, with the inspector on and the log at debug. The inspector marks the turn
with the kind, and the debug log has its ``translation.quirk`` line (the same kind, count and leg).
The kinds themselves, machine by machine, are tests/translators/test_quirk_kinds.py.

  think_tags_split    a chat backend that writes its reasoning as ``<think>`` tags (think_tags)
  tool_markup_parsed  a chat backend that writes a tool call as markup in its text (tool_markup)
  stream_renumbered   a Responses backend whose stream is not numbered (normalize_stream)
  stop_sequence       a chat client's ``stop`` on a Responses backend (the reverse turn)
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import structlog

from crossfeed.proxy.runtime.logs import configure_logging
from tests.fakes.upstream import FakeUpstream, SSEReply
from tests.support.app_server import running_proxy
from tests.support.chat_chunks import DONE, chunk
from tests.support.inspector_turns import ADMIN_KEY, BACKEND_KEY, CLIENT_KEY, ENVIRON, TOOLS, settings
from tests.support.responses_replies import answer
from tests.support.validators import validate_chat_sse, validate_responses_sse
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)
GUARD = 30.0  # seconds: hang guard of every wait; what is awaited takes milliseconds
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
RESPONSES_BODY: dict[str, Any] = {"model": "m", "input": "hi", "stream": True}
CHAT_BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@dataclass
class Case:
    more: dict[str, Any]  # the upstream's settings that make the quirk visible
    stream: bytes  # what the backend answers
    path: str = "/responses"  # the client's route
    body: dict[str, Any] = field(default_factory=lambda: dict(RESPONSES_BODY))


def chat_stream(*contents: str) -> bytes:
    body = chunk({"role": "assistant", "content": ""}) + b"".join(chunk({"content": c}) for c in contents)
    return body + chunk({}, "stop", usage=(5, 3)) + DONE


CASES = {
    "think_tags_split": Case({"upstream.think_tags": True}, chat_stream("<think>let me", " see</think>", "Hello")),
    "tool_markup_parsed": Case(
        {"upstream.tool_markup": "hermes"},
        chat_stream('Sure. <tool_call>{"name": "lookup", ', '"arguments": {"q": "x"}}</tool_call>'),
        body={**RESPONSES_BODY, "tools": TOOLS},
    ),
    "stream_renumbered": Case(
        {"upstream.api": "responses", "upstream.normalize_stream": True},
        b"".join(answer(["Hel", "lo."])),  # llama-server's frames: no sequence_number
    ),
    "stop_sequence": Case(
        {"upstream.api": "responses"},
        b"".join(answer(["It is ", "done END and", " more"])),
        path="/chat/completions",
        body={**CHAT_BODY, "stop": ["END"]},
    ),
}


def log_lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.startswith("{")]


@pytest.mark.parametrize("kind", sorted(CASES))
async def test_a_quirk_is_marked_in_the_inspector_and_logged_at_debug(upstream: FakeUpstream, kind: str) -> None:
    case = CASES[kind]
    request_id = f"quirk-{kind}"
    buf = io.StringIO()
    configure_logging("debug", "json", stream=buf)
    try:
        async with running_proxy(settings(upstream, **case.more), environ=ENVIRON) as handle:
            upstream.reply(SSEReply(case.stream, max_piece=19))
            headers = {"Authorization": f"Bearer {CLIENT_KEY}", "X-Request-ID": request_id}
            async with aiohttp.ClientSession() as s:
                async with s.post(handle.base_url + case.path, json=case.body, headers=headers) as r:
                    raw = await r.read()
                    assert r.status == 200, raw
                (validate_chat_sse if case.path == "/chat/completions" else validate_responses_sse)(raw)
                async with s.get(handle.url + "/inspector/api/turns", headers=ADMIN) as r:
                    (turn,) = (await r.json())["turns"]
                async with s.get(f"{handle.url}/inspector/api/turns/{turn['id']}", headers=ADMIN) as r:
                    shown = await r.json()
            assert await wait_until(
                lambda: any(
                    e.get("event") == "request.completed" and e.get("request_id") == request_id for e in log_lines(buf)
                ),
                GUARD,
            )
    finally:
        configure_logging("info", "json", stream=io.StringIO())
        structlog.reset_defaults()
    # the inspector: the turn is counted and marked with the kind, at the leg it was repaired in
    assert turn["request_id"] == request_id and turn["quirks"] >= 1
    marks = [m for m in shown["quirk_marks"] if m["kind"] == kind]
    assert len(marks) == 1, shown["quirk_marks"]
    mark = marks[0]
    assert mark["count"] >= 1 and mark["leg"] == 1
    # the debug log: one translation.quirk line of the same kind, count and leg, for this turn
    logged = [e for e in log_lines(buf) if e["event"] == "translation.quirk" and e.get("request_id") == request_id]
    lines = [e for e in logged if e["kind"] == kind]
    assert len(lines) == 1, logged
    line = lines[0]
    assert line["level"] == "debug" and (line["count"], line["leg"]) == (mark["count"], mark["leg"])
    assert ("read" in line) == ("read" in mark) and line.get("read") == mark.get("read")
    text = buf.getvalue()
    assert BACKEND_KEY not in text and CLIENT_KEY not in text
