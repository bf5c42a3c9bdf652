"""The one percentile definition of mmelocal: ``/metrics``, the demo and every report use it.

Nearest rank: the p-th percentile of n values is the smallest value with at least p % of
the values at or below it (``sorted[ceil(p/100 * n) - 1]``). It is always a latency that
was observed, never an interpolation between two, as CloudWatch's and Locust's latency
percentiles are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

#: the largest denominator a fraction is read back with: 9 decimal digits, so that 0.07
#: (``7 / 100.0``) is 7/100 and not the float just above it
_DENOMINATOR = 10**9


def nearest_rank(sorted_values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) quantile of already sorted values; NaN when there are none."""
    if not sorted_values:
        return math.nan
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    # the rank in exact arithmetic: in floats 0.07 * 100 is 7.000000000000001, one rank up
    exact = Fraction(fraction).limit_denominator(_DENOMINATOR)
    rank = math.ceil(exact * len(sorted_values))
    index = min(len(sorted_values) - 1, max(0, rank - 1))
    return float(sorted_values[index])


def percentiles(values: Iterable[float], ps: Iterable[float]) -> list[float]:
    """Percentiles ``ps`` (0..100) of unsorted ``values``, sorted once; NaN when empty."""
    ordered = sorted(values)
    return [nearest_rank(ordered, p / 100.0) for p in ps]


def percentile(values: Iterable[float], p: float) -> float:
    """One percentile ``p`` (0..100) of unsorted ``values``; NaN when empty."""
    return percentiles(values, (p,))[0]


__all__ = ["nearest_rank", "percentile", "percentiles"]
