"""WebSocket frames that claim a compression nobody agreed on (the frame-level twin of a request
body whose Content-Encoding lies). crossfeed does not negotiate permessage-deflate: a client that
offers it gets no extension in the handshake, and a frame with RSV1 set (compressed, or claiming
to be) is a protocol error: the socket is closed with 1002, nothing is logged as a crash, and the
next connection is served as usual."""

from __future__ import annotations

import asyncio
import base64
import os
import zlib

import pytest
import structlog

from crossfeed.proxy.runtime.config import load_config
from tests.support.app_server import running_proxy

pytestmark = pytest.mark.timeout(60)


async def handshake(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
        ).encode()
    )
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode()
    return reader, writer, head


def frame(payload: bytes, *, rsv1: bool) -> bytes:
    mask = os.urandom(4)
    assert len(payload) < 126
    return (
        bytes([0x80 | (0x40 if rsv1 else 0) | 0x1, 0x80 | len(payload)])
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    )


def deflated(text: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return (c.compress(text) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]


@pytest.mark.parametrize(
    "payload",
    [b"this is not deflate data at all", deflated(b'{"type":"response.create"}')],
    ids=["claims-compressed-is-not", "really-compressed-unnegotiated"],
)
async def test_a_frame_with_rsv1_closes_the_socket_with_1002(tmp_path, payload: bytes) -> None:
    config = load_config(None, {}, {"upstream.base_url": "http://127.0.0.1:9/v1", "store.data_dir": str(tmp_path)})
    async with running_proxy(config) as handle:
        port = int(handle.url.rsplit(":", 1)[1])
        with structlog.testing.capture_logs() as logs:
            reader, writer, head = await handshake(port)
            assert head.startswith("HTTP/1.1 101"), head
            assert "sec-websocket-extensions" not in head.lower(), head  # no compression agreed
            writer.write(frame(payload, rsv1=True))
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(64), 10)
            assert answer[:2] == b"\x88\x02" and int.from_bytes(answer[2:4], "big") == 1002, answer
            assert await asyncio.wait_for(reader.read(64), 10) == b""  # and the connection is closed
            writer.close()
            # the next socket works: a plain frame gets crossfeed's own answer (an error frame)
            reader, writer, head = await handshake(port)
            writer.write(frame(b'{"type":"nonsense"}', rsv1=False))
            await writer.drain()
            reply = await asyncio.wait_for(reader.read(4096), 10)
            assert reply[0] == 0x81 and b'"type":"error"' in reply, reply
            writer.close()
        assert not [e for e in logs if e.get("log_level") in ("error", "critical") or "exc_info" in e], logs
