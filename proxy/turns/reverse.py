"""The reverse direction: a Chat Completions client in front of a Responses-only backend.

``POST /v1/chat/completions`` is mapped onto the backend's ``POST /v1/responses``
(``translators.reverse.request``); the answer comes back as ``chat.completion.chunk`` frames from
``translators.reverse.machine`` through the same relay as the forward direction, ending with
``data: [DONE]``, or as one ``chat.completion`` when not streaming.

Two chat parameters the Responses API lacks are run here instead of refused:

- ``stop``: the content is cut at the first stop sequence, streamed (``StoppingChatStream``: the
  stream ends there and the upstream request is closed) or not (``response_to_chat_completion``).
- ``n`` > 1: n Responses calls at once, merged as choices 0..n-1. Streamed, the n relays write
  into one client stream through ``_Choices`` (one writer, in arrival order, one identity for
  every chunk, the usage summed in one last chunk); nothing is sent before every call has
  answered 2xx, so a call refused up front is the request's HTTP error, as with one choice; a
  call failing later ends the stream with its error frame, once, and the other calls are
  cancelled (their upstream requests closed). Not streamed: the n completions' choices, the
  usage summed; one failure is the request's error.

A request with neither (n = 1, no stop), the hot path, runs ``reverse_turn`` exactly as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from crossfeed.proxy.runtime.observability import TurnLog, usage_counts, usage_summary
from crossfeed.proxy.streaming.sinks import KEEPALIVE_FRAME, SSEOpener, SSESink
from crossfeed.proxy.turns.common import log
from crossfeed.proxy.turns.exchange import SinkOpener, chat_ended, reverse_turn, stream_flag, stream_turn, whole_leg
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.forward.compaction import estimate_tokens
from crossfeed.translators.records import quick_init
from crossfeed.translators.reverse.body import response_to_chat_completion
from crossfeed.translators.reverse.machine import ResponsesToChatStream
from crossfeed.translators.reverse.request import chat_request_to_responses, choice_count, include_usage, stop_sequences
from crossfeed.translators.reverse.stopping import StoppingChatStream
from crossfeed.translators.sse import SSE_FRAMING, Framing, render_chat


@quick_init
@dataclass(frozen=True)
class ChatCall:
    """A chat request as the reverse mapping made it: the client's body, the Responses body for
    the backend, and the two chat parameters run here (``n`` choices, ``stop`` sequences)."""

    body: dict[str, Any]
    rbody: dict[str, Any]
    stream: bool
    n: int
    stop: tuple[str, ...]


def chat_call(turn: Turn, body: dict[str, Any]) -> ChatCall:
    """Map a chat request for the turn's Responses upstream (the fields it ignores are logged)."""
    backend = turn.upstream
    stream = stream_flag(body)
    ignored: list[str] = []
    profile = backend.profile
    rbody = chat_request_to_responses(body, profile, ignored=ignored)
    rbody["model"] = backend.model_map.get(rbody["model"], rbody["model"])
    rbody["stream"] = stream
    if ignored:
        dropped = [key for key in ignored if key in profile.drop_params]
        if dropped:
            log.warning("request.ignored_fields", ignored=ignored, dropped=dropped, upstream=backend.name)
        else:
            log.info("request.ignored_fields", ignored=ignored)
    n = choice_count(body, profile)
    stop = stop_sequences(body, profile)
    turn.log["stream"] = stream
    if n > 1:
        turn.log["choices"] = n
    return ChatCall(body, rbody, stream, n, stop)


async def reverse_now(turn: Turn, call: ChatCall) -> dict[str, Any]:
    """A chat request with ``stream`` false: its chat.completion (n calls' choices merged)."""
    limit = call.rbody.get("max_output_tokens")
    limit = limit if isinstance(limit, int) else None
    if call.n == 1:
        completion = await _completion(turn, call.rbody, limit, call.stop)
    else:
        completion = _merge_completions(
            await _all([_completion(turn, call.rbody, limit, call.stop) for _ in range(call.n)])
        )
    turn.log.update({"terminal": completion["choices"][0]["finish_reason"], "usage": usage_summary(completion)})
    return completion


async def reverse_streamed(turn: Turn, call: ChatCall, open_sink: SSEOpener) -> None:
    """A streamed chat request: one Responses stream (cut at a stop sequence), or n merged."""
    body, rbody = call.body, call.rbody
    if call.n == 1 and not call.stop:
        await reverse_turn(turn, body, rbody, open_sink)
    elif call.n == 1:
        machines = _machines(turn, body, rbody, call.stop, wire=True)
        ran = await stream_turn(turn, "/responses", rbody, machines, open_sink, client=body)
        if ran is not None:
            chat_ended(turn, *ran)
    else:
        machines = _machines(turn, body, rbody, call.stop, wire=False)
        await _stream_choices(turn, body, rbody, open_sink, call.n, machines)


async def _completion(turn: Turn, rbody: dict[str, Any], limit: int | None, stop: tuple[str, ...]) -> dict[str, Any]:
    """One non-streamed Responses call, as a chat.completion."""
    backend = turn.upstream
    result = await whole_leg(turn, "/responses", rbody)
    if not isinstance(result, dict):
        result = {}
    return response_to_chat_completion(
        result, options=backend.profile, ids=turn.ids, now=turn.clock, max_output_tokens=limit, stop=stop
    )


def _machines(
    turn: Turn, body: dict[str, Any], rbody: dict[str, Any], stop: tuple[str, ...], *, wire: bool
) -> Callable[[Framing], ResponsesToChatStream]:
    """The stream machine of one choice. ``wire``: frames rendered by the machine where it can
    (one client stream per machine); the n-choice writer needs every chunk as a dict."""
    limit = rbody.get("max_output_tokens")
    kw: dict[str, Any] = dict(
        include_usage=include_usage(body),
        options=turn.upstream.profile,
        ids=turn.ids,
        now=turn.clock,
        model=str(body.get("model")),
        max_output_tokens=limit if isinstance(limit, int) else None,
    )
    if stop:
        # The estimate of the prompt, for the usage chunk of a stream cut before the upstream
        # reported usage (the messages were checked by the request mapping).
        prompt = estimate_tokens(body["messages"], body.get("tools")) if kw["include_usage"] else 0

        def stopping(framing: Framing) -> ResponsesToChatStream:
            return StoppingChatStream(stop=stop, prompt_tokens=prompt, **kw)

        return stopping

    def machine(framing: Framing) -> ResponsesToChatStream:
        return ResponsesToChatStream(wire=framing if wire else False, **kw)

    return machine


# ---------------------------------------------------------------- n > 1


async def _all(coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
    """Run ``coros`` at once; their results in order. The first to fail cancels the others (their
    upstream requests are closed) and its error is raised; so is a cancellation of the caller."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    for t in tasks:
        if not t.cancelled():
            exc = t.exception()
            if exc is not None:
                raise exc
    return [t.result() for t in tasks]


def _sum_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """Chat usage objects added up, field by field (nested details too)."""
    total: dict[str, Any] = {}
    for usage in usages:
        for key, value in usage.items():
            if isinstance(value, dict):
                total[key] = _sum_usage([total.get(key) or {}, value])
            elif type(value) is int:
                total[key] = total.get(key, 0) + value
    return total


def _merge_completions(completions: list[dict[str, Any]]) -> dict[str, Any]:
    """n chat.completions of one request -> one with n choices (the first one's id, created,
    model), the usage summed when every call reported it."""
    merged = completions[0]
    merged["choices"] = [{**c["choices"][0], "index": i} for i, c in enumerate(completions)]
    usages = [usage for c in completions if (usage := c.get("usage"))]
    if len(usages) == len(completions):
        merged["usage"] = _sum_usage(usages)
    else:
        merged.pop("usage", None)
    return merged


async def _stream_choices(
    turn: Turn,
    body: dict[str, Any],
    rbody: dict[str, Any],
    open_sink: SSEOpener,
    n: int,
    make_machine: Callable[[Framing], ResponsesToChatStream],
) -> None:
    """n streamed Responses calls, one chat stream: each call is a turn of its own (admission,
    upstream request, machine, relay, its own log record) whose sink is its choice's door into
    ``_Choices``; the n records are merged into the turn's."""
    mux = _Choices(n, open_sink, include_usage(body))
    choice_logs: list[TurnLog] = [{} for _ in range(n)]
    mux.tasks = [
        asyncio.ensure_future(
            stream_turn(
                dataclasses.replace(turn, log=choice_logs[i]),
                "/responses",
                rbody,
                make_machine,
                mux.opener(i),
                client=body,
            )
        )
        for i in range(n)
    ]
    try:
        await asyncio.wait(mux.tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        pending = [t for t in mux.tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    failure = next((t.exception() for t in mux.tasks if not t.cancelled() and t.exception() is not None), None)
    if failure is not None:
        if mux.sink is None:
            raise failure  # before the stream began: the request's error (an HTTP status), as for n = 1
        log.error("stream.internal_error", detail=repr(failure), where="n choices")
        await mux.end_with_error("internal_error", "crossfeed failed while merging the choices")
    ran = [t.result() for t in mux.tasks if not t.cancelled() and t.exception() is None]
    machines = [r[0] for r in ran if r is not None]
    _merge_logs(turn.log, choice_logs, machines, mux)


def _merge_logs(turn_log: TurnLog, choice_logs: list[TurnLog], machines: list[Any], mux: _Choices) -> None:
    for key in ("events_in", "events_out"):
        values = [s[key] for s in choice_logs if key in s]
        if values:
            turn_log[key] = sum(values)
    ttfbs = [s["ttfb"] for s in choice_logs if "ttfb" in s]
    if ttfbs:
        turn_log["ttfb"] = max(ttfbs)  # the stream began when the last call answered
    endings = [s["ending"] for s in choice_logs if "ending" in s]
    if endings:
        turn_log["ending"] = next((e for e in endings if e != "ok"), "ok")
    error = next((s["error"] for s in choice_logs if s.get("error")), None)
    if error:
        turn_log["error"] = error
    finishes = {m.finish_reason for m in machines}
    if mux.sink is None or "client_disconnected" in endings:
        turn_log["terminal"] = "client_disconnected"
    elif mux.failed or any(m.error for m in machines) or len(machines) < len(choice_logs):
        turn_log["terminal"] = "error"
    elif len(finishes) == 1:
        turn_log["terminal"] = finishes.pop() or turn_log.get("ending", "ok")
    else:
        turn_log["terminal"] = "mixed"
    counts = [usage_counts(m.usage) for m in machines]
    if machines and all(counts):
        turn_log["usage"] = {"in": sum(c["in"] for c in counts if c), "out": sum(c["out"] for c in counts if c)}


class _Choices:
    """The client stream of n choices, written by one writer: each choice's relay writes its
    machine's chunks (dicts) through its ``_ChoiceSink``; here they get the choice's ``index``
    and the stream's one ``id``/``created``/``model`` (the first chunk's), and go out in arrival
    order, one write at a time. Each choice's finish chunk passes; its usage chunk is kept, and
    once every choice has ended the sum goes out last (when each reported one), then ``[DONE]``.
    An error frame from any choice goes out once and ends the stream; the other choices' turns
    are cancelled, which closes their upstream requests. A client gone away does the same."""

    def __init__(self, n: int, open_sink: SSEOpener, usage_on: bool) -> None:
        self.n = n
        self._open_sink = open_sink
        self._usage_on = usage_on
        self._arrived = 0
        self._ready = asyncio.Event()
        self.sink: SSESink | None = None
        self.tasks: list[asyncio.Future[Any]] = []
        self._lock = asyncio.Lock()
        self._identity: tuple[Any, Any, Any] | None = None
        self._usages: list[dict[str, Any]] = []
        self._ended: set[int] = set()  # choices whose relay wrote its last output
        self.ended = False  # the client stream is closed: later writes are dropped
        self.failed = False

    def opener(self, index: int) -> SinkOpener:
        """Choice ``index``'s sink opener: called once its call has answered 2xx; the client's
        stream opens when every call has."""

        async def open_choice() -> _ChoiceSink | None:
            self._arrived += 1
            if self._arrived == self.n:
                try:
                    self.sink = await self._open_sink()
                finally:
                    self._ready.set()
            else:
                await self._ready.wait()
            return None if self.sink is None else _ChoiceSink(self, index)

        return open_choice  # a _ChoiceSink has all of a sink the relay uses (sinks.FrameSink)

    async def write(self, index: int, outs: list[Any], *, last: bool = False) -> None:
        async with self._lock:
            if self.ended or self.sink is None:
                return
            frames: list[Any] = []
            error = None
            for out in outs:
                choices = out.get("choices")
                if choices is None:  # an error object: the stream's end
                    error = out
                    break
                identity = self._identity
                if identity is None:
                    identity = self._identity = (out["id"], out["created"], out["model"])
                out["id"], out["created"], out["model"] = identity
                if choices:
                    choices[0]["index"] = index
                    frames.append(out)
                elif out.get("usage") is not None:
                    self._usages.append(out["usage"])
            if error is not None:
                frames.append(error)
                self.failed = True
            if last or error is not None:
                self._ended.add(index)
            end = error is not None or len(self._ended) == self.n
            if end and error is None and self._usage_on and len(self._usages) == self.n:
                assert self._identity is not None
                cid, created, model = self._identity
                frames.append(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": _sum_usage(self._usages),
                    }
                )
            try:
                if end:
                    self.ended = True
                    await self.sink.close(render_chat(frames))
                elif frames:
                    await self.sink.write(render_chat(frames))
            except ConnectionResetError:  # the client has gone: so have the other choices
                self.ended = True
                self._cancel_others()
                raise
        if error is not None:
            self._cancel_others()

    async def end_with_error(self, code: str, message: str) -> None:
        """End the stream with crossfeed's own error frame (a failure outside the machines)."""
        async with self._lock:
            if self.ended or self.sink is None:
                return
            self.ended = self.failed = True
            error = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
            try:
                await self.sink.close(render_chat([error]))
            except ConnectionResetError:
                pass

    def _cancel_others(self) -> None:
        """Cancel the turns of the choices still running (the writing one has ended its own)."""
        for i, task in enumerate(self.tasks):
            if i not in self._ended and not task.done():
                task.cancel()

    async def flush(self) -> None:
        async with self._lock:
            if not self.ended and self.sink is not None:
                await self.sink.flush()

    async def keepalive(self) -> None:
        async with self._lock:
            if not self.ended and self.sink is not None:
                await self.sink.write(KEEPALIVE_FRAME)


class _ChoiceSink:
    """One choice's sink for the relay: outputs stay objects (``render`` makes a list), for
    ``_Choices`` to number and write."""

    __slots__ = ("_mux", "index", "render", "write", "empty", "framing", "open_stream")

    def __init__(self, mux: _Choices, index: int) -> None:
        self._mux = mux
        self.index = index
        self.render = list
        self.write = self._write
        self.empty: list[Any] = []
        self.framing = SSE_FRAMING
        self.open_stream: Any = None

    async def _write(self, outs: list[Any]) -> None:
        await self._mux.write(self.index, outs)

    async def flush(self) -> None:
        await self._mux.flush()

    async def keepalive(self) -> None:
        await self._mux.keepalive()

    async def close(self, last: list[Any]) -> None:
        await self._mux.write(self.index, last, last=True)

    async def end(self, events: list[Any]) -> None:
        await self.close(events)
