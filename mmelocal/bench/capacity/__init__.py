"""Capacity: how many copies of a model fit on a GPU, measured through the emulator's
loading path (:mod:`~mmelocal.bench.capacity.loop`), the result
(:mod:`~mmelocal.bench.capacity.result`), a copy's own memory
(:mod:`~mmelocal.bench.capacity.footprint`), the projection onto other cards
(:mod:`~mmelocal.bench.capacity.projection`) and the cheapest instance type that holds a hot
set (:mod:`~mmelocal.bench.capacity.sizing`).

The names of :mod:`~mmelocal.bench.capacity.loop` are importable from here
(``from mmelocal.bench.capacity import measure_capacity``).
"""

from mmelocal.bench.capacity.loop import *  # noqa: F403
from mmelocal.bench.capacity.loop import __all__ as __all__
