"""Compaction and token counting on a chat upstream (the I/O half of translators/forward/compaction.py).

  compaction_turn       streamed create whose input ends with compaction_trigger: one summary leg
  compacting_turn       streamed create over its context_management threshold: summary, then answer
  compact_now           the same two without streaming (a create with stream false)
  compact               POST /v1/responses/compact: the compacted window, as ``response.compaction``
  input_tokens          POST /v1/responses/input_tokens: the count ``response.input_tokens`` gives
  upstream_count        the same on a Responses upstream: its own answer, as one backend call

A compaction that fails (the backend's error, a cut stream, an empty summary) ends its Response
as failed and is never stored; a compaction the client would replay is always one crossfeed
sealed with ``[reasoning] key_env`` (proxy/state/reasoning_seal.py), so any replica with the key opens it.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import structlog

from crossfeed.proxy.errors import ClientRequestError, UpstreamError
from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.state.history import final_saver, load_history, save_before_final
from crossfeed.proxy.streaming.sinks import Sink
from crossfeed.proxy.turns.common import outbound_headers
from crossfeed.proxy.turns.exchange import (
    LegMachine,
    SinkOpener,
    ended,
    forward_machine,
    map_forward,
    stream_turn,
    whole_leg,
)
from crossfeed.proxy.turns.turn import Create, Turn
from crossfeed.translators import ids as idp
from crossfeed.translators.forward import compaction as cmp
from crossfeed.translators.forward.body import feed_completion
from crossfeed.translators.forward.compaction import SummaryLeg
from crossfeed.translators.forward.request import MappedRequest
from crossfeed.translators.responses.input_items import normalize_input
from crossfeed.translators.responses.response_object import map_usage
from crossfeed.translators.sse import Framing

log = structlog.get_logger("crossfeed")

ITEM_PREFIX = "cmp_"


def _leg(turn: Turn, create: Create, framing: Framing | bool = False, *, last: bool) -> SummaryLeg:
    """The summary leg before the create's own machine (which answers after it, unless ``last``)."""
    main = forward_machine(turn, create.body, create.mapped, framing)
    seal, owner = turn.seal, turn.owner
    return SummaryLeg(
        main,
        lambda text: seal.seal_summary(text, owner),
        turn.ids.new(ITEM_PREFIX),
        last=last,
        profile=turn.upstream.profile,
    )


# A compaction's span (proxy/runtime/tracing.py); its summary call is a leg under it.
_SPAN = {"gen_ai.operation.name": "compaction"}


def _answer_body(plan: MappedRequest, backend: Upstream, summary_text: str) -> dict[str, Any]:
    """The chat body of the answer after a compaction: the compacted window, then the summary."""
    kept = cmp.window(plan.chat["messages"], backend.profile.system_role)
    return {**plan.chat, "messages": [*kept, cmp.summary_message(summary_text)]}


async def check_size(turn: Turn, chat: dict[str, Any]) -> None:
    """A compaction request longer than the backend's configured context is a 400 naming the
    input: the backend could not read the history it would summarise."""
    backend = turn.upstream
    if backend.context_window:
        count, _ = await count_tokens(turn, chat)
        if count > backend.context_window:
            raise ClientRequestError(
                f"The conversation counts about {count} tokens, more than the {backend.context_window} of the "
                f"backend's context (upstream {backend.name!r} context_window): it cannot be summarised in one "
                "request. Send a shorter history.",
                param="input",
                code="context_length_exceeded",
            )


async def over_threshold(turn: Turn, plan: MappedRequest) -> bool:
    if plan.threshold is None:
        return False
    count, _ = await count_tokens(turn, plan.chat)
    return count > plan.threshold


async def compaction_turn(turn: Turn, create: Create, open_sink: SinkOpener) -> dict[str, Any] | None:
    """Streamed: the Response's only item is the compaction (Codex's remote compaction)."""
    chat = create.mapped.chat
    await check_size(turn, chat)
    with tracing.span("compaction", _SPAN):
        ran = await stream_turn(
            turn,
            "/chat/completions",
            chat,
            lambda framing: _leg(turn, create, framing, last=True),
            open_sink,
            before_end=final_saver(turn.app, create.body, None, keep_failed=False),
            client=create.body,
        )
    return ended(turn, ran)


async def compacting_turn(turn: Turn, create: Create, open_sink: SinkOpener) -> dict[str, Any] | None:
    """Streamed: the compaction item, then the answer to the compacted window, in one Response."""
    plan, backend = create.mapped, turn.upstream
    prompt = backend.profile.compaction_prompt or cmp.COMPACTION_PROMPT
    ask = cmp.summary_request(plan.chat, prompt)
    await check_size(turn, ask)

    async def then(leg: LegMachine, sink: Sink) -> tuple[dict[str, Any], LegMachine] | None:
        if not isinstance(leg, SummaryLeg) or leg.summary is None:
            return None
        return _answer_body(plan, backend, leg.summary), leg.main

    turn.log["compacted"] = True
    # One relay streams the summary and then the answer: the span holds both legs.
    with tracing.span("compaction", _SPAN):
        ran = await stream_turn(
            turn,
            "/chat/completions",
            ask,
            lambda framing: _leg(turn, create, framing, last=False),
            open_sink,
            then=then,
            before_end=final_saver(turn.app, create.body, create.history, keep_failed=False),
            client=create.body,
        )
    return ended(turn, ran)


async def _summarise(turn: Turn, chat: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """One non-streamed summary call: the text and the usage (an error status raises)."""
    body = {k: v for k, v in chat.items() if k != "stream_options"}
    body["stream"] = False
    with tracing.span("compaction", _SPAN):
        completion = await whole_leg(turn, "/chat/completions", body)
    if isinstance(completion, dict) and isinstance(completion.get("error"), dict):
        err = completion["error"]
        raise UpstreamError(
            str(err.get("message") or "the upstream failed"), code=str(err.get("code") or "upstream_error")
        )
    text, usage = cmp.summary_of_completion(completion)
    if not text:
        raise UpstreamError("the upstream answered the compaction with an empty summary", code="empty_summary")
    return text, usage


async def compact_now(turn: Turn, create: Create) -> dict[str, Any] | None:
    """A create with ``stream`` false that compacts: the Response, or None when it does not."""
    plan, backend = create.mapped, turn.upstream
    if plan.compact == "trigger":
        ask = plan.chat
    elif await over_threshold(turn, plan):
        ask = cmp.summary_request(plan.chat, backend.profile.compaction_prompt or cmp.COMPACTION_PROMPT)
    else:
        return None
    await check_size(turn, ask)
    text, usage = await _summarise(turn, ask)
    leg = _leg(turn, create, last=plan.compact == "trigger")
    main = leg.main
    leg.start()
    leg.sealed(text, usage)
    if plan.compact != "trigger":
        turn.log["compacted"] = True
        answer = _answer_body(plan, backend, text)
        answer.pop("stream_options", None)
        feed_completion(main, await whole_leg(turn, "/chat/completions", {**answer, "stream": False}))
    final = main.final_response
    assert final is not None
    if final.get("status") != "failed":
        await save_before_final(turn.app, create.body, final, create.history, turn.ids)
    return final


async def compact(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/responses/compact`` on a chat upstream: a create-like body; the answer's
    ``output`` (the user messages, then one compaction item) is what the next create takes as
    ``input``. Nothing is stored."""
    history = await load_history(turn.app, body)
    inp = body.get("input")
    if inp is not None and not isinstance(inp, (str, list)):
        raise ClientRequestError("`input` must be a string or an array of items", param="input", code="invalid_type")
    items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp or [])
    create = {k: v for k, v in body.items() if k not in ("stream", "store", "context_management")}
    create.update(input=[*items, {"type": cmp.TRIGGER}], stream=False)
    plan = map_forward(turn, create, history)
    await check_size(turn, plan.chat)
    text, usage = await _summarise(turn, plan.chat)
    ids = turn.ids
    item = {"id": ids.new(ITEM_PREFIX), "type": cmp.ITEM, "encrypted_content": turn.seal.seal_summary(text, turn.owner)}
    conversation = [*(history or []), *normalize_input(items, ids)]
    answer = {
        "id": ids.new(idp.RESPONSE),
        "object": "response.compaction",
        "created_at": turn.clock(),
        "output": cmp.compacted_output(conversation, item),
        "usage": map_usage(usage),
    }
    turn.log.update({"terminal": "completed", "compacted": True})
    return answer


async def count_tokens(turn: Turn, chat: dict[str, Any]) -> tuple[int, str]:
    """(input tokens, how they were counted): the server's tokenizer when the upstream names
    one (``tokenizer``), else, or when it does not answer, the documented estimate."""
    messages, tools = chat.get("messages") or [], chat.get("tools")
    backend = turn.upstream
    if backend.tokenizer != "estimate":
        try:
            return await _tokenize(turn, chat), backend.tokenizer
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "tokenizer.failed", upstream=backend.name, url=backend.tokenize_endpoint, error=type(exc).__name__
            )
    return cmp.estimate_tokens(messages, tools), "estimate"


async def _tokenize(turn: Turn, chat: dict[str, Any]) -> int:
    session, backend = turn.session, turn.upstream
    headers = tracing.inject(outbound_headers(turn, backend))  # the turn's trace context
    timeout = aiohttp.ClientTimeout(total=backend.timeouts.first_byte)
    url = backend.tokenize_endpoint
    if backend.tokenizer == "vllm":  # vLLM renders the chat template itself
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


async def input_tokens(turn: Turn, body: dict[str, Any], *, model_given: bool = True) -> tuple[int, str]:
    """``POST /v1/responses/input_tokens`` on a chat upstream: the input tokens of a create-like
    body and how they were counted (without ``model_given``, the tokenizer is not told a model:
    the server counts for its own)."""
    history = await load_history(turn.app, body)
    create = {k: v for k, v in body.items() if k not in ("stream", "context_management")}
    plan = map_forward(turn, {**create, "stream": False}, history)
    chat = plan.chat if model_given else {k: v for k, v in plan.chat.items() if k != "model"}
    return await count_tokens(turn, chat)


async def upstream_count(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/responses/input_tokens`` on a Responses upstream: the backend's answer, read
    whole. One leg (``whole_leg``), so a traced count has the backend call's span; the body goes
    as the client sent it, its model renamed as the upstream's ``model_map`` says."""
    backend, model = turn.upstream, body.get("model")
    if isinstance(model, str) and model in backend.model_map:
        body = {**body, "model": backend.model_map[model]}
    answer = await whole_leg(turn, "/responses/input_tokens", body)
    if not isinstance(answer, dict):
        raise UpstreamError("the upstream answered the token count with something other than a JSON object")
    return answer
