"""aioresponses for unit tests of the upstream client's edges: no socket, every call recorded.

aioresponses 0.7.9 (its latest release) builds its ``ClientResponse`` without the ``stream_writer``
argument aiohttp 3.14 requires (pnuckowski/aioresponses#289); ``MockedHTTP`` passes a response
class that supplies one. ``StalledBody`` is a response whose body never ends after its first
bytes, for the idle and total timeouts of a body read.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import aiohttp
from aioresponses import aioresponses
from yarl import URL

_SENT = types.SimpleNamespace(output_size=0)  # what aiohttp reads from a writer that has finished


class MockedResponse(aiohttp.ClientResponse):
    def __init__(self, method: str, url: URL, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", _SENT)
        super().__init__(method, url, **kwargs)


class _Open:
    """A connection that stays open (aioresponses' own reports itself closed to a waiting read)."""

    connected = True
    _reading_paused = False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _NoEOF(aiohttp.StreamReader):
    def feed_eof(self) -> None:
        pass


class StalledBody(MockedResponse):
    """aioresponses feeds the whole body and then EOF into ``content``: this one drops the EOF."""

    @property
    def content(self) -> aiohttp.StreamReader:
        return self._stalled

    @content.setter
    def content(self, fresh: aiohttp.StreamReader) -> None:
        self._stalled = _NoEOF(_Open(), 2**16, loop=asyncio.get_running_loop())  # type: ignore[arg-type]


class MockedHTTP(aioresponses):
    """aioresponses with the response class above as the default."""

    def __enter__(self) -> MockedHTTP:
        super().__enter__()
        return self

    def add(self, url: Any, method: str = "GET", **kwargs: Any) -> None:  # type: ignore[override]
        kwargs.setdefault("response_class", MockedResponse)
        super().add(url, method, **kwargs)

    def calls(self, method: str, url: str) -> list[Any]:
        """The recorded calls of ``method`` to ``url`` (aioresponses keys them by method and URL)."""
        return self.requests.get((method.upper(), URL(url)), [])

    def total_calls(self) -> int:
        return sum(len(calls) for calls in self.requests.values())
