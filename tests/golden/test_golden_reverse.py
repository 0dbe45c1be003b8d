"""Golden transcripts, reverse direction: Responses streams -> chat completion chunks.

Each case directory under ``cases/responses_to_chat/`` holds ``request.json`` (the chat client's
request this stream answers; ``stream_options.include_usage`` decides the usage chunk), either
``source.txt`` (a capture under tests/fixtures/captures, see ``tests/support/captures.py``) or
``upstream.sse`` (a hand-made stream for a case no capture covers), and ``expected.jsonl`` (one
chunk per line; the driver's ``data: [DONE]`` is not part of it). Each case is fed whole, byte by
byte and at 20 seeded random split points through the production ``Pump``: the outputs must be
identical, match the expected file and pass the strict chat validator. The chunks are what a
client receives: the machine runs in wire mode, as the proxy runs it, its outputs are rendered
into the SSE body and parsed back; and that body is byte for byte the body of the same stream
with every chunk a dict (``wire=False``).
``CROSSFEED_UPDATE_GOLDEN=1`` rewrites the expected files for review.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from crossfeed.translators.ids import SequentialIds
from crossfeed.translators.options import BackendProfile
from crossfeed.translators.pump import Pump
from crossfeed.translators.responses.fields import ResponseFailed
from crossfeed.translators.reverse.body import response_to_chat_completion
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.request import chat_request_to_responses, include_usage
from crossfeed.translators.sse import SSEDecoder, render_chat
from tests.support.captures import read_capture
from tests.support.golden import check_expected
from tests.support.splitting import byte_by_byte, split_points
from tests.support.validators import accumulate_chat, sse_frames, validate_chat_chunks

CASES = Path(__file__).parent / "cases" / "responses_to_chat"
OPTIONS = BackendProfile()


def case_dirs() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if p.is_dir())


def upstream_bytes(case: Path) -> bytes:
    if (case / "upstream.sse").exists():
        return (case / "upstream.sse").read_bytes()
    return read_capture((case / "source.txt").read_text().strip())


def request_of(case: Path) -> dict:
    return orjson.loads((case / "request.json").read_bytes())


def limit_of(request: dict) -> int | None:
    """The token limit the chat client set, as the proxy hands it to the machines."""
    return request.get("max_completion_tokens") or request.get("max_tokens")


def body(
    case: Path, pieces: list[bytes], *, wire: bool = True, typed_frames: bool = True
) -> tuple[bytes, ResponsesToChatStream]:
    """The SSE body a chat client receives for ``pieces`` (without the relay's ``[DONE]``)."""
    request = request_of(case)
    machine = ResponsesToChatStream(
        include_usage=include_usage(request),
        options=OPTIONS,
        ids=SequentialIds(),
        now=lambda: 1_700_000_000,
        model=request["model"],
        wire=wire,
        max_output_tokens=limit_of(request),
    )
    pump = Pump(machine, typed_frames=typed_frames)
    out: list[dict] = []
    for piece in pieces:
        out += pump.feed(piece)
    out += pump.finish()
    return render_chat(out), machine


def translate(
    case: Path, pieces: list[bytes], *, wire: bool = True, typed_frames: bool = True
) -> tuple[list[dict], ResponsesToChatStream]:
    """The chunks of ``body``, parsed back as the client parses them."""
    raw, machine = body(case, pieces, wire=wire, typed_frames=typed_frames)
    chunks = []
    for name, data in sse_frames(raw):
        assert name is None
        chunks.append(orjson.loads(data))
    return chunks, machine


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_golden(case: Path) -> None:
    data = upstream_bytes(case)
    whole, _ = translate(case, [data])
    validate_chat_chunks(whole)
    check_expected(case / "expected.jsonl", whole)
    # The frames the machine renders itself (wire mode) are the bytes of the dicts' frames.
    assert body(case, [data])[0] == body(case, [data], wire=False)[0]
    # The typed decoding of text deltas (delta_frames.py) and plain JSON into ``feed`` agree,
    # to the byte and in what the machine counted.
    typed_raw, typed_machine = body(case, [data])
    plain_raw, plain_machine = body(case, [data], typed_frames=False)
    assert typed_raw == plain_raw
    assert typed_machine.diagnostics == plain_machine.diagnostics
    assert translate(case, byte_by_byte(data))[0] == whole
    for seed in range(20):
        assert translate(case, split_points(data, seed, 1 + seed * 3))[0] == whole, f"split seed {seed}"


def expected_usage(case: Path, final: dict) -> dict | None:
    """The usage chunk a chat client must get, decided from the request and the upstream's own
    final Response alone: None unless the client asked and that Response carries usage; else the
    documented mapping (docs/reverse-mapping.md), written out here independently of the translator."""
    usage = final.get("usage")
    if not include_usage(request_of(case)) or usage is None:
        return None
    idet = usage.get("input_tokens_details") or {}
    prompt_details = {"cached_tokens": idet.get("cached_tokens") or 0}
    if "cache_write_tokens" in idet:
        prompt_details["cache_write_tokens"] = idet["cache_write_tokens"]
    return {
        "prompt_tokens": usage["input_tokens"],
        "completion_tokens": usage["output_tokens"],
        "total_tokens": usage["total_tokens"],
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": (usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
        },
    }


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_usage_chunk_follows_the_request(case: Path) -> None:
    """The usage chunk is there exactly when the client asked and the upstream reported usage,
    and it carries the upstream's counts."""
    data = upstream_bytes(case)
    final = _terminal_response(data)
    chunks, _ = translate(case, [data])
    if final is None or final["status"] == "failed":
        # No answer to count: the stream ends in an error frame and never in a usage chunk.
        assert chunks[-1].get("error") and all(c.get("usage") is None for c in chunks)
        return
    wanted = expected_usage(case, final)
    validate_chat_chunks(chunks, expect_usage=wanted is not None)
    assert accumulate_chat(chunks)["usage"] == wanted


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


def _cases_with_a_final_response() -> list[Path]:
    """The cases whose upstream stream carries a terminal Response (the others, cut short, have
    no final answer to compare with)."""
    return [case for case in case_dirs() if _terminal_response(upstream_bytes(case)) is not None]


@pytest.mark.parametrize("case", _cases_with_a_final_response(), ids=lambda p: p.name)
def test_stream_agrees_with_final_response(case: Path) -> None:
    """What a chat client accumulates from the stream equals the non-streaming translation of the
    upstream's own final Response (two independent paths over the same answer)."""
    data = upstream_bytes(case)
    final = _terminal_response(data)
    assert final is not None
    chunks, _ = translate(case, [data])
    acc = accumulate_chat(chunks)
    try:
        completion = response_to_chat_completion(
            final, options=OPTIONS, ids=SequentialIds(), max_output_tokens=limit_of(request_of(case))
        )
    except ResponseFailed as exc:
        assert acc["error"] is not None
        assert (acc["error"]["message"], acc["error"]["code"]) == (
            exc.body["error"]["message"],
            exc.body["error"]["code"],
        )
        return
    choice = completion["choices"][0]
    message = choice["message"]
    assert acc["finish_reason"] == choice["finish_reason"]
    assert (acc["content"] or None) == message["content"]
    assert acc["refusal"] == message["refusal"]
    assert acc["reasoning"] == message.get("reasoning_content")
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        if c["type"] == "function"
        else {
            "id": c["id"],
            "name": c["custom"]["name"],
            "arguments": json.dumps(c["custom"]["input"], ensure_ascii=False),
        }
        for c in message.get("tool_calls", [])
    ]
    assert acc["tool_calls"] == calls
    annotations = [a for c in chunks for ch in c.get("choices", []) for a in ch["delta"].get("annotations", [])]
    assert annotations == message.get("annotations", [])
    assert acc["usage"] == expected_usage(case, final)
