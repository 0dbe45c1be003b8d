"""A Responses backend's answers for the tests of a chat client on a Responses upstream: a streamed
text answer one frame per event, and the whole Response it stands for."""

from __future__ import annotations

import orjson


def event_frame(event: dict) -> bytes:
    """One Responses SSE frame: the event line, then its data."""
    return b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def usage(inp: int, out: int) -> dict:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "total_tokens": inp + out,
        "input_tokens_details": {"cached_tokens": 1},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def answer(deltas: list[str], *, tokens: tuple[int, int] = (9, 2), resp_id: str = "resp_1") -> list[bytes]:
    """A streamed text answer as a Responses backend sends it, one frame per event."""
    text = "".join(deltas)
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    base = {"id": resp_id, "object": "response", "created_at": 1_700_000_123, "model": "up-model"}
    events = [
        {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []},
        },
        *(
            {
                "type": "response.output_text.delta",
                "output_index": 0,
                "content_index": 0,
                "item_id": "msg_1",
                "delta": d,
            }
            for d in deltas
        ),
        {"type": "response.output_text.done", "output_index": 0, "content_index": 0, "item_id": "msg_1", "text": text},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": {**base, "status": "completed", "output": [item], "usage": usage(*tokens)},
        },
    ]
    return [event_frame(e) for e in events]


def final_response(
    text: str, *, tokens: tuple[int, int] = (9, 2), status: str = "completed", error: dict | None = None
) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 5,
        "status": status,
        "model": "up-model",
        "error": error,
        "usage": usage(*tokens),
        "output": [
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
        if text
        else [],
    }
