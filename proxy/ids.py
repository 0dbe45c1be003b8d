"""Production id factory: prefix + random hex, like the OpenAI API's ids."""

from __future__ import annotations

import os


class RandomIds:
    __slots__ = ()

    def new(self, prefix: str) -> str:
        return prefix + os.urandom(16).hex()
