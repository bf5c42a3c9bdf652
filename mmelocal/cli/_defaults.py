"""Option defaults read from the library's dataclasses, so that a default lives in one place
(the dataclass a command fills) and ``--help`` shows what the library would do anyway."""

from __future__ import annotations

import dataclasses
from typing import Any


def default_of(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (a TypeError names a field with no
    plain default: a programming error, found by any ``--help``)."""
    for item in dataclasses.fields(cls):
        if item.name == name:
            if item.default is dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{name} has no plain default")
            return item.default
    raise TypeError(f"{cls.__name__} has no field {name!r}")


__all__ = ["default_of"]
