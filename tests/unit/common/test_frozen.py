"""fast_frozen_init: the faster __init__ takes the same arguments as the dataclass's own and
builds an equal, equally frozen value; classes it cannot serve are refused."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import ClassVar

import pytest

from kafkasim.common.frozen import fast_frozen_init


@dataclasses.dataclass(frozen=True, slots=True)
class _Reference:
    x: int
    y: str = "y"
    limit: ClassVar[int] = 10
    z: tuple[int, ...] = dataclasses.field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if self.x > self.limit:
            raise ValueError(f"x {self.x} over {self.limit}")


@fast_frozen_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Fast:
    x: int
    y: str = "y"
    limit: ClassVar[int] = 10
    z: tuple[int, ...] = dataclasses.field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if self.x > self.limit:
            raise ValueError(f"x {self.x} over {self.limit}")


def test_same_signature() -> None:
    assert inspect.signature(_Fast.__init__) == inspect.signature(_Reference.__init__)
    assert _Fast.__init__.__qualname__ == "_Fast.__init__"


@pytest.mark.parametrize(
    ("args", "kwargs"), [((1,), {}), ((1, "b"), {}), ((2,), {"z": (3,)}), ((), {"x": 4, "y": "c"})]
)
def test_same_values(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    fast, reference = _Fast(*args, **kwargs), _Reference(*args, **kwargs)  # type: ignore[arg-type]
    assert dataclasses.astuple(fast) == dataclasses.astuple(reference)
    assert repr(fast).removeprefix("_Fast") == repr(reference).removeprefix("_Reference")
    assert fast == _Fast(*args, **kwargs)  # type: ignore[arg-type]
    assert hash(fast) == hash(_Fast(*args, **kwargs))  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(fast)) == fast
    assert copy.copy(fast) == fast
    assert dataclasses.replace(fast, y="r").y == "r"


def test_still_frozen_and_post_init_runs() -> None:
    value = _Fast(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.x = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="over 10"):
        _Fast(11)


def test_same_argument_errors() -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        _Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="positional arguments"):
        _Fast(1, "b", (2,))  # type: ignore[misc]


def test_refused() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        x: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class NotInInit:
        x: int = dataclasses.field(default=0, init=False)

    for cls in (Mutable, NoSlots, Factory, NotInInit):
        with pytest.raises(TypeError):
            fast_frozen_init(cls)
