"""``POST /v1/alpha/search``: Codex's standalone web search, run on the configured search backend.

Codex (a provider with ``supports_standalone_web_search = true`` and
``features.standalone_web_search``) gives the model a ``web.run`` function and runs each call by
POSTing here (checked against Codex 0.171.0)::

    {"id": "<session>", "model": ..., "input": [...user messages...],
     "commands": {"search_query": [{"q", "recency"?, "domains"?}], "open": [{"ref_id", "lineno"?}],
                  "find": [{"ref_id", "pattern"}], ...},
     "settings": {"external_web_access": bool, ...}, "max_output_tokens": 2500}

and gives the model the answer's ``output`` text as the call's result. Each search result gets a
reference id (``turn<n>search<i>``, n counting this session's calls); ``open`` and ``find`` on
one are answered from what the search returned for it (crossfeed fetches no page: the search
backend is the only place it calls), anything else with a line saying what is not available.
The references of a session are kept in memory for its next calls (bounded).
"""

from __future__ import annotations

import asyncio
import datetime
from collections import OrderedDict
from typing import Any

import orjson
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CONFIG, ENV, SESSION
from crossfeed.proxy.runtime.config import Config
from crossfeed.proxy.turns.common import read_body
from crossfeed.proxy.turns.hosted.search_backends import Result, SearchFailed, search

SESSIONS: web.AppKey[OrderedDict[str, _Session]] = web.AppKey("standalone_search_sessions", OrderedDict)
MAX_SESSIONS = 512
MAX_REFS = 200
MAX_QUERIES = 4


class _Session:
    __slots__ = ("calls", "refs")

    def __init__(self) -> None:
        self.calls = 0
        self.refs: OrderedDict[str, Result] = OrderedDict()


def _session(app: web.Application, sid: str) -> _Session:
    sessions = app[SESSIONS]
    found = sessions.get(sid)
    if found is None:
        found = sessions[sid] = _Session()
        while len(sessions) > MAX_SESSIONS:
            sessions.popitem(last=False)
    sessions.move_to_end(sid)
    return found


def _list(commands: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = commands.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ClientRequestError(
            f"`commands.{key}` must be an array of objects", param=f"commands.{key}", code="invalid_type"
        )
    return value


async def alpha_search(request: web.Request) -> web.Response:
    config: Config = request.app[CONFIG]
    cfg = config.web_search
    if cfg.backend is None:
        raise ClientRequestError(
            "web search is not configured on this crossfeed: set [web_search] backend (searxng, brave or tavily) "
            "and its url / api_key_env, or CROSSFEED_WEB_SEARCH__BACKEND",
            status=404,
            code="not_found",
        )
    body = await read_body(request)
    commands = body.get("commands")
    if not isinstance(commands, dict):
        raise ClientRequestError("`commands` must be an object", param="commands", code="invalid_type")
    queries = _list(commands, "search_query")[:MAX_QUERIES]
    opens, finds = _list(commands, "open"), _list(commands, "find")
    session = _session(request.app, str(body.get("id") or "-"))
    turn = session.calls
    session.calls += 1
    out: list[str] = []
    ran = await asyncio.gather(*(_one(request, q) for q in queries))
    for qi, (q, found) in enumerate(zip(queries, ran, strict=True)):
        query = str(q.get("q") or "")
        if isinstance(found, str):
            out.append(f'Search "{query}" failed: {found}.')
            continue
        if not found:
            out.append(f'No results for "{query}".')
            continue
        out.append(f'Results for "{query}":')
        for i, r in enumerate(found):
            ref = f"turn{turn}search{qi * 10 + i}"
            session.refs[ref] = r
            out.append(f"【{ref}】 {r.title}\n{r.url}" + (f"\n{r.snippet}" if r.snippet else ""))
        while len(session.refs) > MAX_REFS:
            session.refs.popitem(last=False)
    for o in opens:
        out.append(_open(session, o))
    for f in finds:
        out.append(_find(session, f))
    for t in _list(commands, "time"):
        out.append(_time(t))
    other = sorted(k for k in commands if k not in ("search_query", "open", "find", "time") and commands[k])
    if other:
        out.append("Not available on this server: " + ", ".join(other) + ". Use search_query instead.")
    text = "\n\n".join(out) or "Nothing to do: send search_query commands."
    limit = body.get("max_output_tokens")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 and len(text) > limit * 4:
        text = text[: limit * 4] + "\n[cut at max_output_tokens]"
    return web.Response(body=orjson.dumps({"output": text}), content_type="application/json")


async def _one(request: web.Request, q: dict[str, Any]) -> list[Result] | str:
    query = q.get("q")
    if not isinstance(query, str) or not query.strip():
        return []
    domains = (
        tuple(d for d in q.get("domains") or () if isinstance(d, str)) if isinstance(q.get("domains"), list) else ()
    )
    app = request.app
    cfg = app[CONFIG].web_search
    try:
        return await search(app[SESSION], cfg, app[ENV], query.strip()[:500], count=cfg.max_results, domains=domains)
    except SearchFailed as exc:
        return exc.message


def _open(session: _Session, o: dict[str, Any]) -> str:
    ref = str(o.get("ref_id") or "")
    found = session.refs.get(ref)
    if found is None:
        return (
            f"Cannot open {ref or 'that'}: crossfeed does not fetch pages, and it is not a result of this "
            "session's searches. Search for it instead."
        )
    return (
        f"【{ref}】 {found.title}\n{found.url}\n{found.snippet or '(no text)'}\n"
        "(What the search returned for this page; crossfeed does not fetch the page itself.)"
    )


def _find(session: _Session, f: dict[str, Any]) -> str:
    ref = str(f.get("ref_id") or "")
    pattern = str(f.get("pattern") or "")
    found = session.refs.get(ref)
    if found is None:
        return f"Cannot search in {ref or 'that'}: it is not a result of this session's searches."
    text = f"{found.title}\n{found.snippet}"
    if pattern and pattern.lower() in text.lower():
        return f'"{pattern}" in 【{ref}】: {text}'
    return f'"{pattern}" is not in what the search returned for 【{ref}】.'


def _time(t: dict[str, Any]) -> str:
    offset = str(t.get("utc_offset") or "+00:00")
    try:
        sign = -1 if offset.startswith("-") else 1
        hours, _, minutes = offset.lstrip("+-").partition(":")
        delta = datetime.timedelta(hours=int(hours), minutes=int(minutes or 0)) * sign
    except ValueError:
        return f"Unknown utc_offset {offset!r}: expected +HH:MM."
    now = datetime.datetime.now(datetime.timezone(delta))
    return f"The time at UTC{offset} is {now.isoformat(timespec='seconds')}."
