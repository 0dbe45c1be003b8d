"""The numbering core of the machines that produce Responses events.

Three machines produce a Responses stream: the forward machine (chat chunks -> events; its
Response assembler, ``translators/forward/assembler.py``, extends this base), the relay of a
Responses upstream (``relay.py``) and the normaliser of a sloppy one (``normalize.py``). Each
numbers its own stream, from 0 and one apart, whatever the upstream sent, with this base:

- ``_seq`` is the one counter of ``sequence_number``; ``_emit`` stamps it on a dict event and
  appends the event to ``_out``, the events of the call in progress (a machine sets ``_out`` to
  a fresh list at the start of each public call and returns it);
- ``_emit_error`` is the ``error`` event every failure sends before ``response.failed``, in
  one shape for the three;
- ``_note`` counts what a machine repaired or dropped in ``diagnostics``, for the driver's log.

Nothing else stamps, but the forward machine's per-token paths, which take their number from
the same counter inline (``_more_text``, and ``_frame`` in wire mode; also ``start()``'s two
frames): a method call per token would cost more than the rest of their work. The counter is a
slot, also in the forward machine's instances, which keep their other attributes in a dict.
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class NumberedStream:
    """Base of a machine whose events carry ``sequence_number``: the counter and its stamping."""

    __slots__ = ("_seq", "_out", "diagnostics", "packed")

    def __init__(self) -> None:
        self._seq = 0
        self.packed = 0  # events put out inside another output (an SSE run's, one bytes): Pump.packed
        self._out: list[Any] = []  # dict events (the forward machine's wire mode: finished frames too)
        self.diagnostics: dict[str, int] = {}

    def _emit(self, event: Event) -> None:
        event["sequence_number"] = self._seq
        self._seq += 1
        self._out.append(event)

    def _emit_error(self, code: str, message: str, error_type: str = "server_error") -> None:
        """The ``error`` event of a failing stream (then ``response.failed``), as OpenAI sends it."""
        self._emit(
            {
                "type": "error",
                "code": code,
                "message": message,
                "param": None,
                "error": {"type": error_type, "code": code, "message": message, "param": None},
            }
        )

    def cancel(self, message: str) -> list[Any]:
        """End the stream as cancelled (the client asked it to stop): ``fail``'s ending (open
        items closed ``incomplete``), without its ``error`` event; the terminal event is
        ``response.failed`` carrying ``status: "cancelled"`` and no error (the SDKs' event
        union has no other terminal event for a cancelled Response)."""
        out: list[Any] = self.fail("cancelled", message)  # type: ignore[attr-defined]
        error = next(i for i, e in enumerate(out) if e.__class__ is dict and e.get("type") == "error")
        del out[error]
        self._seq -= 1
        last = out[-1]
        last["sequence_number"] -= 1
        last["response"].update(status="cancelled", error=None)  # the machine's final Response too
        return out

    def _note(self, kind: str) -> None:
        self.diagnostics[kind] = self.diagnostics.get(kind, 0) + 1
