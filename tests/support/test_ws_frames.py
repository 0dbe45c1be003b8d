"""The WebSocket frame validator (tests/support/ws.py) rejects what it must: a check that cannot
fail proves nothing about the frames the WebSocket tests receive."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from crossfeed.translators.responses.response_object import new_response
from tests.support.ws import FrameLog, FrameViolation

USAGE = {
    "input_tokens": 1,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 1,
}


def response(rid: str = "resp_1", terminal: str = "completed") -> list[dict[str, Any]]:
    base = new_response({}, response_id=rid, created_at=1, model="m")  # every field a Response has
    end: dict[str, Any] = {**base, "status": terminal, "usage": USAGE}
    events = [{"type": "response.created", "response": base}, {"type": "response.in_progress", "response": base}]
    if terminal == "failed":
        end["error"] = {"code": "boom", "message": "it broke"}
        events.append(
            {
                "type": "error",
                "code": "boom",
                "message": "it broke",
                "param": None,
                "error": {"type": "server_error", "code": "boom", "message": "it broke", "param": None},
            }
        )
    events.append({"type": f"response.{terminal}", "response": end})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


ERROR = {
    "type": "error",
    "status": 400,
    "error": {"type": "invalid_request_error", "code": "x", "message": "no", "param": None},
}


def log_of(*frames: dict[str, Any]) -> FrameLog:
    log = FrameLog("test")
    for frame in frames:
        log.add(orjson.dumps(frame))
    return log


def test_valid_frames_pass() -> None:
    first, second = response("resp_1"), response("resp_2", "failed")
    # a request-level error may arrive in the middle of a response (a second create refused)
    log = log_of(ERROR, *first[:2], ERROR, *first[2:], *second)
    assert log.validate() == (2, 2)


def test_cut_response_passes_only_when_allowed() -> None:
    log = log_of(*response()[:2])
    with pytest.raises(FrameViolation, match="never got its terminal event"):
        log.validate()
    log.allow_cut()
    assert log.validate() == (0, 0)


def broken_error(change: str) -> dict[str, Any]:
    frame = copy.deepcopy(ERROR)
    if change == "extra-key":
        frame["code"] = "x"
    elif change == "status-200":
        frame["status"] = 200
    elif change == "status-string":
        frame["status"] = "400"
    elif change == "no-param":
        del frame["error"]["param"]
    elif change == "empty-message":
        frame["error"]["message"] = " "
    elif change == "traceback":
        frame["error"]["message"] = 'Traceback (most recent call last): File "proxy/x.py"'
    elif change == "exception-name":
        frame["error"]["message"] = "KeyError: 'model'"
    return frame


@pytest.mark.parametrize(
    "change", ["extra-key", "status-200", "status-string", "no-param", "empty-message", "traceback", "exception-name"]
)
def test_error_frame_shape_is_exact(change: str) -> None:
    with pytest.raises(FrameViolation):
        log_of(broken_error(change)).validate()


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(response()[1:], id="no-created"),
        pytest.param(response() + response(), id="same-id-twice"),
        pytest.param([*response()[:2], {**response()[2], "sequence_number": 5}], id="numbering"),
        pytest.param(
            [*response(), {"type": "response.output_text.delta", "delta": "x", "sequence_number": 3}],
            id="after-terminal",
        ),
        pytest.param(
            [*response("r", "failed")[:3], {**response("r")[2], "sequence_number": 3}], id="error-then-completed"
        ),
    ],
)
def test_response_rules(frames: list[dict[str, Any]]) -> None:
    with pytest.raises(FrameViolation):
        log_of(*frames).validate()


def test_binary_and_non_json_frames_are_violations() -> None:
    for bad in (lambda log: log.add_binary(b"{}"), lambda log: log.add("{nope"), lambda log: log.add("[1]")):
        log = FrameLog("test")
        with pytest.raises(FrameViolation):
            bad(log)
        with pytest.raises(FrameViolation):  # and recorded: teardown fails too
            log.validate()


def steered_then(*after: dict[str, Any], accepted: bool = True) -> FrameLog:
    """A response ended ``incomplete`` (reason ``steered``), a steer for it accepted first (or
    not), then the ``after`` frames."""
    first = response("resp_1", "incomplete")
    first[-1]["response"]["incomplete_details"] = {"reason": "steered"}
    accept = {"type": "response.steer.accepted", "sequence_number": 0}
    accept["steer"] = {"id": "steer_1", "previous_response_id": "resp_1"}
    return log_of(*first[:2], *([accept] if accepted else []), first[-1], *after)


def successor(previous: str | None) -> list[dict[str, Any]]:
    events = response("resp_2")
    for event in events:
        event["response"]["previous_response_id"] = previous
    return events


def test_a_steered_response_is_followed_by_its_successor() -> None:
    assert steered_then(*successor("resp_1")).validate() == (2, 0)
    pending = {
        "type": "response.steer.pending",
        "sequence_number": 1,
        "reason": "waiting_for_required_input",
        "required_input": [{"type": "function_call_output", "call_id": "call_1", "name": "f"}],
        "steer": {"id": "steer_1", "previous_response_id": "resp_1"},
    }
    assert steered_then(pending).validate() == (1, 0)  # it stopped for the client's tool output


@pytest.mark.parametrize(
    "log, fragment",
    [
        pytest.param(
            lambda: steered_then(*successor("resp_1"), accepted=False), "no response.steer.accepted", id="unasked"
        ),
        pytest.param(lambda: steered_then(), "does not continue from it", id="no-successor"),
        pytest.param(lambda: steered_then(*successor("resp_0")), "does not continue from it", id="other-parent"),
        pytest.param(lambda: steered_then(*successor(None)), "does not continue from it", id="fresh-response"),
    ],
)
def test_a_steered_response_needs_its_steer_and_its_successor(log: Any, fragment: str) -> None:
    with pytest.raises(FrameViolation, match=fragment):
        log().validate()
