"""What the hosted tool loop does next (pure: no I/O, no clock of its own).

The loop (proxy/turns/hosted/tool_loop.py) asks twice per leg. When the leg has ended
(``ran`` false): the Response ends (an answer, calls for the client, or a model that calls a
hosted tool after being told the calls were spent), or the round runs the hosted calls. After
the round (``ran`` true): the Response ends (a runner stopped it, the client has calls to run,
or it is past its deadline), or the next leg goes, told to answer once the calls are spent.

  ran    hosted  client  final  stopped  overdue  spent  ->  step
  no     no      no      .      .        .        .         end answered
  no     no      yes     .      .        .        .         end client_calls
  no     yes     no      yes    .        .        .         end spent (incomplete)
  no     yes     .       .      .        .        .         round
  yes    .       .       .      yes      .        .         end stopped
  yes    .       yes     .      no       .        .         end client_calls
  yes    .       no      .      no       yes      .         end deadline (incomplete)
  yes    .       no      .      no       no       yes       leg, final (tool_choice "none")
  yes    .       no      .      no       no       no        leg
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Why the Response ended; the last two end it ``incomplete`` with reason ``max_messages``.
Why = Literal["answered", "client_calls", "stopped", "spent", "deadline"]
_INCOMPLETE = frozenset({"spent", "deadline"})


@dataclass(frozen=True, slots=True)
class LegEnd:
    """How a leg ended, and where the loop stands."""

    hosted: bool  # the leg called hosted tools
    client: bool  # the leg called the client's own functions
    final: bool = False  # the leg was told the calls were spent (tool_choice "none")
    ran: bool = False  # the round for its hosted calls has run
    stopped: bool = False  # a runner stopped the Response in that round (an MCP approval)


@dataclass(frozen=True, slots=True)
class Budget:
    spent: bool = False  # no more hosted calls may be made (a runner's budget, or max_tool_calls)
    overdue: bool = False  # past the upstream's total timeout


@dataclass(frozen=True, slots=True)
class Step:
    go: Literal["round", "leg", "end"]
    why: Why | None = None  # for "end"
    final: bool = False  # for "leg": the calls are spent, this leg must answer

    @property
    def incomplete(self) -> str | None:
        """The ``incomplete_details.reason`` of an end, or None for a completed Response."""
        return "max_messages" if self.why in _INCOMPLETE else None


ROUND = Step("round")


def next_step(leg: LegEnd, budget: Budget) -> Step:
    """The loop's next step after ``leg`` (the table in the module's docstring)."""
    if not leg.ran:
        if not leg.hosted:
            return Step("end", "client_calls" if leg.client else "answered")
        if leg.final and not leg.client:  # told the calls were spent, and calling again
            return Step("end", "spent")
        return ROUND
    if leg.stopped:
        return Step("end", "stopped")
    if leg.client:
        return Step("end", "client_calls")
    if budget.overdue:
        return Step("end", "deadline")
    return Step("leg", final=budget.spent)
