"""Fakes of the search services crossfeed's hosted web search calls, on a real loopback port.

They speak each service's real JSON API (the fields crossfeed reads and the others a real
answer carries), record every request, and can be told to fail:

  SearXNG  GET  /search?q=...&format=json     -> {"query", "number_of_results", "results": [{"url", "title",
                                                  "content", "engine", "engines", "score", "category"}], ...}
  Brave    GET  /res/v1/web/search?q=&count=   -> {"type": "search", "query": {...}, "web": {"type": "search",
                                                  "results": [{"title", "url", "description", ...}]}}
  Tavily   POST /search {"query", ...}        -> {"query", "answer", "images", "results": [{"title", "url",
                                                  "content", "score", "raw_content"}], "response_time"}

``pages`` maps a query (or ``*``) to its results as (url, title, snippet).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

Page = tuple[str, str, str]
# two result pages the web search tests name (tests/proxy/conftest.py's fake_search serves them)
PAGE_A, PAGE_B = "https://a.example/x", "https://b.example/"


@dataclass
class SearchRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeSearch:
    pages: dict[str, list[Page]] = field(default_factory=dict)
    fail: str | None = None  # "500", "garbage", "slow", "shape", "huge"
    delay: float = 0.0
    hook: Any = None  # an async callable awaited by every request once it is recorded
    requests: list[SearchRequest] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/search", self._searxng)
        app.router.add_get("/res/v1/web/search", self._brave)
        app.router.add_post("/search", self._tavily)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _found(self, q: str) -> list[Page]:
        return self.pages.get(q, self.pages.get("*", []))

    async def _record(self, request: web.Request) -> web.Response | None:
        raw = await request.read()
        self.requests.append(
            SearchRequest(
                request.method,
                request.path,
                dict(request.query),
                dict(request.headers),
                orjson.loads(raw) if raw else None,
            )
        )
        if self.hook is not None:
            await self.hook()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail == "slow":  # longer than the test's timeout_seconds; cancelled when crossfeed gives up
            await asyncio.sleep(20)
        if self.fail == "500":
            return web.Response(status=500, text="<html>Internal Server Error</html>", content_type="text/html")
        if self.fail == "garbage":
            return web.Response(text="<html>not json</html>", content_type="text/html")
        if self.fail == "shape":
            return web.json_response({"results": "nope"})
        if self.fail == "huge":
            return web.Response(
                body=b'{"results": [' + b'{"url": "https://x.test/", "title": "x"},' * 60000 + b"{}]}",
                content_type="application/json",
            )
        return None

    async def _searxng(self, request: web.Request) -> web.StreamResponse:
        failed = await self._record(request)
        if failed is not None:
            return failed
        q = request.query.get("q", "")
        return web.json_response(
            {
                "query": q,
                "number_of_results": 0,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
                "results": [
                    {
                        "url": u,
                        "title": t,
                        "content": c,
                        "engine": "duckduckgo",
                        "engines": ["duckduckgo"],
                        "score": 1.0 / (i + 1),
                        "category": "general",
                        "parsed_url": u.split("/"),
                        "positions": [i + 1],
                    }
                    for i, (u, t, c) in enumerate(self._found(q))
                ],
            }
        )

    async def _brave(self, request: web.Request) -> web.StreamResponse:
        failed = await self._record(request)
        if failed is not None:
            return failed
        if not request.headers.get("X-Subscription-Token"):
            return web.json_response(
                {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}}, status=422
            )
        q = request.query.get("q", "")
        count = int(request.query.get("count", "20"))
        return web.json_response(
            {
                "type": "search",
                "query": {"original": q},
                "mixed": {"type": "mixed"},
                "web": {
                    "type": "search",
                    "family_friendly": True,
                    "results": [
                        {
                            "type": "search_result",
                            "title": t,
                            "url": u,
                            "description": c,
                            "is_source_local": False,
                            "language": "en",
                            "profile": {"name": "x"},
                        }
                        for u, t, c in self._found(q)[:count]
                    ],
                },
            }
        )

    async def _tavily(self, request: web.Request) -> web.StreamResponse:
        failed = await self._record(request)
        if failed is not None:
            return failed
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return web.json_response({"detail": {"error": "Unauthorized"}}, status=401)
        body = self.requests[-1].body or {}
        q = body.get("query", "")
        n = int(body.get("max_results", 5))
        return web.json_response(
            {
                "query": q,
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": [
                    {"title": t, "url": u, "content": c, "score": 0.9, "raw_content": None}
                    for u, t, c in self._found(q)[:n]
                ],
                "response_time": 0.4,
            }
        )
