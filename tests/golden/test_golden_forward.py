"""Golden transcripts, forward direction: recorded chat streams -> Responses events.

Each case directory under ``cases/chat_to_responses/`` holds ``request.json`` (the client's
Responses request), either ``source.txt`` (a capture under tests/fixtures/captures) or ``upstream.sse``
(a hand-made stream for a case no capture covers), optional ``tools.json`` (the ToolContext the
request mapping would produce), an empty ``think_tags`` file (the upstream option is on), a
``tool_markup`` file naming the profile's markup dialect (with ``markup.json``: the text and the
calls a reader of that markup finds, written by hand), and ``expected.jsonl`` (one event per line). Each case is fed whole,
byte by byte, and at 20 seeded random split points: the outputs must be identical, match the
expected file, and pass the strict validator; fed whole with the typed frame decoding off, the
output must be the same too. The events are what a client receives: the machine runs in wire
mode, as the proxy runs it, its outputs are rendered into the SSE body and parsed back; and that
body is byte for byte the body of the same stream with every event a dict (``wire=False``). ``CROSSFEED_UPDATE_GOLDEN=1`` rewrites the
expected files for review in the diff.

The expected files are the code's own output, reviewed once; so each capture is also checked
against what a client would accumulate from the upstream chunks directly (``test_agrees_with_upstream``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile, ToolContext
from crossfeed.translators.pump import Pump
from crossfeed.translators.sse import render_responses
from tests.support.captures import data_objects, read_capture
from tests.support.golden import check_expected
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import accumulate_chat, sse_frames, validate_responses_events

CASES = Path(__file__).parent / "cases" / "chat_to_responses"


def markup_of(case: Path) -> Any:
    marker = case / "tool_markup"
    return marker.read_text().strip() if marker.exists() else None


def upstream_bytes(case: Path) -> bytes:
    if (case / "upstream.sse").exists():
        return (case / "upstream.sse").read_bytes()
    return read_capture((case / "source.txt").read_text().strip())


def body(case: Path, pieces: list[bytes], *, typed_frames: bool = True, wire: bool = True) -> bytes:
    """The SSE body a client receives for ``pieces`` of the case's upstream stream."""
    request = orjson.loads((case / "request.json").read_bytes())
    tools = ToolContext()
    if (case / "tools.json").exists():
        t = orjson.loads((case / "tools.json").read_bytes())
        tools = ToolContext(
            custom_tools=frozenset(t.get("custom_tools", ())),
            namespaced={k: tuple(v) for k, v in t.get("namespaced", {}).items()},
        )
    sealer = (lambda text, details: f"sealed:{len(text)}") if (case / "seal").exists() else None
    machine = ChatToResponsesStream(
        request,
        ids=SequentialIds(),
        now=lambda: 1_700_000_000,
        tools=tools,
        seal_reasoning=sealer,
        profile=BackendProfile(think_tags=(case / "think_tags").exists(), tool_markup=markup_of(case)),
        wire=wire,
    )
    pump = Pump(machine, typed_frames=typed_frames)
    out = machine.start()
    for piece in pieces:
        out += pump.feed(piece)
    out += pump.finish()
    return render_responses(out)


def translate(case: Path, pieces: list[bytes], **kw: Any) -> list[dict]:
    """The events of ``body``, parsed back as the client parses them."""
    events = []
    for name, data in sse_frames(body(case, pieces, **kw)):
        event = orjson.loads(data)
        assert name == event["type"]
        events.append(event)
    return events


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_golden(case: Path) -> None:
    data = upstream_bytes(case)
    whole = translate(case, [data])
    validate_responses_events(whole)
    expected_file = case / "expected.jsonl"
    check_expected(expected_file, whole)
    # The typed per-frame decoding (chunk_frames.py) and plain JSON into ``feed`` agree.
    assert translate(case, [data], typed_frames=False) == whole
    # The frames the machine renders itself (wire mode) are the bytes of the dicts' frames.
    assert body(case, [data]) == body(case, [data], wire=False)
    assert translate(case, byte_by_byte(data)) == whole
    for seed in range(20):
        assert translate(case, split_points(data, seed, 1 + seed * 3)) == whole, f"split seed {seed}"


# -- independent check: the upstream chunks accumulated directly, against the final Response ---------

# kimi-k2 on Avian sends whitespace-only content between its parallel tool calls; the translator
# drops it on purpose rather than open an empty-looking message between the calls
# (translators/forward/machine.py, ``_text``).
WHITESPACE_AFTER_CALLS_DROPPED = {"avian-kimik25-reasoning-details-parallel-tools"}
RESPONSE_STATUS = {
    "stop": ("completed", None),
    "tool_calls": ("completed", None),
    "length": ("incomplete", "max_output_tokens"),
    "content_filter": ("incomplete", "content_filter"),
}


def _details_text(details: Any) -> str | None:
    """Readable text of ``reasoning_details`` entries; encrypted entries carry none."""
    entries = [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []
    texts = [t for t in (d.get("text") or d.get("summary") for d in entries) if isinstance(t, str)]
    return "".join(texts) if texts else None


def _normalized(chunk: dict) -> dict:
    """One upstream chunk in the plain shape ``accumulate_chat`` reads, each provider quirk (see
    tests/fixtures/captures/README.md) undone explicitly; reasoning goes to ``_reasoning``."""
    if chunk.get("error"):
        # An error chunk ends the answer; the usage it may carry (openrouter-minimax-error-midstream)
        # is still reported on the failed Response.
        return {"error": chunk["error"], "usage": chunk.get("usage")}
    # Groq reports usage under x_groq (groq-compound-executed-tools, groq-r1distill-inline-think).
    usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage")
    choices = []
    # One Response is one answer: choices other than index 0 are ignored
    # (openai-gpt4o-n3-multiple-choices).
    for choice in [c for c in chunk.get("choices") or [] if c.get("index", 0) == 0]:
        delta = dict(choice.get("delta") or {})
        content = delta.get("content")
        if isinstance(content, list):  # Mistral: content parts; `thinking` parts are reasoning
            delta["content"] = "".join(p["text"] for p in content if p.get("type") == "text")
            delta["reasoning_content"] = (
                "".join(t["text"] for p in content if p.get("type") == "thinking" for t in p["thinking"]) or None
            )
        # Reasoning: the first present of reasoning_content, reasoning, reasoning_details (providers
        # that send the same text in two spellings, like Avian or OpenRouter, are not doubled).
        for text in (
            delta.get("reasoning_content"),
            delta.get("reasoning"),
            _details_text(delta.get("reasoning_details")),
        ):
            if isinstance(text, str):
                delta["_reasoning"] = text
                break
        # Mistral sends tool calls without `index`: their position in the list is the index.
        delta["tool_calls"] = [{"index": i, **f} for i, f in enumerate(delta.get("tool_calls") or [])]
        choices.append({**choice, "delta": delta})
    return {"choices": choices, "usage": usage}


def upstream_answer(case: Path, data: bytes) -> dict:
    """What a client accumulates from the upstream chat stream, read without the translator."""
    chunks = [_normalized(chunk) for chunk in data_objects(data)]
    if case.name in WHITESPACE_AFTER_CALLS_DROPPED:
        called = False
        for chunk in chunks:
            for delta in [choice["delta"] for choice in chunk["choices"]]:
                called = called or bool(delta["tool_calls"])
                if called and isinstance(delta.get("content"), str) and not delta["content"].strip():
                    del delta["content"]
    acc = accumulate_chat(chunks, reasoning_field="_reasoning")
    text, reasoning = acc["content"] or "", acc["reasoning"]
    if markup_of(case):  # the calls are in the text: what the hand-written markup.json says is there
        found = orjson.loads((case / "markup.json").read_bytes())
        text = found["text"]
        acc["tool_calls"] = [{"name": n, "arguments": a} for n, a in found["calls"]]
    if (case / "think_tags").exists():  # the upstream's think_tags option splits inline <think> off
        think = re.fullmatch(r"\s*<think>(.*?)</think>\s*(.*)", text, re.DOTALL)
        assert think, "a think_tags case whose content has no <think>...</think>"
        reasoning, text = (reasoning or "") + think[1], think[2]
    if acc["error"] is not None:
        status = ("failed", None)
    elif acc["finish_reason"] is None:  # no finish_reason (snowflake): completed if [DONE] came
        said = text or reasoning or acc["refusal"] or acc["tool_calls"]  # ... after an answer
        status = ("completed", None) if b"data: [DONE]" in data and said else ("failed", None)
    else:
        status = RESPONSE_STATUS[acc["finish_reason"]]
    usage = acc["usage"]
    if usage is None:  # nothing reported upstream: a failed Response says so, the others count 0
        tokens = None if status[0] == "failed" else (0, 0)
    else:
        tokens = (usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
    return {
        "status": status,
        "text": text,
        "refusal": acc["refusal"] or "",
        "reasoning": reasoning,
        "calls": [(c["name"], c["arguments"]) for c in acc["tool_calls"]],
        "tokens": tokens,
    }


def response_answer(response: dict) -> dict:
    """The same fields, read from the translated final Response."""
    output = response["output"]
    parts = [p for item in output if item["type"] == "message" for p in item["content"]]
    reasoning = [
        p["text"]
        for item in output
        if item["type"] == "reasoning"
        for p in [*(item.get("summary") or []), *(item.get("content") or [])]
    ]
    usage = response.get("usage")
    return {
        "status": (response["status"], (response.get("incomplete_details") or {}).get("reason")),
        "text": "".join(p["text"] for p in parts if p["type"] == "output_text"),
        "refusal": "".join(p["refusal"] for p in parts if p["type"] == "refusal"),
        "reasoning": "".join(reasoning) if reasoning else None,
        "calls": [(item["name"], item["arguments"]) for item in output if item["type"] == "function_call"],
        "tokens": usage and (usage["input_tokens"], usage["output_tokens"]),
    }


@pytest.mark.parametrize("case", [c for c in case_dirs() if (c / "source.txt").exists()], ids=lambda p: p.name)
def test_agrees_with_upstream(case: Path) -> None:
    """The final Response holds what the upstream chunks say, accumulated independently."""
    data = upstream_bytes(case)
    final = translate(case, [data])[-1]
    assert final["type"] in ("response.completed", "response.incomplete", "response.failed")
    assert response_answer(final["response"]) == upstream_answer(case, data)
