"""Old import paths of modules that moved into subpackages, kept working.

`import loopwright.tools` (or `from loopwright.parsing import parse_react_step`) gives the
module that now lives at `loopwright.wire.tools`: the same module object, so patching one
patches the other. New code imports the new paths; these stay for users and scripts."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from importlib.abc import Loader
else:  # the import system takes any object with these methods; importlib.abc costs ~10 ms
    Loader = object

MOVED: Final = {
    "loopwright.tools": "loopwright.wire.tools",
    "loopwright.toolschema": "loopwright.wire.toolschema",
    "loopwright.toolrun": "loopwright.wire.toolrun",
    "loopwright.parsing": "loopwright.wire.parsing",
    "loopwright.plans": "loopwright.wire.plans",
    "loopwright.toolcalls": "loopwright.wire.toolcalls",
    "loopwright.store": "loopwright.durable.store",
    "loopwright.journal": "loopwright.durable.journal",
    "loopwright.resume": "loopwright.durable.resume",
    "loopwright.cli": "loopwright.interfaces.cli",
    "loopwright.store_cli": "loopwright.interfaces.runs",
    "loopwright.viewer": "loopwright.interfaces.viewer",
    "loopwright.demo_tools": "loopwright.interfaces.demo_tools",
}
"""Old module path -> where it lives now."""


class _MovedFinder(Loader):
    """Finds an old path and loads it as the module at its new one."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        target = importlib.util.find_spec(MOVED[fullname])
        return importlib.machinery.ModuleSpec(fullname, self, origin=target.origin if target else None)

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the old path's spec on the module: give back its own
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code, so `python -m loopwright.store_cli` still runs."""
        spec = importlib.util.find_spec(MOVED[fullname])
        get_code = getattr(spec.loader, "get_code", None) if spec else None
        code: CodeType | None = get_code(MOVED[fullname]) if get_code else None
        return code

    def is_package(self, fullname: str) -> bool:
        return False


def install(namespace: dict[str, object]) -> None:
    """Put the finder on sys.meta_path once (loopwright's __init__ calls it with its
    globals). An old path whose last part is also a public name of the package
    (`loopwright.resume`, the function) is loaded now: importing a submodule sets it as
    an attribute of its package, which would otherwise replace that name on first use."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
    for old in MOVED:
        child = old.rpartition(".")[2]
        if child in namespace and not isinstance(namespace[child], ModuleType):
            kept = namespace[child]
            importlib.import_module(old)
            namespace[child] = kept
