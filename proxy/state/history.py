"""Stateful Responses on a stateless backend: store, continue, retrieve, list, delete.

- A response created with ``store`` true (the default) is saved when it ends, whatever its
  terminal status, with the whole resolved input that produced it (the previous chain's items,
  then this request's input), so one lookup rebuilds any conversation.
- Saved before final: the terminal event (or the non-streamed body) waits for the save, up to
  ``[store] save_timeout_seconds``, so a follow-up on another replica finds the response. A store
  that is slower or down does not keep the client waiting: the save goes on in the background.
- A store that cannot save (down, disk full, read-only): the turn streams and completes all the
  same; the failed save is logged and counted and kept in this process's retry queue, saved again
  in the background until the store takes it (proxy/state/store_retry.py). Meanwhile this process
  serves follow-ups to it from the queue (``previous_response_id``, ``GET``, ``input_items``,
  ``DELETE``, ``item_reference``). A lookup that misses while saves fail (or within 30 s of their
  recovery) answers 503 ``store_unavailable`` naming the failed saves, since it may be a response
  whose save failed in another process; one this process gave up on (its queue was full) answers
  404 saying its save failed; never a bare "not found" for an id crossfeed may have handed out.
- A store that cannot be read: 503 ``store_unavailable`` naming the store, never a hang (every
  store call is bounded by ``[store] operation_timeout_seconds``) and never a 500; the same as an
  error frame in WebSocket mode.
- ``GET /v1/responses/{id}`` (``?stream=true`` replays it as events), ``DELETE`` and
  ``GET .../input_items`` (``limit``, ``order``, ``after``, ``before``).
- ``item_reference`` input items (``{"type": "item_reference", "id": ...}``, or ``{"id": ...}``)
  are replaced by the items they name, looked up by item id in the store (an output or input item
  of a stored response of this key), before the request is mapped; the stored input then holds
  the items themselves. An id not found for this key -> 400 ``input[i].id``.
- A reasoning item replayed by its id only (no summary, content or encrypted_content: LangChain's
  stream merge) is filled the same way from the stored item of that id, as OpenAI does, so the
  backend's tool turn gets its reasoning back. One not found for this key, or a store that cannot
  be read, leaves it as it came (it carries nothing; the turn goes on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CONFIG, IDS
from crossfeed.proxy.runtime import tracing
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.state import affinity
from crossfeed.proxy.state.conversations import CURRENT, append_turn, is_conversation
from crossfeed.proxy.state.conversations import history as conversation_history
from crossfeed.proxy.state.runs import answer_run, find_run, forget_run
from crossfeed.proxy.state.store.base import StoredResponse, StoreError, stored_item
from crossfeed.proxy.state.store.pagination import InvalidParam, paginate
from crossfeed.proxy.state.store_access import KEEPER, StoreUnavailable, owned, unavailable
from crossfeed.translators.forward.input import bare_reasoning, fill_reasoning, item_references, resolve_references
from crossfeed.translators.responses.input_items import continued_history, normalize_input
from crossfeed.translators.responses.replay import replay_events
from crossfeed.translators.sse import render_responses

log = structlog.get_logger("crossfeed")

PENDING: web.AppKey[set[asyncio.Task[None]]] = web.AppKey("pending_saves", set)
SAVING: web.AppKey[dict[str, asyncio.Task[None]]] = web.AppKey("saving_by_id", dict)


async def load_history(app: web.Application, body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The conversation a ``previous_response_id`` continues, or the items of the ``conversation``
    a create names (proxy/state/conversations.py), or None without either. The body's
    ``item_reference`` input items are resolved here too (``resolve_item_references``)."""
    # Each step is awaited only when the body has what it reads: a plain create (no conversation,
    # no previous_response_id, an input that is no list) makes no coroutine here at all.
    history = await conversation_history(app, body) if body.get("conversation") is not None else None
    if history is None and body.get("previous_response_id") is not None:
        history = await _previous(app, body)
    if isinstance(body.get("input"), list):  # (only a list holds item references)
        await resolve_item_references(app, body)
    return history


async def resolve_item_references(app: web.Application, body: dict[str, Any]) -> None:
    """Put in ``body["input"]`` (a new list; the items the client sent are not changed) the
    stored items its ``item_reference`` items name, so that the mapping, the saved input and the
    hosted-tool loops all see the items themselves. Looked up by item id (an indexed store read),
    keyed by the request's key name: another key's items are not found. An id not found -> 400
    ``input[i].id`` (translators.forward.input.resolve_references). Reasoning items replayed by
    id only are filled from the store too (``_fill_reasoning``)."""
    inp = body.get("input")
    refs = item_references(inp)
    if not refs or not isinstance(inp, list):
        await _fill_reasoning(app, body)
        return
    wanted = list(dict.fromkeys(ref for _, ref in refs))
    found = await _find_items(app, wanted)
    if len(found) < len(wanted) and app[SAVING]:
        # A save of this process still finishing (a slow store) may hold them: wait for it.
        await asyncio.wait(list(app[SAVING].values()), timeout=10)
        found.update(await _find_items(app, [ref for ref in wanted if ref not in found]))
    missing = [ref for ref in wanted if ref not in found]
    if missing:  # while saves fail, it may be an item of a response whose save failed: say so
        miss = await app[KEEPER].explain_miss(missing[0], KEY_NAME.get())
        if miss is not None and not miss.permanent:
            raise StoreUnavailable(miss.message(f"Input item '{missing[0]}'"))
    body["input"] = resolve_references(inp, found)
    await _fill_reasoning(app, body)


async def _fill_reasoning(app: web.Application, body: dict[str, Any]) -> None:
    """Fill the input's id-only reasoning items from the store (``bare_reasoning``), for this key;
    best effort: a miss or a store that cannot be read leaves them as they came."""
    inp = body.get("input")
    bare = bare_reasoning(inp)
    if not bare or not isinstance(inp, list):
        return
    wanted = list(dict.fromkeys(rid for _, rid in bare))
    try:
        found = await _find_items(app, wanted)
        if len(found) < len(wanted) and app[SAVING]:  # a save of this process still finishing
            await asyncio.wait(list(app[SAVING].values()), timeout=10)
            found.update(await _find_items(app, [rid for rid in wanted if rid not in found]))
    except StoreUnavailable as exc:
        log.warning("reasoning.not_filled", error=exc.message)
        return
    if found:
        body["input"] = fill_reasoning(inp, found)


async def _find_items(app: web.Application, item_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The items of ``item_ids`` found for this key. One read per record, not per id: a record
    found for one id is searched for the others too (a conversation's latest response holds its
    whole history, so a client replaying it by reference costs one read)."""
    keeper, owner = app[KEEPER], KEY_NAME.get()
    found = keeper.queued_items(item_ids, owner)  # saves of this process that failed, kept for retry
    left = [item_id for item_id in item_ids if item_id not in found]
    while left:
        item_id = left.pop()  # the latest first: the newest record holds the earlier ones too
        try:
            record = visible(await keeper.get_by_item(item_id, owner))
        except StoreError as exc:
            raise unavailable(app, exc, "get", f"input item '{item_id}'") from None
        if record is None:
            continue
        for other in [item_id, *left]:
            item = stored_item(record, other)
            if item is not None:
                found[other] = item
        left = [other for other in left if other not in found]
    return found


async def _previous(app: web.Application, body: dict[str, Any]) -> list[dict[str, Any]] | None:
    prev = body.get("previous_response_id")
    if prev is None:
        return None
    if not isinstance(prev, str) or not prev:
        raise ClientRequestError(
            "`previous_response_id` must be a non-empty string", param="previous_response_id", code="invalid_type"
        )
    record, why = await _lookup(app, prev, f"Previous response with id '{prev}'")
    if record is None:
        raise ClientRequestError(
            why or f"Previous response with id '{prev}' not found.",
            param="previous_response_id",
            status=404,
            code="previous_response_not_found",
        )
    affinity.continues(record.id, record.routed)  # a pool's turn goes where that response went
    return continued_history(record.input_items, record.response)


async def _lookup(app: web.Application, rid: str, subject: str) -> tuple[StoredResponse | None, str | None]:
    """The record of ``rid`` this request's key may see: from a save of this process still
    finishing (waited for), from the retry queue (its save failed), else from the store. None:
    not found, with the 404's message when this process gave its save up. Raises 503
    ``store_unavailable`` when the store cannot be read, or when it misses while saves fail (it
    may be one whose save failed, in another process)."""
    saving = app[SAVING].get(rid)
    if saving is not None:  # the client was faster than our background save: wait for it
        await asyncio.wait([saving], timeout=10)
    keeper = app[KEEPER]
    record = visible(keeper.queued(rid))
    if record is not None:
        return record, None
    try:
        record = visible(await keeper.get(rid))
    except StoreError as exc:
        raise unavailable(app, exc, "get", subject[0].lower() + subject[1:]) from None
    if record is not None:
        return record, None
    miss = await keeper.explain_miss(rid, KEY_NAME.get())
    if miss is None:
        return None, None
    if not miss.permanent:
        raise StoreUnavailable(miss.message(subject))
    return None, miss.message(subject)


async def save_before_final(
    app: web.Application,
    body: dict[str, Any],
    response: dict[str, Any] | None,
    history: list[dict[str, Any]] | None,
    ids: Any,
) -> None:
    """Save ``response`` and wait for it, up to ``save_timeout_seconds`` (then it finishes in the
    background, and a wait in this process still finds it). A turn of a conversation appends its
    items to it (``store`` false too)."""
    new_items = normalize_input(body.get("input"), ids)
    if response is not None and CURRENT.get() is not None:
        await append_turn(app, body, response, new_items)
    task = schedule_save(app, body, response, history, new_items)
    if task is None:
        return
    timeout = app[CONFIG].store.save_timeout_seconds
    if not timeout:  # saved after the terminal event, as asked (a wait in this process still finds it)
        return
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        app[METRICS].store_failures.labels("save_late").inc()
        log.warning("store.save_late", response_id=response["id"] if response else None, waited_seconds=timeout)


def final_saver(
    app: web.Application, body: dict[str, Any], history: list[dict[str, Any]] | None, *, keep_failed: bool = True
) -> Callable[[Any], Awaitable[None]]:
    """The exchange's ``before_end``: saves the machine's final Response before its terminal
    event goes out, once however many ends the turn has (``keep_failed`` false: a failed
    Response is not kept, as for a compaction)."""
    saved = False

    async def save(machine: Any) -> None:
        nonlocal saved
        final = machine.final_response
        if saved or final is None or (not keep_failed and final.get("status") == "failed"):
            return
        saved = True
        await save_before_final(app, body, final, history, app[IDS])

    return save


def schedule_save(
    app: web.Application,
    body: dict[str, Any],
    response: dict[str, Any] | None,
    history: list[dict[str, Any]] | None,
    new_items: list[dict[str, Any]],
) -> asyncio.Task[None] | None:
    """Start saving ``response`` (a background task, returned); None when nothing is saved.
    ``new_items``: the request's input as stored items."""
    if response is not None:
        tracing.responded(response["id"])  # its trace's session (a chain continues it, stored or not)
    if response is None or body.get("store") is False:
        return None
    items = (history or []) + new_items
    record = StoredResponse(
        id=response["id"],
        created_at=int(response.get("created_at") or 0),
        response=response,
        input_items=items,
        previous_response_id=body.get("previous_response_id"),
        owner=KEY_NAME.get(),
        routed=affinity.routing(response["id"]),
    )
    task = asyncio.get_running_loop().create_task(_save(app, record))
    app[PENDING].add(task)
    app[SAVING][record.id] = task

    def done(t: asyncio.Task[None]) -> None:
        app[PENDING].discard(t)
        app[SAVING].pop(record.id, None)

    task.add_done_callback(done)
    return task


async def _save(app: web.Application, record: StoredResponse) -> None:
    await app[KEEPER].save(record)  # a failure is counted, logged and kept for retry: never raised
    if record.routed is None and affinity.CURRENT.get() is not None:  # a pool's turn not routed
        await affinity.saved(app, record.id)  # (no replica answered): its chain's key is kept apart


def visible(record: StoredResponse | None) -> StoredResponse | None:
    """The stored response, if the current request's key may see it (``owned``); a conversation
    (proxy/state/conversations.py) is never a response."""
    record = owned(record)
    return None if record is None or is_conversation(record) else record


async def _record(request: web.Request) -> StoredResponse:
    rid = request.match_info["response_id"]
    record, why = await _lookup(request.app, rid, f"Response with id '{rid}'")
    if record is None:
        raise ClientRequestError(
            why or f"Response with id '{rid}' not found.", param="response_id", status=404, code="not_found"
        )
    return record


async def get_response(request: web.Request) -> web.StreamResponse:
    run = await find_run(request.app, request.match_info["response_id"])
    if run is not None:  # a background response (proxy/state/runs.py): running or ended
        return await answer_run(request, run)
    record = await _record(request)
    if request.query.get("stream") in ("true", "1"):
        events = replay_events(record.response, request.app[CONFIG].server.event_names(KEY_NAME.get()))
        after = request.query.get("starting_after")
        if after is not None and after.lstrip("-").isdigit():
            events = [e for e in events if e["sequence_number"] > int(after)]
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        await resp.write(render_responses(events))
        await resp.write_eof()
        return resp
    return web.Response(body=orjson.dumps(record.response), content_type="application/json")


async def delete_response(request: web.Request) -> web.Response:
    rid = request.match_info["response_id"]
    await _record(request)  # another key's response is not there for this one: 404
    keeper = request.app[KEEPER]
    queued = await keeper.discard(rid)  # a response whose save failed: it leaves the retry queue
    try:
        deleted = await keeper.delete(rid) or queued
    except StoreError as exc:
        if not queued:  # (a queued one was never stored: deleted all the same)
            raise unavailable(request.app, exc, "delete", f"response with id '{rid}'") from None
        deleted = True
    if not deleted:
        raise ClientRequestError(
            f"Response with id '{rid}' not found.", param="response_id", status=404, code="not_found"
        )
    await forget_run(request.app, rid)  # a background response's run answers no more
    return web.Response(
        body=orjson.dumps({"id": rid, "object": "response.deleted", "deleted": True}), content_type="application/json"
    )


async def list_input_items(request: web.Request) -> web.Response:
    record = await _record(request)
    q = request.query
    try:
        page = paginate(
            record.input_items, limit=q.get("limit"), order=q.get("order"), after=q.get("after"), before=q.get("before")
        )
    except InvalidParam as exc:
        raise ClientRequestError(exc.message, param=exc.param, code="invalid_value") from None
    return web.Response(body=orjson.dumps(page), content_type="application/json")


async def drain_saves(app: web.Application) -> None:
    saves = app[PENDING]
    pending = list(saves)
    if pending:
        await asyncio.wait(pending, timeout=10)
