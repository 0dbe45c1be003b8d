"""Golden transcripts, reverse direction: Responses streams -> chat completion chunks.

Each case directory under ``cases/responses_to_chat/`` holds ``request.json`` (the chat client's
request this stream answers; ``stream_options.include_usage`` decides the usage chunk), either
``source.txt`` (a capture under ../shared/captures) or ``upstream.sse`` (a hand-made stream for a
case no capture covers), and ``expected.jsonl`` (one chunk per line; the driver's ``data: [DONE]``
is not part of it). Each case is fed whole, byte by byte and at 20 seeded random split points
through the production ``Pump``: the outputs must be identical, match the expected file and pass
the strict chat validator. ``CROSSFEED_UPDATE_GOLDEN=1`` rewrites the expected files for review.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest

from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import accumulate_chat, validate_chat_chunks
from translators.chat_bodies import ResponseFailed, response_to_chat_completion
from translators.chat_request import chat_request_to_responses, include_usage
from translators.ids import SequentialIds
from translators.options import MappingOptions
from translators.pump import Pump
from translators.responses_to_chat import ResponsesToChatStream
from translators.sse import SSEDecoder

CASES = Path(__file__).parent / "cases" / "responses_to_chat"
CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures"
UPDATE = os.environ.get("CROSSFEED_UPDATE_GOLDEN") == "1"
OPTIONS = MappingOptions()


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


def upstream_bytes(case: Path) -> bytes:
    if (case / "upstream.sse").exists():
        return (case / "upstream.sse").read_bytes()
    path = CAPTURES / (case / "source.txt").read_text().strip()
    if not path.exists():
        pytest.skip(f"capture {path} not available")
    return path.read_bytes()


def request_of(case: Path) -> dict:
    return orjson.loads((case / "request.json").read_bytes())


def translate(case: Path, pieces: list[bytes]) -> tuple[list[dict], ResponsesToChatStream]:
    request = request_of(case)
    machine = ResponsesToChatStream(include_usage=include_usage(request), options=OPTIONS,
                                    ids=SequentialIds(), now=lambda: 1_700_000_000, model=request["model"])
    pump = Pump(machine)
    out: list[dict] = []
    for piece in pieces:
        out += pump.feed(piece)
    out += pump.finish()
    # Render and parse back, exactly as the client receives them.
    return [orjson.loads(orjson.dumps(c)) for c in out], machine


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_golden(case: Path) -> None:
    data = upstream_bytes(case)
    whole, _ = translate(case, [data])
    validate_chat_chunks(whole)
    expected_file = case / "expected.jsonl"
    if UPDATE or not expected_file.exists():
        expected_file.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in whole))
        if not UPDATE:
            pytest.fail(f"wrote a new {expected_file}; review it and run again")
    expected = [orjson.loads(line) for line in expected_file.read_bytes().splitlines() if line.strip()]
    assert whole == expected
    assert translate(case, byte_by_byte(data))[0] == whole
    for seed in range(20):
        assert translate(case, split_points(data, seed, 1 + seed * 3))[0] == whole, f"split seed {seed}"


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_usage_chunk_follows_the_request(case: Path) -> None:
    """The usage chunk is there exactly when the client asked and the upstream reported usage."""
    chunks, machine = translate(case, [upstream_bytes(case)])
    if chunks[-1].get("error"):
        return
    wanted = include_usage(request_of(case)) and "usage_missing" not in machine.diagnostics
    validate_chat_chunks(chunks, expect_usage=wanted)


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_assumed_request_is_valid(case: Path) -> None:
    """The chat request each case assumes is one the reverse request mapping accepts."""
    mapped = chat_request_to_responses(request_of(case), OPTIONS)
    assert mapped["stream"] is True and mapped["store"] is False


def _terminal_response(data: bytes) -> dict | None:
    decoder = SSEDecoder()
    for _, payload in [*decoder.feed(data), *decoder.finish()]:
        if payload != b"[DONE]":
            obj = orjson.loads(payload)
            if obj.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                return obj["response"]
    return None


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_stream_agrees_with_final_response(case: Path) -> None:
    """What a chat client accumulates from the stream equals the non-streaming translation of the
    upstream's own final Response (two independent paths over the same answer)."""
    data = upstream_bytes(case)
    final = _terminal_response(data)
    if final is None:
        pytest.skip("no terminal Response in this stream")
    chunks, _ = translate(case, [data])
    acc = accumulate_chat(chunks)
    try:
        completion = response_to_chat_completion(final, options=OPTIONS, ids=SequentialIds())
    except ResponseFailed as exc:
        assert acc["error"] is not None
        assert (acc["error"]["message"], acc["error"]["code"]) == (exc.body["error"]["message"], exc.body["error"]["code"])
        return
    choice = completion["choices"][0]
    message = choice["message"]
    assert acc["finish_reason"] == choice["finish_reason"]
    assert (acc["content"] or None) == message["content"]
    assert acc["refusal"] == message["refusal"]
    assert acc["reasoning"] == message.get("reasoning_content")
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             if c["type"] == "function" else
             {"id": c["id"], "name": c["custom"]["name"], "arguments": json.dumps(c["custom"]["input"], ensure_ascii=False)}
             for c in message.get("tool_calls", [])]
    assert acc["tool_calls"] == calls
    annotations = [a for c in chunks for ch in c.get("choices", []) for a in ch["delta"].get("annotations", [])]
    assert annotations == message.get("annotations", [])
    assert acc["usage"] is None or acc["usage"] == completion.get("usage")
