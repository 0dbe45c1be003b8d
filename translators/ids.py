"""Identity for generated objects.

Translators never invent ids or read the clock themselves: an ``IdFactory`` is injected, so that
production gets random ids (``proxy.runtime.ids.RandomIds``) and tests get stable ones
(``SequentialIds``), which keeps golden transcripts byte-for-byte reproducible.
"""

from __future__ import annotations

from typing import Protocol


class IdFactory(Protocol):
    def new(self, prefix: str) -> str:
        """Return a fresh id that starts with ``prefix`` (``resp_``, ``msg_``, ``fc_``...)."""
        ...


class SequentialIds:
    """Deterministic ids for tests: ``msg_0001``, ``fc_0002``... (one counter for all prefixes)."""

    __slots__ = ("_n",)

    def __init__(self) -> None:
        self._n = 0

    def new(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n:04d}"


# Prefixes used on the wire (docs/wire-facts.md, Ids). Clients treat ids as opaque.
RESPONSE = "resp_"
MESSAGE = "msg_"
REASONING = "rs_"
FUNCTION_CALL = "fc_"
CUSTOM_TOOL_CALL = "ctc_"
TOOL_SEARCH_CALL = "tsc_"
CALL = "call_"
CHAT_COMPLETION = "chatcmpl-"
