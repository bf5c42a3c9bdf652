"""One reading of a capacity estimate for ``capacity estimate``'s table, ``deploy
--capacity`` and ``traffic simulate / size --capacity``: the measured count wins where a
measurement of the same format and precision stands beside the estimate, among the
instance types the estimate was made for, under the threshold it records unless
``--threshold`` is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.bench.capacity.projection import load_gpus
from mmelocal.bench.capacity.sizing import cheapest_instance
from mmelocal.bench.estimate.core import Estimate, Measured, estimate_from_facts
from mmelocal.bench.estimate.parts import Batches, ModelFacts
from mmelocal.bench.results import write_result
from mmelocal.cli.traffic import _capacity_for, _CapacityArgs
from mmelocal.errors import UserInputError

GIB = 1024**3


def _estimate(threshold: float, *types: str) -> Estimate:
    facts = ModelFacts(
        params=100_000_000,
        weight_bytes=GIB // 2,
        weight_bytes_fp32=GIB // 2,
        activation_bytes={1: 64 * 2**20, 8: 256 * 2**20},
    )
    return estimate_from_facts(
        facts,
        source="m",
        model_format="torchscript",
        precision="fp32",
        batches=Batches(warmup=1, preferred=8, max=8),
        threshold=threshold,
    ).with_cards(load_gpus(), types)


def _file(args_path: Path | None, threshold: float | None = None) -> _CapacityArgs:
    return _CapacityArgs(None, None, 0.0, args_path, threshold)  # type: ignore[arg-type]


def test_estimate_deploy_and_traffic_read_the_measured_count_that_wins(tmp_path: Path) -> None:
    """`capacity estimate --measured` says the measured column wins, but deploy --capacity
    and traffic --capacity sized with the estimate's point count. All three now read the
    measured count (CardCount.copies), and the table marks the count that sizes."""
    from mmelocal.cli.estimate import cards_table

    measured = Measured(per_copy_bytes=GIB // 4, baseline_bytes=GIB, count=20,
                        total_bytes=16 * GIB, probe="nvml:0", origin="capacity.json",
                        model_format="torchscript", precision="fp32")  # fmt: skip
    estimate = _estimate(0.9, "ml.g5.xlarge").with_measurement(measured)
    card = estimate.cards[0]
    assert card.measured is not None and card.measured > card.point  # both figures differ
    path = write_result(estimate, tmp_path / "estimate.json")

    table = cards_table(estimate)
    cells = {column.header: list(column.cells) for column in table.columns}
    assert cells["measured"] == [f"[bold green]{card.measured}[/]"]
    assert cells["point"] == [str(card.point)]  # not marked: it does not size
    assert cheapest_instance(path, hot_models=card.measured).models_per_instance == card.measured
    assert _capacity_for("ml.g5.xlarge", _file(path)) == (
        card.measured,
        "estimate (measured count), on A10G",
    )


def test_traffic_keeps_to_the_estimates_instance_types_and_threshold(tmp_path: Path) -> None:
    """traffic --capacity counted an estimate made for ml.g5.xlarge on any card it was
    given, under its own --threshold default (0.9) whatever the estimate recorded. It now
    refuses a type the estimate does not size (as deploy does), and counts under the
    estimate's threshold unless --threshold is given."""
    estimate = _estimate(0.5, "ml.g5.xlarge")
    at_09 = _estimate(0.9, "ml.g5.xlarge").cards[0].point
    assert estimate.cards[0].point != at_09
    path = write_result(estimate, tmp_path / "estimate.json")
    count, source = _capacity_for("ml.g5.xlarge", _file(path))
    assert (count, source) == (estimate.cards[0].point, "estimate, on A10G")
    assert _capacity_for("ml.g5.xlarge", _file(path, 0.9))[0] == at_09
    with pytest.raises(UserInputError, match=r"sizes ml\.g5\.xlarge only.*ml\.g4dn\.xlarge"):
        _capacity_for("ml.g4dn.xlarge", _file(path))


def test_traffic_size_tries_the_estimates_instance_types_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`traffic size --capacity` with no --instance-type tried every priced GPU type; with
    an estimate made for some types it tries those."""
    import json

    import numpy as np

    from mmelocal.cli.main import main
    from mmelocal.traffic.trace import Trace, write_trace

    two = Trace(times_s=np.asarray([0.0, 1.0]), model_ids=np.asarray([0, 1]), models=("a", "b"))
    trace = write_trace(two, tmp_path / "t.csv")
    path = write_result(_estimate(0.9, "ml.g5.xlarge"), tmp_path / "estimate.json")
    out = tmp_path / "size.json"
    args = ["traffic", "size", str(trace), "--capacity", str(path), "--service-ms", "1"]
    code = main([*args, "--slo-p99-ms", "100000", "--json", str(out)])
    assert code == 0, capsys.readouterr()
    tried = {c["instance_type"] for c in json.loads(out.read_text())["tried"]}
    assert tried == {"ml.g5.xlarge"}


def test_a_measurement_with_no_footprint_per_copy_does_not_win_in_the_table() -> None:
    """A GPU measurement of the same format and precision that saw no footprint per copy
    (0 bytes) gives no count (``Estimate.measured_wins`` is False), but the table tested
    only the format and precision: its caption said the measured count wins over a
    measured column of "-", and the notes divided by the 0 bytes (ZeroDivisionError). The
    table and notes read ``measured_wins``: the point sizes, marked, and the notes say why."""
    from mmelocal.cli.estimate import cards_table, summary_lines

    nothing = Measured(per_copy_bytes=0, baseline_bytes=GIB, count=2, total_bytes=16 * GIB,
                       probe="nvml:0", origin="capacity.json", model_format="torchscript",
                       precision="fp32")  # fmt: skip
    estimate = _estimate(0.9, "ml.g5.xlarge").with_measurement(nothing)
    assert not estimate.measured_wins
    card = estimate.cards[0]
    assert card.copies == card.point
    table = cards_table(estimate)
    cells = {column.header: list(column.cells) for column in table.columns}
    assert "measured" not in cells
    assert cells["point"] == [f"[bold]{card.point}[/]"]
    assert "the measured count wins" not in str(table.caption)
    lines = summary_lines(estimate)
    assert any("no footprint per copy" in line and "estimate stands" in line for line in lines)
