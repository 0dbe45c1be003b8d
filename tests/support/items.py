"""Response items shared by the tests of their mapping (tests/translators/forward/test_input.py) and of
their lookup in the store (tests/proxy/state/test_history.py)."""

from __future__ import annotations

ASSISTANT = {
    "id": "msg_a1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hi Ann.", "annotations": []}],
}


CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "lookup",
    "arguments": "{}",
    "status": "completed",
}


USER = {"role": "user", "content": "I am Ann."}


REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "Ann is in the table."}],
}


BARE = {"type": "reasoning", "id": "rs_1", "summary": [], "content": []}
