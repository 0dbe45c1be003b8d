"""The hosted tool loop's control (proxy/turns/hosted/control.py), row by row: how a leg ended,
the budget and the deadline -> the next step (the round, the next leg, or the end and why).
Pure: no HTTP, no clock."""

from __future__ import annotations

import pytest

from crossfeed.proxy.turns.hosted.control import Budget, LegEnd, Step, next_step

SPENT = Budget(spent=True)
OVERDUE = Budget(overdue=True)
BOTH = Budget(spent=True, overdue=True)

ROWS = [
    # a leg has just ended (the round has not run)
    ("an answer", LegEnd(hosted=False, client=False), Budget(), Step("end", "answered")),
    ("an answer on the final leg", LegEnd(hosted=False, client=False, final=True), SPENT, Step("end", "answered")),
    ("an answer past the deadline", LegEnd(hosted=False, client=False), OVERDUE, Step("end", "answered")),
    ("calls for the client", LegEnd(hosted=False, client=True), Budget(), Step("end", "client_calls")),
    ("client calls, final leg", LegEnd(hosted=False, client=True, final=True), SPENT, Step("end", "client_calls")),
    ("hosted calls", LegEnd(hosted=True, client=False), Budget(), Step("round")),
    ("hosted calls, the budget spent by now", LegEnd(hosted=True, client=False), SPENT, Step("round")),
    ("hosted calls past the deadline: the round runs", LegEnd(hosted=True, client=False), OVERDUE, Step("round")),
    ("hosted and client calls", LegEnd(hosted=True, client=True), Budget(), Step("round")),
    (
        "hosted calls after being told to answer",
        LegEnd(hosted=True, client=False, final=True),
        SPENT,
        Step("end", "spent"),
    ),
    ("hosted and client calls on the final leg", LegEnd(hosted=True, client=True, final=True), SPENT, Step("round")),
    # the round has run
    ("round made, budget left", LegEnd(hosted=True, client=False, ran=True), Budget(), Step("leg")),
    ("round made, budget spent", LegEnd(hosted=True, client=False, ran=True), SPENT, Step("leg", final=True)),
    ("round made past the deadline", LegEnd(hosted=True, client=False, ran=True), OVERDUE, Step("end", "deadline")),
    ("spent and past the deadline", LegEnd(hosted=True, client=False, ran=True), BOTH, Step("end", "deadline")),
    (
        "a call waits for approval",
        LegEnd(hosted=True, client=False, ran=True, stopped=True),
        Budget(),
        Step("end", "stopped"),
    ),
    (
        "approval past the deadline",
        LegEnd(hosted=True, client=False, ran=True, stopped=True),
        BOTH,
        Step("end", "stopped"),
    ),
    (
        "approval and client calls",
        LegEnd(hosted=True, client=True, ran=True, stopped=True),
        Budget(),
        Step("end", "stopped"),
    ),
    ("the client has calls to run", LegEnd(hosted=True, client=True, ran=True), Budget(), Step("end", "client_calls")),
    ("client calls past the deadline", LegEnd(hosted=True, client=True, ran=True), BOTH, Step("end", "client_calls")),
    (
        "client calls, final leg, round made",
        LegEnd(hosted=True, client=True, final=True, ran=True),
        SPENT,
        Step("end", "client_calls"),
    ),
    (
        "final leg's round made (refused), again",
        LegEnd(hosted=True, client=False, final=True, ran=True),
        SPENT,
        Step("leg", final=True),
    ),
]


@pytest.mark.parametrize(("leg", "budget", "step"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_next_step(leg: LegEnd, budget: Budget, step: Step) -> None:
    assert next_step(leg, budget) == step


@pytest.mark.parametrize(
    ("why", "incomplete"),
    [
        ("answered", None),
        ("client_calls", None),
        ("stopped", None),
        ("spent", "max_messages"),
        ("deadline", "max_messages"),
    ],
)
def test_an_end_is_incomplete_only_when_a_bound_fired(why: str, incomplete: str | None) -> None:
    assert Step("end", why).incomplete == incomplete  # type: ignore[arg-type]


def test_a_leg_or_round_is_never_incomplete() -> None:
    assert Step("leg").incomplete is None and Step("round").incomplete is None
