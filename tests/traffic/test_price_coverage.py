"""The packaged price table lists every GPU instance type MME supports, each with its source
and date, and the card table knows each one's GPU memory."""

from __future__ import annotations

from mmelocal.bench.capacity.projection import load_gpus
from mmelocal.bench.prices import load_prices
from mmelocal.facts.traffic import MME_GPU_INSTANCE_TYPES


def test_every_mme_gpu_type_is_listed_with_source_and_date() -> None:
    table = load_prices()
    for itype in MME_GPU_INSTANCE_TYPES:
        assert itype in table.prices or itype in table.unpriced, itype
        assert itype in table.sources and "," in table.sources[itype], itype  # "source, date"
    cards = {t: gpu.instances[t] for gpu in load_gpus() for t in gpu.instances}
    assert all(cards.get(t) == 1 for t in MME_GPU_INSTANCE_TYPES)  # one GPU each, per the docs
