"""Lazy public names for dpkit's packages (PEP 562): ``import dpkit`` loads no NumPy, SciPy or DuckDB.

A package lists its public names and the module that defines each; the name's
module is imported on first attribute access (``dpkit.Session``,
``from dpkit.histograms import dawa``) and the value cached in the package, so
every later access is an ordinary attribute. ``dir()`` and ``__all__`` list the
names before they are loaded. The same imports sit under ``if TYPE_CHECKING:``
in each ``__init__.py`` for type checkers and readers, and
``tests/test_architecture.py`` checks that the two lists agree.

One subtlety: many publishers live in a module of the same name
(``dpkit.histograms.dawa`` defines ``dawa``). When anything imports such a
module, Python sets the package attribute to the *module*; the package's
module class below keeps the exported function instead, as an eager
``from .dawa import dawa`` in ``__init__.py`` would.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


class _LazyPackage(types.ModuleType):
    """A package whose exported names win over same-named submodules set by the import system."""

    _dpkit_exports: Mapping[str, str]

    def __setattr__(self, name: str, value: Any) -> None:
        exports = self.__dict__.get("_dpkit_exports", {})
        if (
            isinstance(value, types.ModuleType)
            and name in exports
            and value.__name__ == f"{self.__name__}.{name}"
            and _defines(value, name)  # the export is the function inside, not the module
        ):
            return  # keep the exported function; __getattr__ fetches it on first use
        super().__setattr__(name, value)


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, given ``{public name: defining module}``.

    A module path equal to ``f"{package}.{name}"`` with no attribute of that
    name exports the submodule itself (``dpkit.histograms.methods``).
    """
    module = sys.modules[package]
    module.__class__ = _LazyPackage
    module.__dict__["_dpkit_exports"] = dict(exports)

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            # Any submodule stays one attribute away, as when the package imported it eagerly.
            source = f"{package}.{name}"
            if name.startswith("__") or importlib.util.find_spec(source) is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(source)
        if name not in exports or (source == f"{package}.{name}" and not _defines(imported, name)):
            value: Any = imported
        else:
            value = getattr(imported, name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(exports))

    return __getattr__, __dir__


def _defines(module: types.ModuleType, name: str) -> bool:
    """Whether ``module`` has its own attribute ``name`` (not a submodule of the same name)."""
    value = module.__dict__.get(name)
    return value is not None and not isinstance(value, types.ModuleType)
