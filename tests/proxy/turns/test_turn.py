"""The turn a transport builds (proxy/turns/turn.py) and the one create decision both transports
call (proxy/turns/forward.respond). Over HTTP and WebSocket: tests/integration."""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from crossfeed.proxy.errors import ClientRequestError
from crossfeed.proxy.keys import CLOCK, CONFIG, IDS, SEAL, SESSION
from crossfeed.proxy.runtime.config import Config, Upstream
from crossfeed.proxy.runtime.guard import KEY_NAME
from crossfeed.proxy.runtime.ids import RandomIds
from crossfeed.proxy.runtime.observability import TurnLog
from crossfeed.proxy.state.reasoning_seal import ReasoningSeal
from crossfeed.proxy.turns.turn import Turn, new_turn, route

ROOT = Path(__file__).resolve().parents[3]
CONFIG_TWO = Config(
    upstreams=(
        Upstream(name="local", base_url="http://127.0.0.1:1/v1", models=("llama-*",)),
        Upstream(name="hosted", base_url="http://127.0.0.1:2/v1", models=("gpt-x",), default=True),
    )
)


def test_route_names_the_model_and_the_upstream_on_the_log_in_that_order() -> None:
    log: TurnLog = {"key": "team-a"}
    assert route(CONFIG_TWO, {"model": "llama-3"}, log).name == "local"
    assert list(log.items()) == [("key", "team-a"), ("model", "llama-3"), ("upstream", "local")]


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        ({}, "missing_required_parameter", 400),
        ({"model": 7}, "invalid_type", 400),
        ({"model": ""}, "invalid_type", 400),
    ],
)
def test_route_refuses_a_body_without_a_model_string(body: dict[str, Any], code: str, status: int) -> None:
    log: TurnLog = {}
    with pytest.raises(ClientRequestError) as caught:
        route(CONFIG_TWO, body, log)
    assert (caught.value.code, caught.value.status, caught.value.param) == (code, status, "model")
    assert log == {}


def test_route_logs_a_model_no_upstream_serves_before_the_404() -> None:
    only = Config(upstreams=(Upstream(name="local", base_url="http://127.0.0.1:1/v1", models=("llama-*",)),))
    log: TurnLog = {}
    with pytest.raises(ClientRequestError) as caught:
        route(only, {"model": "gpt-x"}, log)
    assert (caught.value.code, caught.value.status) == ("model_not_found", 404)
    assert log == {"model": "gpt-x", "upstream": None}


def _app() -> web.Application:
    app = web.Application()
    app[CONFIG] = CONFIG_TWO
    app[SESSION] = object()  # type: ignore[assignment]  # never used here: no call is made
    app[IDS] = RandomIds()
    app[CLOCK] = lambda: int(time.time())
    app[SEAL] = ReasoningSeal(None)
    return app


def test_a_turn_holds_the_services_the_upstream_the_owner_and_the_log() -> None:
    app = _app()
    log: TurnLog = {}
    headers = {"OpenAI-Organization": "org-1"}
    token = KEY_NAME.set("team-a")
    try:
        turn = new_turn(app, headers, CONFIG_TWO.upstreams[1], log)
    finally:
        KEY_NAME.reset(token)
    assert turn.app is app and turn.config is CONFIG_TWO and turn.ids is app[IDS] and turn.seal is app[SEAL]
    assert turn.upstream.name == "hosted" and turn.headers is headers and turn.log is log
    assert turn.owner == "team-a"
    assert new_turn(app, headers, CONFIG_TWO.upstreams[1], {}).owner == ""  # no inbound keys
    with pytest.raises(dataclasses.FrozenInstanceError):
        turn.owner = "team-b"  # type: ignore[misc]
    assert not any(f.type in ("web.Request", "Request") for f in dataclasses.fields(Turn))


def _imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


@pytest.mark.parametrize("transport", ["proxy/app.py", "proxy/http/websocket.py"])
def test_the_create_decision_is_made_once_for_both_transports(transport: str) -> None:
    """HTTP and WebSocket call ``respond``; neither maps a request, loads the history or picks a
    forward plan itself."""
    names = _imported_names(ROOT / transport)
    assert "respond" in names
    decided_there = {"map_forward", "load_history", "forward_turn", "forward_streamed", "forward_now", "hosted_turn"}
    assert names & decided_there == set()


def test_the_per_request_records_are_made_in_one_step() -> None:
    """Turn, Create, MappedRequest and ChatCall are made for every request: their ``__init__`` is
    ``quick_init``'s (one ``__dict__`` write), not the frozen dataclass's (a call per field)."""
    from crossfeed.proxy.turns.reverse import ChatCall
    from crossfeed.proxy.turns.turn import Create
    from crossfeed.translators.forward.request import MappedRequest

    for cls in (Turn, Create, MappedRequest, ChatCall):
        assert cls.__init__.__code__.co_names == ("_set",), cls
        assert dataclasses.is_dataclass(cls)
