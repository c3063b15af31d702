"""Fast construction for the frozen dataclasses built at every step.

A frozen dataclass's generated __init__ writes each field through object.__setattr__,
to get past its own __setattr__ (which raises): a slow call for every field of every
record. For the records the loop makes at each step (Step, Usage, ModelRequest, Action,
ToolResult) that was the largest part of the runtime's own cost per step.

`fast_frozen` keeps such a class a plain frozen slots dataclass (fields declared once;
dataclasses' own eq, repr, replace, fields and pickling) and makes its construction
cheap without writing any code. Next to the class it makes a *writer*: a subclass with
the same slots (no fields of its own) that may be written, whose __init__ is the one
dataclasses generates for a mutable twin of the class, so it stores each slot directly.
`cls(...)` allocates a writer (the class's __new__ is object.__new__ bound to the
writer, so no Python code runs before __init__), the writer's __init__ fills the slots,
and its __post_init__ gives the object the frozen class before anyone else can see it,
then runs the class's own __post_init__. The result is exactly the record dataclasses
would have built. A failed construction (a missing or unknown argument) leaves only a
discarded object behind, with the usual TypeError naming the class. The writer is made
at the class's second construction, so a class built once (a module's constant) or
never costs nothing at import.

A subclass of such a class (whose own fields or layout may differ) is built the plain
way: its __new__ is reset when it is defined, and the dataclass's own __init__ runs.
Pickle and copy make an empty writer through __new__; the writer's __setstate__ fills
it and then hands it its class.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import fields
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

_new = object.__new__


def fast_frozen(cls: T) -> T:
    """Make `cls(...)` build the frozen slots dataclass `cls` through its writer (see above)."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not (params.frozen and "__slots__" in cls.__dict__):
        raise TypeError(f"fast_frozen: {cls.__name__} is not a frozen slots dataclass")
    for f in fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"fast_frozen: field {cls.__name__}.{f.name} must be a plain init field")
    if cls.__slots__ != tuple(f.name for f in fields(cls)):  # type: ignore[attr-defined]
        raise TypeError(f"fast_frozen: {cls.__name__}'s slots are not its fields")
    frozen: Any = cls  # assigned dunders below: typed loosely on purpose
    frozen.__signature__ = _Signature(frozen.__dict__["__init__"])

    def __init_subclass__(sub: Any, /, writer: bool = False, **kwargs: Any) -> None:
        """A subclass (not the writer) is allocated by object.__new__ and built by the
        dataclass's own __init__, or its own: its fields or layout may differ."""
        super(frozen, sub).__init_subclass__(**kwargs)
        if not writer:
            sub.__new__ = staticmethod(_plain_new)

    frozen.__init_subclass__ = classmethod(__init_subclass__)
    dataclass_init = frozen.__dict__["__init__"]
    built: list[None] = []

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        """The first two constructions are the dataclass's own (a class built once, as a
        module's shared constant, costs no writer at import); the second makes the writer
        and binds the class's __new__ to it."""
        dataclass_init(self, *args, **kwargs)
        if type(self) is not frozen or frozen.__dict__["__init__"] is not __init__:
            return  # a subclass, or the writer was made meanwhile
        if not built:  # the first: perhaps a shared constant, made at import
            built.append(None)
            return
        # the writer before the class's own __new__: CPython gives the writer object's
        # allocator only while its base still has it
        frozen.__new__ = staticmethod(partial(_new, _writer(cls)))
        frozen.__init__ = dataclass_init  # from now on only subclasses use it

    frozen.__init__ = __init__
    return cls


def _writer(cls: type) -> type:
    """The writable subclass of frozen `cls`: same slots, a mutable twin's __init__."""
    post_init = cls.__dict__.get("__post_init__")

    # the writer's __post_init__, the last thing its __init__ does: the object gets its class
    if post_init is None:

        def __post_init__(self: Any) -> None:
            self.__class__ = cls

    else:

        def __post_init__(self: Any) -> None:
            self.__class__ = cls
            post_init(self)  # the class's own, on the frozen record

    def __setstate__(self: Any, state: Any) -> None:  # pickle and copy: fill, then hand over
        cls.__setstate__(self, state)  # type: ignore[attr-defined]  # dataclasses' own
        self.__class__ = cls

    spec = []
    for f in fields(cls):
        default: dict[str, Any] = {}
        if f.default is not dataclasses.MISSING:
            default["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default["default_factory"] = f.default_factory
        spec.append((f.name, f.type, dataclasses.field(**default)))
    # a mutable twin, named as the class so a bad call's TypeError names the class; only
    # its generated __init__ is used (it stores each slot and ends by calling __post_init__)
    twin = dataclasses.make_dataclass(cls.__name__, spec, slots=True, eq=False, repr=False, match_args=False,
                                      namespace={"__post_init__": __post_init__})
    namespace = {
        "__slots__": (),
        "__module__": cls.__module__,
        "__qualname__": f"{cls.__qualname__}.writer",
        "__new__": _new,
        "__init__": twin.__dict__["__init__"],
        "__post_init__": __post_init__,
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
        "__setstate__": __setstate__,
    }
    return type(cls)(f"{cls.__name__}Writer", (cls,), namespace, writer=True)


class _Signature:
    """What inspect reports for the class: the dataclass __init__'s parameters but self
    (worked out at the first look, not at import)."""

    def __init__(self, init: Any) -> None:
        self.init = init
        self.signature: inspect.Signature | None = None

    def __get__(self, instance: Any, owner: Any = None) -> inspect.Signature:
        if self.signature is None:
            signature = inspect.signature(self.init)
            self.signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        return self.signature


def _plain_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return _new(cls)


__all__ = ["fast_frozen"]
