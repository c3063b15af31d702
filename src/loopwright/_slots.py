"""Fast construction for the frozen dataclasses built on every step.

A frozen dataclass's generated __init__ writes each field through object.__setattr__, to
get past its own __setattr__ (which raises): a call and a name lookup per field of every
record. For the records the loop makes at each step and run (Step, ModelRequest, RunSpec)
that was the largest part of the runtime's own cost per step.

`fast_frozen` keeps such a class a plain frozen slots dataclass (fields declared once;
dataclasses' own eq, repr, replace and fields) and makes its construction cheap without
writing any code: dataclasses also generates a *writer*, a mutable twin with the same
fields and the same slot layout, whose __init__ stores each slot directly. The frozen
class's __init__ lends the new instance the writer's class for the duration of that
__init__ and gives its own class back before anyone else can see the object; afterwards
it is exactly the frozen record dataclasses would have built. A subclass (whose layout
may differ) gets the frozen dataclass's own __init__.

Action and ToolResult write their few slots through the descriptors (`slot_writers`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


def slot_writers(cls: type) -> tuple[Callable[[Any, Any], None], ...]:
    """The slot setter of each field of a frozen slots dataclass, in field order."""
    return tuple(cls.__dict__[f.name].__set__ for f in fields(cls))


def fast_frozen(cls: T) -> T:
    """Give a frozen slots dataclass an __init__ that stores its slots directly (see above)."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not (params.frozen and "__slots__" in cls.__dict__):
        raise TypeError(f"fast_frozen: {cls.__name__} is not a frozen slots dataclass")
    for f in fields(cls):  # what the writer will need, checked now rather than at first use
        if not f.init or f.kw_only:
            raise TypeError(f"fast_frozen: field {cls.__name__}.{f.name} must be a plain init field")
    if cls.__slots__ != tuple(f.name for f in fields(cls)):  # type: ignore[attr-defined]
        raise TypeError(f"fast_frozen: {cls.__name__}'s slots are not its fields")
    frozen_init = cls.__dict__["__init__"]
    post_init = getattr(cls, "__post_init__", None)
    lend = object.__setattr__  # the one write that must pass the frozen __setattr__
    made: list[tuple[type, Callable[..., None]]] = []  # the writer, made at the first construction

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self) is not cls:  # a subclass: its own slots, the dataclass's own __init__
            frozen_init(self, *args, **kwargs)
            return
        if not made:  # not at import: a class never built costs nothing
            writer = _writer(cls)
            made.append((writer, writer.__dict__["__init__"]))
        writer, store_init = made[0]
        lend(self, "__class__", writer)
        try:
            store_init(self, *args, **kwargs)
        finally:
            self.__class__ = cls
        if post_init is not None:
            post_init(self)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = frozen_init.__doc__
    __init__.__signature__ = inspect.signature(frozen_init)  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def _writer(cls: type) -> type:
    """A mutable slots dataclass with cls's fields, defaults and slot layout."""
    spec = []
    for f in fields(cls):
        default: dict[str, Any] = {}
        if f.default is not dataclasses.MISSING:
            default["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default["default_factory"] = f.default_factory
        spec.append((f.name, f.type, dataclasses.field(**default)))
    writer = dataclasses.make_dataclass(f"{cls.__name__}Writer", spec, slots=True, eq=False, repr=False,
                                        match_args=False)
    writer.__module__ = cls.__module__
    return writer


__all__ = ["fast_frozen", "slot_writers"]
