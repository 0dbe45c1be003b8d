"""The WebSocket sink's own frame encoder (RFC 6455 5.2), read back by an independent parser,
and the frames a real aiohttp client receives from it."""

from __future__ import annotations

import struct

import pytest

from crossfeed.proxy.streaming.sinks import text_frames


def parse(data: bytes) -> list[tuple[int, int, bytes]]:
    """(FIN+opcode byte, mask bit, payload) of each frame, by the RFC's length rules."""
    out, pos = [], 0
    while pos < len(data):
        b0, b1 = data[pos], data[pos + 1]
        n, pos = b1 & 0x7F, pos + 2
        if n == 126:
            (n,), pos = struct.unpack_from("!H", data, pos), pos + 2
        elif n == 127:
            (n,), pos = struct.unpack_from("!Q", data, pos), pos + 8
        out.append((b0, b1 & 0x80, data[pos : pos + n]))
        pos += n
    assert pos == len(data)
    return out


@pytest.mark.parametrize("sizes", [[0], [1, 125], [126], [65535], [65536], [3, 70000, 126, 125]])
def test_each_document_is_one_final_unmasked_text_frame(sizes: list[int]) -> None:
    docs = [b"x" * n for n in sizes]
    frames = parse(text_frames(docs))
    assert [p for _, _, p in frames] == docs
    assert all(b0 == 0x81 and not masked for b0, masked, _ in frames)  # FIN + text, no mask
    # the shortest length form: 7 bits up to 125, 16 bits up to 65535, 64 bits past that
    assert len(text_frames(docs)) == sum(n + (2 if n < 126 else 4 if n < 65536 else 10) for n in sizes)
