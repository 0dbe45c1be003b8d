"""The real servers as the tests reach them: ``Direct`` asks a server itself (the reference answer),
``proxy_for`` starts crossfeed in front of one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson

from crossfeed.proxy.runtime.config import load_config
from tests.support.app_server import ProxyHandle, start_proxy


class Direct:
    """The server itself, asked the same question: the reference."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        async with aiohttp.ClientSession() as s, s.post(self.base_url + path, json=body) as r:
            return r.status, await r.read()

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        status, raw = await self.post("/chat/completions", {**body, "stream": False})
        assert status == 200, raw[:500]
        return orjson.loads(raw)  # type: ignore[no-any-return]


async def proxy_for(url: str, tmp_path: Path, **overrides: Any) -> ProxyHandle:
    config = load_config(
        None,
        {},
        {
            "upstream.base_url": url,
            "store.data_dir": str(tmp_path / "data"),
            "upstream.tokenizer": "estimate",
            **overrides,
        },
    )
    return await start_proxy(config)
