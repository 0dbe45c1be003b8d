"""``quick_init``: a frozen dataclass made with one ``__dict__`` write behaves as the dataclass
it decorates, and the classes it cannot serve are refused when they are made."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from crossfeed.translators.records import quick_init


@dataclass(frozen=True)
class Plain:
    a: int
    b: str
    c: tuple[int, ...] = ()
    d: Any = None


@quick_init
@dataclass(frozen=True)
class Quick:
    a: int
    b: str
    c: tuple[int, ...] = ()
    d: Any = None


def test_the_signature_is_the_dataclasses_own() -> None:
    assert str(inspect.signature(Quick)) == str(inspect.signature(Plain))
    assert Quick.__init__.__qualname__ == "Quick.__init__"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1, "x"), {}), ((1,), {"b": "y", "d": [1]}), ((), {"a": 2, "b": "z", "c": (1, 2)}), ((3, "w", (4,), {}), {})],
)
def test_instances_hold_what_the_dataclass_would(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    q, p = Quick(*args, **kwargs), Plain(*args, **kwargs)
    assert dataclasses.astuple(q) == dataclasses.astuple(p)
    assert repr(q) == repr(p).replace("Plain", "Quick")
    assert q == Quick(*args, **kwargs) and q != p
    if not isinstance(q.d, (list, dict)):
        assert hash(q) == hash(Quick(*args, **kwargs))


def test_wrong_calls_fail_as_the_dataclasses_do() -> None:
    for call in (lambda c: c(), lambda c: c(1), lambda c: c(1, "x", (), None, 5), lambda c: c(1, "x", e=1)):
        with pytest.raises(TypeError):
            call(Plain)
        with pytest.raises(TypeError):
            call(Quick)


def test_still_frozen_and_replaceable() -> None:
    q = Quick(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del q.b  # type: ignore[misc]
    r = dataclasses.replace(q, b="y")
    assert (r.a, r.b, r.c, q.b) == (1, "y", (), "x")
    assert [f.name for f in dataclasses.fields(r)] == ["a", "b", "c", "d"]


def test_the_defaults_are_shared_values_not_copies() -> None:
    marker = object()

    @quick_init
    @dataclass(frozen=True)
    class WithObject:
        x: object = marker

    assert WithObject().x is marker


def _refused(make: Any) -> None:
    with pytest.raises(TypeError, match="quick_init"):
        make()


def test_classes_it_cannot_serve_are_refused() -> None:
    def not_frozen() -> Any:
        @quick_init
        @dataclass
        class A:
            a: int

    def slotted() -> Any:
        @quick_init
        @dataclass(frozen=True, slots=True)
        class B:
            a: int

    def factory() -> Any:
        @quick_init
        @dataclass(frozen=True)
        class C:
            a: list[int] = field(default_factory=list)

    def post_init() -> Any:
        @quick_init
        @dataclass(frozen=True)
        class D:
            a: int

            def __post_init__(self) -> None:
                pass

    def no_init_field() -> Any:
        @quick_init
        @dataclass(frozen=True)
        class E:
            a: int = field(default=0, init=False)

    def keyword_only() -> Any:
        @quick_init
        @dataclass(frozen=True, kw_only=True)
        class F:
            a: int

    def not_a_dataclass() -> Any:
        @quick_init
        class G:
            a: int

    for make in (not_frozen, slotted, factory, post_init, no_init_field, keyword_only, not_a_dataclass):
        _refused(make)
