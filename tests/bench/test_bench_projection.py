"""Projection of a capacity measurement onto other GPU cards."""

from __future__ import annotations

import importlib.resources
import math
from pathlib import Path

import pytest

from mmelocal.bench.capacity.loop import CapacityResult, LoadRecord
from mmelocal.bench.capacity.projection import (
    GpuSpec,
    load_gpus,
    parse_gpus,
    project,
    project_count,
)
from mmelocal.bench.capacity.sizing import cheapest_instance
from mmelocal.bench.prices import PriceTable
from mmelocal.bench.results import write_result
from mmelocal.errors import DeployError, UserInputError
from mmelocal.units import MiB as MIB

GIB = 1024 * MIB


def test_formula_matches_domain_definition() -> None:
    total, baseline, per_model = 16 * GIB, 400 * MIB, 1200 * MIB
    expected = math.floor((0.9 * total - baseline) / per_model)
    assert (
        project_count(
            total_bytes=total, baseline_bytes=baseline, per_model_bytes=per_model, threshold=0.9
        )
        == expected
        == 11
    )


def test_count_never_negative_and_inputs_checked() -> None:
    assert project_count(total_bytes=GIB, baseline_bytes=2 * GIB, per_model_bytes=MIB) == 0
    with pytest.raises(UserInputError, match="threshold"):
        project_count(total_bytes=GIB, baseline_bytes=0, per_model_bytes=MIB, threshold=1.5)
    with pytest.raises(UserInputError, match="per_model_bytes"):
        project_count(total_bytes=GIB, baseline_bytes=0, per_model_bytes=0)


def test_packaged_cards_are_readable_as_package_data() -> None:
    text = importlib.resources.files("mmelocal.facts").joinpath("gpus.yaml").read_text()
    names = {gpu.name for gpu in parse_gpus(text)}
    assert {"T4", "A10G", "V100", "L4", "A100-40GB", "A100-80GB", "H100", "H200"} <= names
    instances = {i for gpu in load_gpus() for i in gpu.instances}
    families = ("ml.g4dn.", "ml.g5.", "ml.p3.", "ml.g6.", "ml.p4d.", "ml.p4de.", "ml.p5.")
    for family in (*families, "ml.p5e.", "ml.p5en."):
        assert any(i.startswith(family) for i in instances), family


def _packaged_mib(card: str) -> int:
    """The packaged table's memory of ``card``, in MiB."""
    return next(g.memory_bytes for g in load_gpus() if g.name == card) // MIB


def test_an_h200_is_the_card_of_the_p5e_and_p5en_types() -> None:
    """NVML's "NVIDIA H200" (a lent GPU machine's card) is in the table with the total NVML
    read there, on the two SageMaker types that carry it, eight each."""
    from mmelocal.bench.capacity.projection import card_named, card_of_instance

    gpus = load_gpus()
    h200 = card_named("NVIDIA H200", gpus, total_bytes=143771 * MIB)
    assert h200 is not None and h200.memory_bytes == 143771 * MIB
    for instance_type in ("ml.p5e.48xlarge", "ml.p5en.48xlarge"):
        assert card_of_instance(instance_type, gpus) == (h200, 8)
    h100 = card_named("NVIDIA H100 80GB HBM3", gpus, total_bytes=81559 * MIB)
    assert h100 is not None and h100.name == "H100"


#: NVML's product names (as nvidia-smi prints them; NVIDIA/open-gpu-kernel-modules README,
#: "Compatible GPUs", for all but the V100s, which that driver does not run) -> the card of
#: the packaged table each is, None for a different board of the same chip: a PCIe or NVL
#: card beside the SXM part a SageMaker P instance carries, or another memory size. Each is
#: read with the memory of the card it is, or of the card it must not be taken for (the
#: same chip's, else the nearest name's): the name alone tells them apart.
NVML_NAMES = {
    "Tesla T4": "T4",
    "NVIDIA A10G": "A10G",
    "NVIDIA A10": None,
    "NVIDIA L4": "L4",
    "NVIDIA L40S": None,
    "Tesla V100-SXM2-16GB": "V100",
    "Tesla V100-PCIE-16GB": None,
    "Tesla V100-FHHL-16GB": None,
    "Tesla V100-SXM2-32GB": None,
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "NVIDIA A100-PCIE-40GB": None,
    "NVIDIA A100 80GB PCIe": None,
    "NVIDIA A100-SXM-64GB": None,
    "NVIDIA H100 80GB HBM3": "H100",
    "NVIDIA H100 PCIe": None,
    "NVIDIA H100 NVL": None,
    "NVIDIA H200": "H200",
    "NVIDIA H200 NVL": None,
    "NVIDIA H20": None,
}
#: the card whose memory a name that is no card of the table is read with
_LOOKALIKE = {
    "NVIDIA A10": "A10G",
    "NVIDIA L40S": "L4",
    "Tesla V100-PCIE-16GB": "V100",
    "Tesla V100-FHHL-16GB": "V100",
    "Tesla V100-SXM2-32GB": "V100",
    "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA A100 80GB PCIe": "A100-80GB",
    "NVIDIA A100-SXM-64GB": "A100-80GB",
    "NVIDIA H100 PCIe": "H100",
    "NVIDIA H100 NVL": "H100",
    "NVIDIA H200 NVL": "H200",
    "NVIDIA H20": "H200",
}


@pytest.mark.parametrize(("nvml_name", "card"), NVML_NAMES.items())
def test_a_card_is_matched_by_its_nvml_name_and_not_by_a_sibling_boards(
    nvml_name: str, card: str | None
) -> None:
    """ "NVIDIA H200 NVL" (the PCIe board, 600 W) is not the H200 SXM of ml.p5e, nor "NVIDIA
    H100 NVL" (94 GB) or "NVIDIA H100 PCIe" the H100 of ml.p5: their rate (the sweep's card
    check) or memory (the projection) would be shown as another card's."""
    from mmelocal.bench.capacity.projection import card_named

    total = _packaged_mib(card or _LOOKALIKE[nvml_name]) * MIB
    found = card_named(nvml_name, load_gpus(), total_bytes=total)
    assert (found.name if found else None) == card


#: what NVML reads (product name, memory total in MiB) -> the card of the packaged table
#: it is, None when it is none of them. Sources: nvidia-smi on an 8 x H100 SXM server
#: (NVIDIA/nccl issue 1264: "NVIDIA H100 80GB HBM3", 81559MiB); on a 94 GB H100 SXM5 (an
#: HPC cluster's H100 node, driver 580.95.05: "NVIDIA H100", 700 W, 95830MiB) and on H100
#: NVL boards (400 W, 95830MiB); Modal's table of NVML totals ("Why does an NVIDIA H100
#: 80GB card offer 85.52 GB?": H200 143,771, A100 40GB 40,960, T4 15,360 MiB); the
#: published T4 reading with ECC on (gpus.yaml, ml.g4dn.2xlarge: 15109).
NVML_READINGS = [
    ("NVIDIA H100", 95830, None),  # the 94 GB part: no size in its name
    ("NVIDIA H100 80GB HBM3", 81559, "H100"),
    ("NVIDIA H100 NVL", 95830, None),
    ("NVIDIA H200", 143771, "H200"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"),
    ("Tesla T4", 15360, "T4"),
    ("Tesla T4", 15109, "T4"),  # ECC on
]


@pytest.mark.parametrize(("nvml_name", "total_mib", "card"), NVML_READINGS)
def test_a_card_is_matched_by_nvmls_name_and_memory_total(
    nvml_name: str, total_mib: int, card: str | None
) -> None:
    """An "NVIDIA H100" of 95,830 MiB (the 94 GB SXM5 part, whose name shows no size) was
    taken for the table's 80 GB H100, so a projection or a sweep's card check showed it as
    ml.p5's card. The memory total decides; a device that is no card of the table is none."""
    from mmelocal.bench.capacity.projection import card_named

    found = card_named(nvml_name, load_gpus(), total_bytes=total_mib * MIB)
    assert (found.name if found else None) == card


def test_cards_of_one_name_are_told_apart_by_memory() -> None:
    """A table of the user's own that lists the 94 GB H100 beside the packaged 80 GB one:
    each "NVIDIA H100" reading is the card of its memory."""
    from mmelocal.bench.capacity.projection import card_named

    gpus = [*load_gpus(), GpuSpec(name="H100-94GB", memory_bytes=95830 * MIB, nominal="94 GB")]
    found = card_named("NVIDIA H100", gpus, total_bytes=95830 * MIB)
    assert found is not None and found.name == "H100-94GB"
    found = card_named("NVIDIA H100 80GB HBM3", gpus, total_bytes=81559 * MIB)
    assert found is not None and found.name == "H100"
    assert card_named("NVIDIA H100", gpus, total_bytes=64 * 1024 * MIB) is None


def test_every_published_reading_fits_its_card() -> None:
    """The tolerance covers what ECC takes (the readings NVML gave with ECC on)."""
    from mmelocal.bench.capacity.projection import card_named
    from mmelocal.facts.cards import published_readings

    gpus = load_gpus()
    for reading in published_readings():
        total = int(reading.nvml_total_mib * MIB)
        found = card_named(reading.gpu, gpus, total_bytes=total)
        assert found is not None and found.name == reading.gpu


def test_a_card_table_can_name_a_pcie_or_nvl_board() -> None:
    """A table of the user's own that lists the NVL and PCIe boards gets each matched to its
    own entry, and the SXM card to its own."""
    from mmelocal.bench.capacity.projection import card_named

    gpus = [
        *load_gpus(),
        GpuSpec(name="H100 NVL", memory_bytes=95830 * MIB, nominal="94 GB"),
        GpuSpec(name="H100 PCIe", memory_bytes=81559 * MIB, nominal="80 GB"),
    ]

    def named(name: str, total_mib: int) -> str | None:
        found = card_named(name, gpus, total_bytes=total_mib * MIB)
        return found.name if found else None

    assert named("NVIDIA H100 NVL", 95830) == "H100 NVL"
    assert named("NVIDIA H100 PCIe", 81559) == "H100 PCIe"
    assert named("NVIDIA H100 80GB HBM3", 81559) == "H100"


def test_projection_table_has_instances_and_more_cards_hold_the_same_count(
    tmp_path: Path,
) -> None:
    table = project(per_model_bytes=500 * MIB, baseline_bytes=300 * MIB, threshold=0.9)
    p4d = [r for r in table.rows if r.instance_type == "ml.p4d.24xlarge"]
    assert len(p4d) == 1 and p4d[0].gpus_per_instance == 8
    # Triton loads each model on every card it sees: 8 cards hold what one holds, so the
    # 8-card type, priced, holds no model more than one of its cards
    path = tmp_path / "projection.json"
    write_result(table, path)
    prices = PriceTable(
        currency="USD", source="test", origin="test", prices={"ml.p4d.24xlarge": 1.0}
    )
    held = p4d[0].models_per_gpu
    assert (
        cheapest_instance(path, hot_models=held, prices=prices).instance_type == "ml.p4d.24xlarge"
    )
    with pytest.raises(DeployError, match=f"no priced instance type holds {held + 1}"):
        cheapest_instance(path, hot_models=held + 1, prices=prices)
    t4 = next(r for r in table.rows if r.gpu == "T4")
    h100 = next(r for r in table.rows if r.gpu == "H100")
    assert h100.models_per_gpu > t4.models_per_gpu > 0


def test_user_file_extends_and_overrides(tmp_path: Path) -> None:
    extra = tmp_path / "gpus.yaml"
    extra.write_text(
        "gpus:\n"
        "  - {name: T4, memory_gib: 8, instances: {my.t4: 1}}\n"
        "  - {name: L40S, nominal: 48 GB, memory_mib: 46068, instances: {ml.g6e.xlarge: 1}}\n"
    )
    gpus = {g.name: g for g in load_gpus(extra)}
    assert gpus["T4"].memory_bytes == 8 * GIB and list(gpus["T4"].instances) == ["my.t4"]
    assert gpus["L40S"].instances == {"ml.g6e.xlarge": 1}
    assert "H100" in gpus


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: 3", "gpus:"),
        ("gpus:\n  - {name: X}", "memory_mib or memory_gib"),
        ("gpus:\n  - {name: X, memory_mib: 10, colour: red}", "unknown field"),
        ("gpus:\n  - {name: X, memory_mib: 10, instances: {a: 0}}", "GPU count"),
    ],
)
def test_bad_gpu_files_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        parse_gpus(text, origin="mine.yaml")


def _synthetic_capacity(
    total: int, baseline: int, footprints: list[int], threshold: float
) -> CapacityResult:
    """What the capacity loop records for a card with these per-copy footprints."""
    loads: list[LoadRecord] = []
    used = baseline
    crossing = None
    for copies, delta in enumerate(footprints, start=1):
        used += delta
        record = LoadRecord(
            copies=copies,
            target=f"m{copies}",
            used_bytes=used,
            delta_bytes=delta,
            load_s=1.0,
            warmup_s=0.1,
        )
        if used > threshold * total:
            crossing = record
            break
        loads.append(record)
    return CapacityResult(
        source="synthetic",
        label="",
        model_format="torchscript",
        probe="fake",
        total_bytes=total,
        threshold=threshold,
        baseline_bytes=baseline,
        loads=tuple(loads),
        next_copy=crossing,
        stopped_reason="test",
    )


@pytest.mark.parametrize("seed", range(20))
def test_projecting_onto_the_measured_card_reproduces_the_count(seed: int) -> None:
    import random

    rng = random.Random(seed)
    total = rng.choice([4, 16, 24, 80]) * GIB
    baseline = rng.randint(100, 900) * MIB
    mean = rng.randint(200, 3000) * MIB
    footprints = [int(mean * rng.uniform(0.9, 1.1)) for _ in range(200)]
    result = _synthetic_capacity(total, baseline, footprints, 0.9)
    assert result.next_copy is not None and result.count >= 1
    gpu = GpuSpec(name="measured", memory_bytes=total, instances={"this": 1})
    assert result.per_model_mean_bytes is not None
    table = project(
        per_model_bytes=result.per_model_mean_bytes,
        baseline_bytes=result.baseline_bytes,
        threshold=0.9,
        gpus=[gpu],
    )
    assert abs(table.rows[0].models_per_gpu - result.count) <= 1
    assert result.projected_count is not None and abs(result.projected_count - result.count) <= 1


def test_result_round_trips_through_json() -> None:
    result = _synthetic_capacity(4 * GIB, 300 * MIB, [700 * MIB] * 10, 0.9)
    again = CapacityResult.from_dict(result.to_dict())
    assert again == result and again.to_dict()["count"] == result.count == 4


def test_a_count_exactly_on_the_limit_is_not_lost_to_float_rounding() -> None:
    # 0.29 * 100 is 28.999... in floats: floor would say 0 copies of 29 bytes instead of 1
    assert project_count(total_bytes=100, baseline_bytes=0, per_model_bytes=29, threshold=0.29) == 1
    per_model = 420 * MIB
    total = (10 * 420 + 900) * MIB  # with threshold 1: room for exactly 10 copies
    assert (
        project_count(
            total_bytes=total, baseline_bytes=900 * MIB, per_model_bytes=per_model, threshold=1.0
        )
        == 10
    )


def test_a_cpu_measurement_names_where_and_projects_nothing() -> None:
    import dataclasses

    from mmelocal.bench.capacity import with_projection

    result = _synthetic_capacity(4 * GIB, 300 * MIB, [700 * MIB] * 10, 0.9)
    on_cpu = dataclasses.replace(result, probe="host RSS of the Triton tree, budget 4,096 MiB")
    assert on_cpu.on_host_memory and with_projection(on_cpu, None).projection is None
    lines = on_cpu.summary_lines()
    assert lines[0].startswith("measured: this machine, CPU host memory")
    assert any(line.startswith("no GPU projection") for line in lines)
    emulated = dataclasses.replace(on_cpu, instance_type="ml.g4dn.xlarge")
    assert emulated.measured_where == "local AWS, CPU host memory, as ml.g4dn.xlarge"
    cpu_type = dataclasses.replace(on_cpu, instance_type="ml.m5.xlarge")
    assert cpu_type.measured_where == "CPU host memory, on ml.m5.xlarge"
    on_gpu = dataclasses.replace(on_cpu, probe="nvml:0")
    assert with_projection(on_gpu, None).projection is not None
    assert not any("no GPU projection" in line for line in on_gpu.summary_lines())


def test_a_projection_written_with_the_multiple_reads_one_cards_count(tmp_path: Path) -> None:
    """A projection file from before the several-cards fix (models_per_instance = the
    count times the cards) sizes an instance by one card's count, as a new one does."""
    import json

    from mmelocal.bench.capacity.sizing import cheapest_instance
    from mmelocal.errors import DeployError

    table = project(per_model_bytes=500 * MIB, baseline_bytes=300 * MIB, threshold=0.9)
    old = table.to_dict()
    for row in old["rows"]:
        row["models_per_instance"] = row["models_per_gpu"] * row["gpus_per_instance"]
    assert any(r["models_per_instance"] != r["models_per_gpu"] for r in old["rows"])
    assert type(table).from_dict(old) == table
    path = tmp_path / "projection.json"
    path.write_text(json.dumps(old))
    most = max(r.models_per_gpu for r in table.rows)
    # more models than the largest card holds: no instance type fits, whatever its cards
    with pytest.raises(DeployError, match=f"the largest holds {most}\\)"):
        cheapest_instance(path, hot_models=most + 1)
