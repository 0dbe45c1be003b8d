"""Continuation: a pooled answer whose replica dies in the middle of its text or its reasoning
goes on on another replica (README "Continuation"; docs/DESIGN.md "Continuation").

A pool with ``continue_on_failure`` drives its forward turns' machine through ``Continuing``.
When the upstream stream breaks (the connection drops, the idle timeout fires, or it closes
without a finish_reason) where the answer may go on (``ChatToResponsesStream.partial``: in the
text of a message, no call in this leg, or in the reasoning the leg began with; continuations
left), the failure never reaches the machine: the relay ends the leg with nothing written,
``broken`` says why, and the exchange (``exchange.continue_legs``) asks another healthy replica
for the same request with the partial text, or ``"<think>\n"`` + the partial reasoning, as a
prefill (translators/forward/prefill.py; ``reasoning_prefill = "reasoning_field"``: the partial
reasoning in the assistant message's reasoning field instead, with empty content; in the
``think_tag`` form, for llama.cpp's server, a reasoning prefill also turns its template's
``enable_thinking`` off: older builds refuse a prefill with thinking on). Its stream goes into
the same machine (``resume``; the prefill dropped when the backend repeats it first, as
llama.cpp's server does; after a ``think_tag`` reasoning prefill, raw content is reasoning until
its ``</think>``: prefill.ThinkResume), so the client sees one Response: the same item, its text
continuous, ``sequence_number`` continuous, one terminal event. Anywhere else (in a call's
arguments, a refusal, a total timeout, crossfeed draining) the failure is the machine's, as
without it.

The per-chunk path is the machine's own: ``feed`` and ``feed_frame`` are its bound methods.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from crossfeed.proxy.runtime.config import Upstream
from crossfeed.proxy.runtime.observability import METRICS
from crossfeed.proxy.turns.turn import Turn
from crossfeed.translators.forward.machine import ChatToResponsesStream
from crossfeed.translators.forward.prefill import THINK, PrefillEcho, ThinkResume, prefill_body
from crossfeed.translators.pump import Machine, Out, RunTaken

log = structlog.get_logger("crossfeed")

# The failures of a stream that began that another replica may not have.
CONTINUABLE = frozenset({"upstream_disconnected", "upstream_idle_timeout", "upstream_truncated"})
_TRUNCATED = "the upstream closed the stream before it finished"

BeforeEnd = Callable[[Machine], Awaitable[None]]


class Continuing:
    """A forward machine whose leg may be continued on another replica (see the module's text)."""

    __slots__ = (
        "machine",
        "feed",
        "feed_frame",
        "feed_run",
        "diagnostics",
        "broken",
        "prefill",
        "reasoning",
        "left",
        "form",
        "_echo",
        "_think",
    )

    def __init__(self, machine: ChatToResponsesStream, budget: int, *, form: str = "think_tag") -> None:
        self.machine = machine
        self.feed: Callable[[dict[str, Any]], list[Out]] = machine.feed
        self.feed_frame: Callable[[bytes], list[Out] | None] | None = machine.feed_frame
        self.feed_run: Callable[[bytes], RunTaken | None] | None = machine.feed_run
        self.diagnostics = machine.diagnostics
        self.broken: tuple[str, str] | None = None  # the failure left to a continuation: code, message
        self.prefill = ""  # the partial text the continuation takes
        self.reasoning = False  # ... and it is the answer's reasoning
        self.left = budget  # continuations this turn may still make
        self.form = form  # how a reasoning prefill is sent (reasoning_prefill): think_tag or reasoning_field
        self._echo = PrefillEcho("")
        self._think: ThinkResume | None = None  # the content of a continued reasoning, until settled

    @property
    def packed(self) -> int:
        return self.machine.packed

    @property
    def done(self) -> bool:
        return self.broken is not None or self.machine.done

    @property
    def final_response(self) -> dict[str, Any] | None:
        return self.machine.final_response

    @property
    def steerable(self) -> bool:
        return self.machine.steerable

    def start(self) -> list[Out]:
        return self.machine.start()

    def steer(self) -> list[Out]:
        return self.machine.steer()

    def cancel(self, message: str) -> list[Out]:
        return self.machine.cancel(message)

    def finish(self, *, clean: bool = True) -> list[Out]:
        if not clean and self._broke("upstream_truncated", _TRUNCATED):
            return []
        return self.machine.finish(clean=clean)

    def fail(self, code: str, message: str) -> list[Out]:
        if code in CONTINUABLE and self._broke(code, message):
            return []
        return self.machine.fail(code, message)

    def _broke(self, code: str, message: str) -> bool:
        if self.left <= 0:
            return False
        found = self.machine.partial()
        if found is None:
            return False
        self.broken, self.prefill, self.reasoning = (code, message), found[1], found[0] == "reasoning"
        return True

    def request(self, body: dict[str, Any], up: Upstream) -> dict[str, Any]:
        """The chat request ``body`` continued after the partial output (translators/forward/prefill.py),
        in the forms ``up``'s backend takes (``prefill``, ``reasoning_field``; a reasoning prefill in ``form``)."""
        return prefill_body(
            body, self.prefill, up.prefill, reasoning=self.reasoning, form=self.form, field=up.profile.reasoning_field
        )

    def resume(self) -> None:
        """The continuation's stream is open: the machine takes it as the rest of its leg. Until
        its text shows whether the backend repeats the prefill (prefill.PrefillEcho), and after a
        ``think_tag`` reasoning prefill until it shows how the reasoning goes on (prefill.ThinkResume:
        after a ``reasoning_field`` one the backend parses the thought it was given), its
        chunks go through ``_unecho`` (as dicts: that leg's pump decodes no typed frames)."""
        self.machine.resume()
        self.broken = None
        self.left -= 1
        self._think = ThinkResume() if self.reasoning and self.form == "think_tag" else None
        if self.prefill or self.reasoning:
            text = self.prefill
            self._echo = PrefillEcho(THINK + text, text) if self.reasoning and text else PrefillEcho(text)
            self.feed = self._unecho
            self.feed_frame = self.feed_run = None

    def _unecho(self, chunk: dict[str, Any]) -> list[Out]:
        machine = self.machine
        chunks = self._echo.feed(chunk)
        think = self._think
        if think is not None:
            chunks = [one for piece in chunks for one in think.feed(piece)]
        if not self._echo.left and (think is None or not think.left):  # settled: the machine's own feed from now on
            self.feed = machine.feed
        out: list[Out] = []
        for one in chunks:
            out += machine.feed(one)
            if machine.done:
                break
        return out

    def give_up(self) -> list[Out]:
        """No replica could take the continuation: the failure is the machine's, as it would have been."""
        assert self.broken is not None
        code, message = self.broken
        self.broken = None
        return self.machine.fail(code, message)

    def guard(self, before_end: BeforeEnd | None) -> BeforeEnd | None:
        """``before_end`` for the relay, acting only once the machine has really ended (a broken
        leg looks ended to the relay)."""
        if before_end is None:
            return None
        machine = self.machine

        async def guarded(_: Machine) -> None:
            if machine.done:
                await before_end(machine)

        return guarded


def continuing(turn: Turn, machine: Any) -> Continuing | None:
    """The turn's machine as a ``Continuing`` when its upstream continues answers, else None."""
    up = turn.upstream
    if not (up.pooled and up.continue_on_failure and isinstance(machine, ChatToResponsesStream)):
        return None
    return Continuing(machine, up.max_continuations, form=up.reasoning_prefill)


def noted(turn: Turn, outcome: str, code: str, dead: str | None) -> None:
    """A continuation on the turn's summary line (``continued``/``retried``: how many) and in the
    metrics. Outcomes: ``continued`` (a stream went on on another replica), ``retried`` (a whole
    answer was asked again of another; exchange.whole_leg), ``failed`` (no replica took it)."""
    name = turn.upstream.name
    turn.app[METRICS].continuations.labels(name, outcome).inc()
    if outcome == "continued":
        turn.log["continued"] = turn.log.get("continued", 0) + 1
    elif outcome == "retried":
        turn.log["retried"] = turn.log.get("retried", 0) + 1
    log.info("pool.continuation", upstream=name, outcome=outcome, error=code, dead=dead, now=turn.log.get("replica"))
