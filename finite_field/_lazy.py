"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package lists which submodule defines each public name; the submodule is imported the
first time one of its names is looked up. ``import omnifc`` then costs what it uses: the
numba kernels, scikit-learn or gRPC load only when a name that needs them is touched.

>>> import types
>>> pkg = types.ModuleType("pkg")
>>> pkg.__getattr__, pkg.__dir__ = lazy_exports("json", {"json": ["dumps"]})
>>> pkg.__getattr__("dumps")({"a": 1})
'{"a": 1}'
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Iterable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, Iterable[str]]
                 ) -> tuple[Callable[[str], object], Callable[[], list]]:
    """``(__getattr__, __dir__)`` for ``package`` from ``{module: names}``.

    ``module`` is absolute or relative to ``package`` (``"._kernels"``); a name equal to the
    module's last part (``"audit"`` from ``".audit"``) is the module itself. A looked-up
    name is cached in the package's namespace, so ``__getattr__`` runs once per name.
    """
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module, package)
        value = loaded if module.rsplit(".", 1)[-1] == name else getattr(loaded, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__
