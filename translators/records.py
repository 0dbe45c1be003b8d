"""Frozen records made once per request, at the cost of a plain object.

``@dataclass(frozen=True)`` sets each field in its ``__init__`` through ``object.__setattr__``
(a frozen class's own ``__setattr__`` refuses): for a record of ten fields that is two thirds of
its construction. ``quick_init`` gives such a class an ``__init__`` that sets the instance's
whole ``__dict__`` in one call instead; everything else stays the dataclass's own (frozen
assignment raising ``FrozenInstanceError``, ``dataclasses.replace``/``fields``, ``repr``,
``==``), and a type checker sees the dataclass it decorates.

    @quick_init
    @dataclass(frozen=True)
    class Turn: ...

The class must not use ``slots`` (its fields live in the instance dict), ``default_factory``,
``init=False`` fields or ``__post_init__``: the generated ``__init__`` would not honour them,
so they are refused when the class is made.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace a frozen dataclass's ``__init__`` with one that sets its fields in one step."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__}: quick_init needs a frozen dataclass")
    if "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init needs a class without __slots__ or __post_init__")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    for f in fields:
        if f.default_factory is not dataclasses.MISSING or not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init takes plain fields and defaults only")
    namespace: dict[str, Any] = {"_set": object.__setattr__}
    args = []
    for f in fields:
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
    values = ", ".join(f"{n!r}: {n}" for n in names)
    source = f"def __init__(self, {', '.join(args)}):\n    _set(self, '__dict__', {{{values}}})\n"
    exec(source, namespace)  # the way dataclasses itself makes __init__: from its fields
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    type.__setattr__(cls, "__init__", init)  # the same signature as the dataclass's own
    return cls
