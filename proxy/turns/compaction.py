"""Compaction and token counting on a chat upstream (the I/O half of translators/forward/compaction.py).

  compaction_turn       streamed create whose input ends with compaction_trigger: one summary leg
  compacting_turn       streamed create over its context_management threshold: summary, then answer
  compact_now           the same two without streaming (a create with stream false)
  compact_response      POST /v1/responses/compact: the compacted window, as ``response.compaction``
  input_tokens_response POST /v1/responses/input_tokens: ``response.input_tokens``

A compaction that fails (the backend's error, a cut stream, an empty summary) ends its Response
as failed and is never stored; a compaction the client would replay is always one crossfeed
sealed with ``[reasoning] key_env`` (proxy/state/reasoning_seal.py), so any replica with the key opens it.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, UpstreamError
from crossfeed.proxy.keys import CLOCK, IDS, MAX_NONSTREAM_BODY, SEAL, SESSION
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import SUMMARY, usage_summary
from crossfeed.proxy.state.history import final_saver, load_history, save_before_final
from crossfeed.proxy.turns.common import outbound_headers
from crossfeed.proxy.turns.exchange import SinkOpener, Summary, map_forward, open_leg, reasoning_sealer, stream_turn
from crossfeed.proxy.upstream import read_json
from crossfeed.translators import ids as idp
from crossfeed.translators.forward import compaction as cmp
from crossfeed.translators.forward.body import feed_completion
from crossfeed.translators.forward.compaction import SummaryLeg
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.request import MappedRequest
from crossfeed.translators.responses.input_items import normalize_input
from crossfeed.translators.responses.response_object import map_usage

log = structlog.get_logger("crossfeed")

ITEM_PREFIX = "cmp_"


def _main(
    request: web.Request, body: dict[str, Any], up: Upstream, plan: MappedRequest, framing: Any = False
) -> ChatToResponsesStream:
    app = request.app
    return ChatToResponsesStream(
        body,
        ids=app[IDS],
        now=app[CLOCK],
        tools=plan.tools,
        seal_reasoning=reasoning_sealer(request, body),
        profile=up.profile,
        wire=framing,
    )


def _leg(request: web.Request, main: ChatToResponsesStream, up: Upstream, *, last: bool) -> SummaryLeg:
    app = request.app
    seal = app[SEAL]
    owner = KEY_NAME.get() or ""
    return SummaryLeg(
        main, lambda text: seal.seal_summary(text, owner), app[IDS].new(ITEM_PREFIX), last=last, profile=up.profile
    )


def _answer_body(plan: MappedRequest, up: Upstream, summary_text: str) -> dict[str, Any]:
    """The chat body of the answer after a compaction: the compacted window, then the summary."""
    kept = cmp.window(plan.chat["messages"], up.profile.system_role)
    return {**plan.chat, "messages": [*kept, cmp.summary_message(summary_text)]}


async def check_size(request: web.Request, up: Upstream, chat: dict[str, Any]) -> None:
    """A compaction request longer than the backend's configured context is a 400 naming the
    input: the backend could not read the history it would summarise."""
    if up.context_window:
        count, _ = await count_tokens(request, up, chat)
        if count > up.context_window:
            raise ClientRequestError(
                f"The conversation counts about {count} tokens, more than the {up.context_window} of the "
                f"backend's context (upstream {up.name!r} context_window): it cannot be summarised in one "
                "request. Send a shorter history.",
                param="input",
                code="context_length_exceeded",
            )


async def over_threshold(request: web.Request, up: Upstream, plan: MappedRequest) -> bool:
    if plan.threshold is None:
        return False
    count, _ = await count_tokens(request, up, plan.chat)
    return count > plan.threshold


async def compaction_turn(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    open_sink: SinkOpener,
    plan: MappedRequest,
    *,
    summary: Summary,
) -> dict[str, Any] | None:
    """Streamed: the Response's only item is the compaction (Codex's remote compaction)."""
    await check_size(request, up, plan.chat)
    ran = await stream_turn(
        request,
        up,
        "/chat/completions",
        plan.chat,
        lambda framing: _leg(request, _main(request, body, up, plan, framing), up, last=True),
        open_sink,
        summary,
        before_end=final_saver(request.app, body, None, keep_failed=False),
        client=body,
    )
    return _ended(ran, summary)


async def compacting_turn(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    open_sink: SinkOpener,
    plan: MappedRequest,
    history: list[dict[str, Any]] | None,
    *,
    summary: Summary,
) -> dict[str, Any] | None:
    """Streamed: the compaction item, then the answer to the compacted window, in one Response."""
    prompt = up.profile.compaction_prompt or cmp.COMPACTION_PROMPT
    ask = cmp.summary_request(plan.chat, prompt)
    await check_size(request, up, ask)

    async def then(leg: Any, sink: Any) -> tuple[dict[str, Any], Any] | None:
        if not isinstance(leg, SummaryLeg) or leg.summary is None:
            return None
        return _answer_body(plan, up, leg.summary), leg.main

    summary["compacted"] = True
    ran = await stream_turn(
        request,
        up,
        "/chat/completions",
        ask,
        lambda framing: _leg(request, _main(request, body, up, plan, framing), up, last=False),
        open_sink,
        summary,
        then=then,
        before_end=final_saver(request.app, body, history, keep_failed=False),
        client=body,
    )
    return _ended(ran, summary)


def _ended(ran: Any, summary: Summary) -> dict[str, Any] | None:
    if ran is None:
        return None
    final = ran[0].final_response
    summary.update(terminal=final.get("status") if final else ran[1].ending, usage=usage_summary(final))
    return final


async def _summarise(
    request: web.Request, up: Upstream, chat: dict[str, Any], summary: Summary
) -> tuple[str, dict[str, Any] | None]:
    """One non-streamed summary call: the text and the usage (an error status raises)."""
    body = {k: v for k, v in chat.items() if k != "stream_options"}
    body["stream"] = False
    upstream = await open_leg(request, up, "/chat/completions", body, summary)
    completion = await read_json(upstream, up, MAX_NONSTREAM_BODY)
    if isinstance(completion, dict) and isinstance(completion.get("error"), dict):
        err = completion["error"]
        raise UpstreamError(
            str(err.get("message") or "the upstream failed"), code=str(err.get("code") or "upstream_error")
        )
    text, usage = cmp.summary_of_completion(completion)
    if not text:
        raise UpstreamError("the upstream answered the compaction with an empty summary", code="empty_summary")
    return text, usage


async def compact_now(
    request: web.Request,
    body: dict[str, Any],
    up: Upstream,
    plan: MappedRequest,
    history: list[dict[str, Any]] | None,
    *,
    summary: Summary,
) -> dict[str, Any] | None:
    """A create with ``stream`` false that compacts: the Response, or None when it does not."""
    if plan.compact == "trigger":
        ask = plan.chat
    elif await over_threshold(request, up, plan):
        ask = cmp.summary_request(plan.chat, up.profile.compaction_prompt or cmp.COMPACTION_PROMPT)
    else:
        return None
    await check_size(request, up, ask)
    text, usage = await _summarise(request, up, ask, summary)
    main = _main(request, body, up, plan)
    leg = _leg(request, main, up, last=plan.compact == "trigger")
    leg.start()
    leg.sealed(text, usage)
    if plan.compact != "trigger":
        summary["compacted"] = True
        answer = _answer_body(plan, up, text)
        answer.pop("stream_options", None)
        upstream = await open_leg(request, up, "/chat/completions", {**answer, "stream": False}, summary)
        feed_completion(main, await read_json(upstream, up, MAX_NONSTREAM_BODY))
    final = main.final_response
    assert final is not None
    if final.get("status") != "failed":
        await save_before_final(request.app, body, final, history, request.app[IDS])
    return final


async def compact_response(request: web.Request, body: dict[str, Any], up: Upstream) -> web.Response:
    """``POST /v1/responses/compact`` on a chat upstream: a create-like body; the answer's
    ``output`` (the user messages, then one compaction item) is what the next create takes as
    ``input``. Nothing is stored."""
    app = request.app
    summary = request[SUMMARY]
    history = await load_history(app, body)
    inp = body.get("input")
    if inp is not None and not isinstance(inp, (str, list)):
        raise ClientRequestError("`input` must be a string or an array of items", param="input", code="invalid_type")
    items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp or [])
    create = {k: v for k, v in body.items() if k not in ("stream", "store", "context_management")}
    create.update(input=[*items, {"type": cmp.TRIGGER}], stream=False)
    plan = map_forward(request, create, up, history)
    await check_size(request, up, plan.chat)
    text, usage = await _summarise(request, up, plan.chat, summary)
    item = {
        "id": app[IDS].new(ITEM_PREFIX),
        "type": cmp.ITEM,
        "encrypted_content": app[SEAL].seal_summary(text, KEY_NAME.get() or ""),
    }
    conversation = [*(history or []), *normalize_input(items, app[IDS])]
    answer = {
        "id": app[IDS].new(idp.RESPONSE),
        "object": "response.compaction",
        "created_at": app[CLOCK](),
        "output": cmp.compacted_output(conversation, item),
        "usage": map_usage(usage),
    }
    summary.update(terminal="completed", compacted=True)
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def count_tokens(request: web.Request, up: Upstream, chat: dict[str, Any]) -> tuple[int, str]:
    """(input tokens, how they were counted): the server's tokenizer when the upstream names
    one (``tokenizer``), else, or when it does not answer, the documented estimate."""
    messages, tools = chat.get("messages") or [], chat.get("tools")
    if up.tokenizer != "estimate":
        try:
            return await _tokenize(request, up, chat), up.tokenizer
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            log.warning("tokenizer.failed", upstream=up.name, url=up.tokenize_endpoint, error=type(exc).__name__)
    return cmp.estimate_tokens(messages, tools), "estimate"


async def _tokenize(request: web.Request, up: Upstream, chat: dict[str, Any]) -> int:
    session = request.app[SESSION]
    headers = outbound_headers(request, up)
    timeout = aiohttp.ClientTimeout(total=up.timeouts.first_byte)
    url = up.tokenize_endpoint
    if up.tokenizer == "vllm":  # vLLM renders the chat template itself
        payload: dict[str, Any] = {"messages": chat.get("messages") or [], "add_generation_prompt": True}
        if chat.get("model"):
            payload["model"] = chat["model"]
        if chat.get("tools"):
            payload["tools"] = chat["tools"]
        async with session.post(url, json=payload, headers=headers, timeout=timeout) as r:
            r.raise_for_status()
            return int((await r.json(content_type=None))["count"])
    # llama.cpp's server: render the template (/apply-template), then count its tokens
    template = url.rsplit("/", 1)[0] + "/apply-template"
    async with session.post(
        template, json={"messages": chat.get("messages") or []}, headers=headers, timeout=timeout
    ) as r:
        r.raise_for_status()
        prompt = (await r.json(content_type=None))["prompt"]
    async with session.post(url, json={"content": prompt}, headers=headers, timeout=timeout) as r:
        r.raise_for_status()
        return len((await r.json(content_type=None))["tokens"])


async def input_tokens_response(
    request: web.Request, body: dict[str, Any], up: Upstream, *, model_given: bool = True
) -> web.Response:
    """``POST /v1/responses/input_tokens`` on a chat upstream:
    ``{"object": "response.input_tokens", "input_tokens": N}`` for a create-like body (without
    ``model_given``, the tokenizer is not told a model: the server counts for its own)."""
    history = await load_history(request.app, body)
    create = {k: v for k, v in body.items() if k not in ("stream", "context_management")}
    plan = map_forward(request, {**create, "stream": False}, up, history)
    chat = plan.chat if model_given else {k: v for k, v in plan.chat.items() if k != "model"}
    count, how = await count_tokens(request, up, chat)
    return web.Response(
        body=orjson.dumps({"object": "response.input_tokens", "input_tokens": count}),
        content_type="application/json",
        headers={"x-crossfeed-token-count": how},
    )
