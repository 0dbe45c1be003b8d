"""The JSON a typed frame decode accepts: any value, with integers as orjson reads them.

The machines parse a frame one of two ways: typed (msgspec: chunk_frames.py, delta_frames.py,
event_frames.py) or plain (orjson). orjson parses an integer in [-2**63, 2**64) as an int and
any other as a float, and cannot write one outside that range back out; msgspec decoding into
``Any`` keeps every integer an int. A field such as ``"output_tokens": 18446744073709551616``
would then be a float one way (sent on, or reported as a number of the wrong kind) and an int
the other (an event that fails to render). So the structs type the fields they keep ``Json``,
not ``Any``: the same values, but an integer past int64 (the widest bound msgspec checks) fails
the decode in C, and the frame goes the plain way, as a frame of a shape the typed path does not
take does. An integer in [2**63, 2**64) goes the plain way too, which reads it as the same int.

``Json`` nests arrays and objects ``JSON_DEPTH`` deep below the field (msgspec cannot name a
type recursively before Python 3.12); a deeper value fails the decode the same way. Decoding
into it costs what decoding into ``Any`` does; building a decoder of it costs about 1.4 ms a
field at import, five times more with each further level (docs/DESIGN.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final

import msgspec

# An integer field: one past int64 fails the decode.
Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]

# What a typed decode raises on bytes it does not take: not JSON, not of the type, or nested past
# msgspec's limit (a RecursionError, where orjson refuses past 1,024 levels).
DECODE_ERRORS: Final = (msgspec.DecodeError, RecursionError)

JSON_DEPTH: Final = 6  # a chat chunk's logprobs, the deepest field read, nest 6 below the field


def _nested(depth: int) -> Any:
    value: Any = str | Int | float | bool | None
    for _ in range(depth):
        value = str | Int | float | bool | None | list[value] | dict[str, value]
    return value


if TYPE_CHECKING:
    Json = Any  # what the code reading a field sees: any decoded JSON
else:
    Json = _nested(JSON_DEPTH)
