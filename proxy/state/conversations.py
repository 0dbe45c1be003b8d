"""The Conversations API on crossfeed's response store, and ``conversation`` on ``responses.create``.

  POST   /v1/conversations                          create (``items``, ``metadata``)
  GET    /v1/conversations/{id}                     retrieve
  POST   /v1/conversations/{id}                     update its metadata
  DELETE /v1/conversations/{id}                     delete
  GET    /v1/conversations/{id}/items               list (``limit``, ``order``, ``after``, ``include``)
  POST   /v1/conversations/{id}/items               add items
  GET    /v1/conversations/{id}/items/{item_id}     one item
  DELETE /v1/conversations/{id}/items/{item_id}     delete one (answers the conversation)

A conversation is a record of the same store as the responses (SQLite, Redis or memory), under
its ``conv_`` id: its items are the record's items, its object (id, created_at, metadata) the
record's ``response``. So it lives where the responses live, is shared by replicas the same way,
expires with the same ``[store] ttl_seconds`` and is scoped by inbound key the same way (another
key's conversation is not found). The response endpoints never serve it, nor it them.

A ``responses.create`` with ``conversation`` (an id or ``{"id": ...}``) has the conversation's items
as its history; when the response ends ``completed`` or ``incomplete``, its input and output items
are appended, with ``store: false`` too, as OpenAI does. With ``previous_response_id`` it is a 400.
An append reads, extends and writes the record; appends in one process are serialised per
conversation, and two replicas appending to one conversation at the same instant could lose one
(a conversation is one client's, turn after turn).
"""

from __future__ import annotations

import asyncio
import collections
from contextvars import ContextVar
from typing import Any

import orjson
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError, ProxyError
from crossfeed.proxy.keys import CLOCK, IDS
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.state.store.base import StoredResponse, StoreError
from crossfeed.proxy.state.store.pagination import InvalidParam, paginate
from crossfeed.proxy.state.store_access import KEEPER, STORE, log, owned, unavailable
from crossfeed.translators.responses.input_items import normalize_input

PREFIX = "conv_"
OBJECT = "conversation"
MAX_ITEMS_ADDED = 20  # items one create or add call may carry, as OpenAI's API
MAX_METADATA = 16
# The conversation the turn being served continues (set when its history is loaded).
CURRENT: ContextVar[str | None] = ContextVar("crossfeed_conversation", default=None)
_LOCKS: collections.OrderedDict[str, asyncio.Lock] = collections.OrderedDict()


def is_conversation(record: StoredResponse | None) -> bool:
    return record is not None and record.response.get("object") == OBJECT


def conversation_param(body: dict[str, Any]) -> str | None:
    """The id a create's ``conversation`` names (a string or ``{"id": ...}``), or None."""
    value = body.get("conversation")
    if value is None:
        return None
    cid = value.get("id") if isinstance(value, dict) else value
    if not isinstance(cid, str) or not cid:
        raise ClientRequestError(
            "`conversation` must be a conversation id or an object with its `id`.",
            param="conversation",
            code="invalid_type",
        )
    if body.get("previous_response_id") is not None:
        raise ClientRequestError(
            "Mutually exclusive parameters: `conversation` and `previous_response_id` cannot both be given.",
            param="conversation",
            code="invalid_value",
        )
    return cid


def _lock(cid: str) -> asyncio.Lock:
    lock = _LOCKS.pop(cid, None) or asyncio.Lock()
    _LOCKS[cid] = lock
    while len(_LOCKS) > 4096:
        old, held = next(iter(_LOCKS.items()))
        if held.locked():
            break
        _LOCKS.pop(old)
    return lock


async def _read(app: web.Application, cid: str, param: str = "conversation_id") -> StoredResponse:
    """The conversation this request's key may see, or the 404 naming ``param``."""
    try:
        record = owned(await app[KEEPER].get(cid)) if cid.startswith(PREFIX) else None
    except StoreError as exc:
        raise unavailable(app, exc, "get", f"conversation with id '{cid}'") from None
    if not is_conversation(record):
        raise ClientRequestError(f"Conversation with id '{cid}' not found.", param=param, status=404, code="not_found")
    assert record is not None
    return record


async def _write(app: web.Application, record: StoredResponse) -> None:
    try:
        await app[STORE].save(record)
    except StoreError as exc:
        raise unavailable(app, exc, "save", f"conversation with id '{record.id}'") from None


def _public(record: StoredResponse) -> dict[str, Any]:
    r = record.response
    return {"id": record.id, "object": OBJECT, "created_at": record.created_at, "metadata": r.get("metadata") or {}}


def _json(value: Any) -> web.Response:
    return web.Response(body=orjson.dumps(value), content_type="application/json")


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    ok = isinstance(value, dict) and len(value) <= MAX_METADATA
    ok = ok and all(
        isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512 for k, v in value.items()
    )
    if not ok:
        raise ClientRequestError(
            f"`metadata` must be an object of at most {MAX_METADATA} string values (keys up to 64 "
            "characters, values up to 512).",
            param="metadata",
            code="invalid_value",
        )
    return dict(value)


def _items(app: web.Application, value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_ITEMS_ADDED:
        raise ClientRequestError(
            f"`items` must be an array of at most {MAX_ITEMS_ADDED} items.", param="items", code="invalid_value"
        )
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not (item.get("type") or item.get("role")):
            raise ClientRequestError(
                "Each item must be an object with a `type` (or a message's `role`).",
                param=f"items[{i}]",
                code="invalid_value",
            )
    return normalize_input(value, app[IDS])


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise ClientRequestError("The request body is not valid JSON.", param=None, code="invalid_json") from None
    if not isinstance(body, dict):
        raise ClientRequestError("The request body must be a JSON object.", param=None, code="invalid_value")
    return body


# -- the endpoints --------------------------------------------------------------------------------


async def create(request: web.Request) -> web.Response:
    app = request.app
    body = await _body(request)
    metadata, items = _metadata(body.get("metadata")), _items(app, body.get("items"))
    cid = app[IDS].new(PREFIX)
    now = int(app[CLOCK]())
    record = StoredResponse(cid, now, {"object": OBJECT, "metadata": metadata}, items, None, KEY_NAME.get())
    await _write(app, record)
    return _json(_public(record))


async def retrieve(request: web.Request) -> web.Response:
    return _json(_public(await _read(request.app, request.match_info["conversation_id"])))


async def update(request: web.Request) -> web.Response:
    app, cid = request.app, request.match_info["conversation_id"]
    body = await _body(request)
    if "metadata" not in body:
        raise ClientRequestError("`metadata` is required.", param="metadata", code="missing_required_parameter")
    metadata = _metadata(body["metadata"])
    async with _lock(cid):
        record = await _read(app, cid)
        record = _replace(record, response={**record.response, "metadata": metadata})
        await _write(app, record)
    return _json(_public(record))


async def delete(request: web.Request) -> web.Response:
    app, cid = request.app, request.match_info["conversation_id"]
    await _read(app, cid)
    try:
        await app[KEEPER].delete(cid)
    except StoreError as exc:
        raise unavailable(app, exc, "delete", f"conversation with id '{cid}'") from None
    return _json({"id": cid, "object": "conversation.deleted", "deleted": True})


async def list_items(request: web.Request) -> web.Response:
    record = await _read(request.app, request.match_info["conversation_id"])
    q = request.query
    try:
        page = paginate(record.input_items, limit=q.get("limit"), order=q.get("order"), after=q.get("after"))
    except InvalidParam as exc:
        raise ClientRequestError(exc.message, param=exc.param, code="invalid_value") from None
    return _json(page)


async def add_items(request: web.Request) -> web.Response:
    app, cid = request.app, request.match_info["conversation_id"]
    body = await _body(request)
    if "items" not in body:
        raise ClientRequestError("`items` is required.", param="items", code="missing_required_parameter")
    items = _items(app, body["items"])
    async with _lock(cid):
        record = await _read(app, cid)
        await _write(app, _replace(record, input_items=[*record.input_items, *items]))
    first, last = (items[0]["id"], items[-1]["id"]) if items else (None, None)
    return _json({"object": "list", "data": items, "first_id": first, "last_id": last, "has_more": False})


def _item(record: StoredResponse, item_id: str) -> dict[str, Any]:
    for item in record.input_items:
        if item.get("id") == item_id:
            return item
    raise ClientRequestError(f"Item with id '{item_id}' not found.", param="item_id", status=404, code="not_found")


async def retrieve_item(request: web.Request) -> web.Response:
    record = await _read(request.app, request.match_info["conversation_id"])
    return _json(_item(record, request.match_info["item_id"]))


async def delete_item(request: web.Request) -> web.Response:
    app, cid, item_id = request.app, request.match_info["conversation_id"], request.match_info["item_id"]
    async with _lock(cid):
        record = await _read(app, cid)
        _item(record, item_id)
        record = _replace(record, input_items=[i for i in record.input_items if i.get("id") != item_id])
        await _write(app, record)
    return _json(_public(record))


def install(app: web.Application) -> None:
    app.router.add_post("/v1/conversations", create)
    app.router.add_get("/v1/conversations/{conversation_id}", retrieve)
    app.router.add_post("/v1/conversations/{conversation_id}", update)
    app.router.add_delete("/v1/conversations/{conversation_id}", delete)
    app.router.add_get("/v1/conversations/{conversation_id}/items", list_items)
    app.router.add_post("/v1/conversations/{conversation_id}/items", add_items)
    app.router.add_get("/v1/conversations/{conversation_id}/items/{item_id}", retrieve_item)
    app.router.add_delete("/v1/conversations/{conversation_id}/items/{item_id}", delete_item)


def _replace(record: StoredResponse, **changes: Any) -> StoredResponse:
    fields = {
        "id": record.id,
        "created_at": record.created_at,
        "response": record.response,
        "input_items": record.input_items,
        "previous_response_id": None,
        "owner": record.owner,
    }
    return StoredResponse(**{**fields, **changes})


# -- responses.create with a conversation ----------------------------------------------------------


async def history(app: web.Application, body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The items of the conversation a create names (None without one); the turn appends to it
    when it ends (``append``)."""
    cid = conversation_param(body)
    if cid is None:
        return None
    record = await _read(app, cid, param="conversation")
    CURRENT.set(cid)
    return list(record.input_items)


async def append_turn(
    app: web.Application, body: dict[str, Any], response: dict[str, Any], new_items: list[Any]
) -> None:
    """After a turn of a conversation: its input and output items appended (a completed or
    incomplete response; a failed one adds nothing). A store that fails is logged, never the turn's
    failure: the response was served."""
    cid = CURRENT.get()
    if cid is None or conversation_param(body) != cid or response.get("status") not in ("completed", "incomplete"):
        return
    output = [item for item in response.get("output") or () if isinstance(item, dict) and item.get("id")]
    try:
        async with _lock(cid):
            record = await _read(app, cid, param="conversation")
            await _write(app, _replace(record, input_items=[*record.input_items, *new_items, *output]))
    except ProxyError as exc:  # deleted meanwhile, or the store is down: said, not raised
        log.warning("conversation.append_failed", conversation=cid, error=exc.message)
