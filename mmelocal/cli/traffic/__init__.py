"""``mmelocal traffic``: make a trace, replay it against an endpoint, simulate the fleet,
size the endpoint.

One module per command (:mod:`.make_cmd`, :mod:`.replay_cmd`, :mod:`.simulate_cmd`,
:mod:`.size_cmd`); what several share: :mod:`._shared` (options, progress, output),
:mod:`._capacity` (the models an instance holds) and :mod:`._measured` (figures from a
replay).
"""

from __future__ import annotations

import click

from mmelocal.cli.traffic._capacity import _capacity_for as _capacity_for
from mmelocal.cli.traffic._capacity import _CapacityArgs as _CapacityArgs
from mmelocal.cli.traffic.make_cmd import make
from mmelocal.cli.traffic.replay_cmd import replay
from mmelocal.cli.traffic.simulate_cmd import simulate
from mmelocal.cli.traffic.size_cmd import mme_gpu_types_with_price as mme_gpu_types_with_price
from mmelocal.cli.traffic.size_cmd import size_command


@click.group()
def traffic() -> None:
    """Traffic before production: make -> replay -> simulate -> size."""


for _command in (make, replay, simulate, size_command):
    traffic.add_command(_command)
