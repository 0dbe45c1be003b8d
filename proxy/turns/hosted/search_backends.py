"""The search service behind the hosted ``web_search`` tool: SearXNG, Brave or Tavily.

``search`` runs one query on the configured backend and returns at most ``max_results``
results (url, title, snippet). What a search service sends is untrusted data: the body is read
up to ``MAX_BODY`` bytes, titles and snippets are cut to a few hundred characters, a result
whose URL is not http(s) is dropped, and crossfeed never requests any URL a result names: it
only ever calls the one search endpoint the operator configured. Every failure (refused,
slow, an HTTP error, a body that is not the API's JSON) is a ``SearchFailed`` with a line the
model can read.

  searxng  GET  {url}/search?q=...&format=json           -> {"results": [{"url", "title", "content"}]}
  brave    GET  {url}?q=...&count=N, X-Subscription-Token -> {"web": {"results": [{"url", "title", "description"}]}}
  tavily   POST {url} {"query", "max_results", "include_domains"}, Bearer key -> {"results": [{"url", "title", "content"}]}
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from crossfeed.proxy.runtime.config import WebSearch

MAX_BODY = 2 * 1024 * 1024
MAX_TITLE = 200
MAX_SNIPPET = 600
USER_AGENT = "crossfeed-web-search"


@dataclass(frozen=True, slots=True)
class Result:
    url: str
    title: str
    snippet: str


class SearchFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def result_count(cfg: WebSearch, context_size: Any) -> int:
    """``search_context_size``: low 3, medium (default) ``max_results``, high twice that (max 20)."""
    if context_size == "low":
        return min(3, cfg.max_results)
    if context_size == "high":
        return min(2 * cfg.max_results, 20)
    return cfg.max_results


async def search(
    session: aiohttp.ClientSession,
    cfg: WebSearch,
    environ: Mapping[str, str],
    query: str,
    *,
    count: int,
    domains: tuple[str, ...] = (),
    country: str | None = None,
) -> list[Result]:
    key = environ.get(cfg.api_key_env) if cfg.api_key_env else None
    if cfg.backend in ("brave", "tavily") and not key:
        raise SearchFailed(f"the search service is not available (its key, ${cfg.api_key_env}, is not set)")
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    try:
        async with asyncio.timeout(cfg.timeout_seconds):
            if cfg.backend == "tavily":
                body: dict[str, Any] = {"query": query, "max_results": count}
                if domains:
                    body["include_domains"] = list(domains)
                if country:
                    body["country"] = country
                headers["Authorization"] = f"Bearer {key}"
                request = session.post(
                    cfg.endpoint, data=orjson.dumps(body), headers={**headers, "Content-Type": "application/json"}
                )
            else:
                params = (
                    {"q": query, "format": "json"} if cfg.backend == "searxng" else {"q": query, "count": str(count)}
                )
                if cfg.backend == "brave":
                    headers["X-Subscription-Token"] = key or ""
                    if country:
                        params["country"] = country
                request = session.get(cfg.endpoint, params=params, headers=headers)
            async with request as resp:
                if resp.status >= 400:
                    raise SearchFailed(f"the search service answered HTTP {resp.status}")
                raw = await _read(resp)
    except TimeoutError:
        raise SearchFailed(f"the search service did not answer within {cfg.timeout_seconds:g}s") from None
    except aiohttp.ClientError:
        raise SearchFailed("the search service could not be reached") from None
    if len(raw) > MAX_BODY:
        raise SearchFailed("the search service sent a body larger than crossfeed reads")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise SearchFailed("the search service answered with something that is not JSON") from None
    entries = _entries(cfg.backend, doc)
    if entries is None:
        raise SearchFailed("the search service answered JSON of an unexpected shape")
    out: list[Result] = []
    for entry in entries:
        result = _result(entry, "description" if cfg.backend == "brave" else "content")
        if result is not None and _allowed(result.url, domains) and all(r.url != result.url for r in out):
            out.append(result)
            if len(out) >= count:
                break
    return out


async def _read(resp: aiohttp.ClientResponse) -> bytes:
    """The body, or at most one byte more than ``MAX_BODY`` (the caller refuses that)."""
    parts, size = [], 0
    async for chunk in resp.content.iter_any():
        parts.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            break
    return b"".join(parts)


def _entries(backend: str | None, doc: Any) -> list[Any] | None:
    if not isinstance(doc, dict):
        return None
    if backend == "brave":
        web = doc.get("web") if isinstance(doc.get("web"), dict) else {}
        results = web.get("results", []) if isinstance(web, dict) else None
    else:
        results = doc.get("results")
    return results if isinstance(results, list) else None


def _result(entry: Any, snippet_key: str) -> Result | None:
    if not isinstance(entry, dict):
        return None
    url = entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2048:
        return None
    title = entry.get("title")
    snippet = entry.get(snippet_key)
    return Result(url, _clean(title, MAX_TITLE) or url, _clean(snippet, MAX_SNIPPET))


def _clean(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    text = " ".join(value.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _allowed(url: str, domains: tuple[str, ...]) -> bool:
    if not domains:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in domains)


def results_text(query: str, results: list[Result], *, start: int = 0) -> str:
    """What the model reads as the search function's result; the results are numbered from
    ``start`` + 1 (numbers run on across the searches of one response)."""
    if not results:
        return f'No results for "{query}".'
    lines = [f'Search results for "{query}":']
    for n, r in enumerate(results, start + 1):
        lines.append(f"\n[{n}] {r.title}\nURL: {r.url}" + (f"\n{r.snippet}" if r.snippet else ""))
    return "\n".join(lines)


async def probe(session: aiohttp.ClientSession, cfg: WebSearch, environ: Mapping[str, str]) -> str | None:
    """None when the search backend answers a query, else what is wrong (for check-config)."""
    if cfg.backend is None:
        return None
    if cfg.api_key_env and not environ.get(cfg.api_key_env):
        return f"web_search.api_key_env names ${cfg.api_key_env}, which is not set"
    try:
        await search(session, cfg, environ, "crossfeed", count=1)
    except SearchFailed as exc:
        return f"the {cfg.backend} search backend at {cfg.endpoint}: {exc.message}"
    return None
