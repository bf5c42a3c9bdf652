"""Sizes written by people: one parser for every command and config field.

Units are explicit about their base, so that ``4GiB`` never silently means something else
in another command:

* binary, powers of 1024: ``KiB``, ``MiB``, ``GiB``, ``TiB`` (what RAM and NVML report);
* decimal, powers of 1000: ``KB``, ``MB``, ``GB``, ``TB`` (what disks and most service
  quotas use; the InvokeEndpoint body cap, written "6 MB" in AWS's documentation, is
  6 MiB: :data:`mmelocal.facts.sagemaker.MAX_PAYLOAD_BYTES` says why);
* ``B`` or no unit: bytes.

A bare ``K``, ``M``, ``G`` or ``T`` is refused: tools disagree on it (Docker and ``free``
read ``4G`` as 4 GiB, Kubernetes as 4 GB), and a guess here moves a memory budget by 7 %.
Units are case-insensitive; a decimal number is allowed (``1.5GiB``).
"""

from __future__ import annotations

import re

from mmelocal.errors import UserInputError

MiB = 1024**2
GiB = 1024**3

_FACTORS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
UNITS_HELP = "B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024)"


def parse_size_bytes(text: str | int, *, what: str = "size") -> int:
    """Bytes from ``"4GiB"``, ``"512MB"``, ``"1.5GiB"``, ``"1000"`` or an int (> 0).

    Raises :class:`~mmelocal.errors.UserInputError` naming ``what`` and the accepted units.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise UserInputError(f"{what} must be > 0 bytes, got {text}")
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise UserInputError(
            f"{what} must be a number with an optional unit ({UNITS_HELP}), got {text!r}"
        )
    number, unit = match.group(1), match.group(2).lower()
    if unit in ("k", "m", "g", "t"):
        raise UserInputError(
            f"{what} {text!r} is ambiguous: write {number}{unit.upper()}iB for powers of 1024 "
            f"or {number}{unit.upper()}B for powers of 1000"
        )
    if unit not in _FACTORS:
        raise UserInputError(f"{what} has an unknown unit {unit!r} in {text!r}: use {UNITS_HELP}")
    value = int(float(number) * _FACTORS[unit])
    if value <= 0:
        raise UserInputError(f"{what} must be > 0 bytes, got {text!r}")
    return value


def mib(value_bytes: float | None, *, digits: int = 0, suffix: bool = True) -> str:
    """A size as every command prints it: ``1,234 MiB`` (``digits`` after the point;
    ``suffix=False`` leaves the unit to a column heading); ``-`` for None."""
    if value_bytes is None:
        return "-"
    text = f"{value_bytes / MiB:,.{digits}f}"
    return f"{text} MiB" if suffix else text


def mib_and_bytes(value_bytes: int) -> str:
    """``655 MiB (686,817,280 bytes)``: the log's form, exact for whoever adds figures up."""
    return f"{mib(value_bytes)} ({value_bytes:,} bytes)"


def mib_value(value_bytes: float | None, *, digits: int = 1) -> float | None:
    """The size in MiB as a number (for CSV, JSON and plots), rounded; None stays None."""
    return None if value_bytes is None else round(value_bytes / MiB, digits)


__all__ = ["UNITS_HELP", "GiB", "MiB", "mib", "mib_and_bytes", "mib_value", "parse_size_bytes"]
