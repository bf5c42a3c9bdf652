"""How a source spec names its kind: ``PREFIX:NAME`` (``torchvision:resnet50``,
``timm:resnet50``, ``hf:bert-base-uncased``), and which kinds take weights. A leaf module:
the loaders (:mod:`mmelocal.builder.sources`) and their error messages (the hub's) read it
without importing each other."""

from __future__ import annotations

import re

#: ``PREFIX:REST`` of a spec (a Windows drive letter is one character: not a prefix)
SPEC_PREFIX = re.compile(r"^([A-Za-z][\w-]*):(.*)$")
#: the kinds of source whose weights are chosen (``--weights``)
VISION_PREFIXES = ("torchvision", "timm")


def is_vision_spec(spec: str) -> bool:
    """True for ``torchvision:NAME`` and ``timm:NAME`` (the sources that take weights)."""
    prefix = SPEC_PREFIX.match(spec.strip())
    return prefix is not None and prefix.group(1).lower() in VISION_PREFIXES


__all__ = ["SPEC_PREFIX", "VISION_PREFIXES", "is_vision_spec"]
