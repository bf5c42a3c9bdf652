"""Old module paths kept importable after a module moved (``mmelocal.bench.remote`` is now
:mod:`mmelocal.bench.endpoint.remote`).

A package calls :func:`keep_old_paths` with its table of old name -> new module; ``import
mmelocal.bench.remote`` then imports the new module and registers it under the old name
too, so the old path and the new one are the same module object. Nothing is imported
until an old path is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str, moved: Mapping[str, str]) -> None:
        self.package = package
        self.moved = {f"{package}.{old}": new for old, new in moved.items()}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.moved[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """The new module has run already."""


def keep_old_paths(package: str, moved: Mapping[str, str]) -> None:
    """Make ``package.OLD`` import the module ``moved[OLD]`` (once per package)."""
    if not any(isinstance(f, _OldPaths) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(_OldPaths(package, moved))


__all__ = ["keep_old_paths"]
