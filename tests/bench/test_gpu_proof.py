"""``make gpu-proof``: its no-GPU path, and the format of its report.

The report test fills the report with synthetic numbers: it checks the JSON and markdown
writer only (a format test, not a measurement; no GPU result is claimed here).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mmelocal.bench.capacity.projection import project
from mmelocal.bench.capacity.result import CapacityResult, LoadRecord

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_proof.py"
MIB = 1024 * 1024


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_proof", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_it_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    if _script().nvidia_smi() is not None:  # the script's own test for a GPU
        pytest.skip("this machine has an NVIDIA GPU: the no-GPU path cannot be shown here")
    out = tmp_path / "out"
    done = subprocess.run(
        ["make", "-s", "gpu-proof", f"GPU_PROOF_OUT={out}", f"WHEELS={tmp_path / 'none'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stdout.strip().splitlines()
    assert lines == [
        "gpu-proof: no NVIDIA GPU here (nvidia-smi absent or reports none); nothing run"
    ]
    assert not out.exists()  # nothing installed, nothing written


def test_report_format_with_synthetic_numbers(tmp_path: Path) -> None:
    gpu_proof = _script()
    loads = tuple(
        LoadRecord(
            copies=i,
            target=f"model-{i}.tar.gz",
            used_bytes=(500 + 100 * i + (400 if i else 0)) * MIB,
            delta_bytes=(500 if i == 1 else 100) * MIB,
            load_s=1.0,
            warmup_s=0.1,
            marginal_bytes=100 * MIB,
        )
        for i in (1, 2, 3)
    )
    capacity = CapacityResult(
        source="synthetic",
        label="synthetic model",
        model_format="torchscript",
        probe="nvml:0",
        total_bytes=4000 * MIB,
        threshold=0.9,
        baseline_bytes=500 * MIB,
        loads=loads,
        next_copy=None,
        stopped_reason="reached max copies (3)",
        projection=project(per_model_bytes=100 * MIB, baseline_bytes=500 * MIB, threshold=0.9),
    )
    report = gpu_proof.GpuProofReport(
        gpu={"name": "Synthetic GPU", "driver": "0.0"},
        started_at="2026-01-01T00:00:00+00:00",
        nvml={"used_mib": 1000, "total_mib": 4000, "used_minus_smi_mib": 0},
        nvidia_smi={"used_mib": 1000, "total_mib": 4000},
        gpu_tests={"exit_code": 0, "summary": "3 passed"},
        capacity=[capacity.to_dict()],
        format_only=True,
    )
    json_path, md_path = gpu_proof.write_report(report, tmp_path / "out")
    data = json.loads(json_path.read_text())
    assert data["kind"] == "gpu-proof" and data["format_only"] is True
    assert data["capacity"][0]["implied_count"] == capacity.implied_count == 27
    markdown = md_path.read_text()
    assert "Format test with synthetic numbers: not a measurement." in markdown
    assert "| NVML probe | 1000 | 4000 |" in markdown
    assert "| nvidia-smi | 1000 | 4000 |" in markdown
    # copy 100 MiB, runtime once 400 MiB: floor((3600 - 500 - 400) / 100) = 27 copies
    assert "| synthetic model | 3 | 500 | 100 | 400 | 27 |" in markdown
    assert "| H100 |" in markdown and "gpu tests: 3 passed" in markdown


def test_a_gpu_test_module_that_needs_what_does_not_travel_is_listed_not_run(
    tmp_path: Path,
) -> None:
    """On the GPU machine a marked module that imports boto3 (absent there) failed the
    whole proof as a collection error; it is listed as not run, with what it needs (the
    tests' own helper modules are not packages to install)."""
    gpu_proof = _script()
    module = tmp_path / "test_needs.py"
    module.write_text(
        "import json\nimport no_such_package_here\nfrom shared_helpers import unique\n"
        "from no_such_other.sub import x\n"
    )
    found = gpu_proof.missing_imports(module, gpu_proof.tests_own_modules())
    assert found == ["no_such_other", "no_such_package_here"]
    report = gpu_proof.GpuProofReport(gpu={"name": "T"}, started_at="now")
    report.gpu_tests = {
        "summary": "4 passed",
        "not_run": {"tests/x/test_needs.py": "needs boto3, which does not travel"},
    }
    assert "- not run here: tests/x/test_needs.py (needs boto3, which does not travel)" in (
        report.markdown()
    )


# -- the steps (gpu_proof_steps.py): their result shaping and their paths on this machine --
PY_PAYLOAD = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()


def _steps() -> ModuleType:
    _script()  # puts benchmarks/ on the path, where the steps module is
    import gpu_proof_steps

    return gpu_proof_steps


def _python_model(root: Path) -> Path:
    """A Python-backend model folder (``OUTPUT0 = INPUT0 * 1 + 1``): no build, quick to load."""
    from mmelocal.testing.tiny_model import write_model

    return write_model(root, name="plus_one", scale=1.0)


def _no_gpu_here() -> None:
    from mmelocal.runtime.memory import gpu_count

    if gpu_count():
        pytest.skip("this machine has a GPU: the no-GPU path cannot be shown here")


def test_card_check_accepts_this_cards_instance_type_and_refuses_another() -> None:
    """An H100 (NVML's name on the lent machines) is ml.p5.4xlarge's card, one of it: the
    sweep's check accepts that type and refuses ml.g5.xlarge (A10G), saying why."""
    steps = _steps()
    result = steps.card_check([("NVIDIA H100 80GB HBM3", 81559 * MIB)])
    assert result["status"] == "passed" and result["findings"] == []
    own, other = result["seen"]["cases"]
    assert (own["instance_type"], own["accepted"], own["refusal"]) == ("ml.p5.4xlarge", True, None)
    assert (other["instance_type"], other["accepted"]) == ("ml.g5.xlarge", False)
    assert "ml.g5.xlarge has 1 x A10G" in other["refusal"]
    assert "size one of ml.p5.4xlarge" in other["refusal"]
    assert result["lines"][1] == "ml.p5.4xlarge (1 x H100): accepted"
    refused = "ml.g5.xlarge (1 x A10G): refused: the GPUs this sweep would run on: "
    assert result["lines"][2].startswith(refused + "1 x NVIDIA H100 80GB HBM3 of 81559 MiB (H100)")


@pytest.mark.parametrize(
    ("readings", "finding"),
    [
        (
            [("NVIDIA B200", 183359 * MIB)],  # nvidia-smi on a B200: 183359MiB
            "the card table (gpus.yaml) has no card for NVML's 'NVIDIA B200' of 183359 MiB",
        ),
        (
            [("NVIDIA H100", 95830 * MIB)],  # the 94 GB part: the same name, more memory
            "the card table (gpus.yaml) has no card for NVML's 'NVIDIA H100' of 95830 MiB",
        ),
        (
            [("NVIDIA H200", 143771 * MIB)],
            "H200 on ml.p5e.48xlarge (8), ml.p5en.48xlarge (8), none with 1 GPU(s)",
        ),
        (
            [("NVIDIA H100 80GB HBM3", 81559 * MIB)] * 2,
            "H100 on ml.p5.4xlarge (1), ml.p5.48xlarge (8), none with 2 GPU(s)",
        ),
    ],
)
def test_card_check_reports_a_card_the_table_has_no_instance_type_for(
    readings: list[tuple[str, int]], finding: str
) -> None:
    """A card the table lacks (B200), or lists with another count (one H200: SageMaker's
    H200 types have eight), is a finding; the other card's type is still tried, and
    refused."""
    result = _steps().card_check(readings)
    assert result["status"] == "passed"
    [found] = result["findings"]
    assert finding in found
    [case] = result["seen"]["cases"]
    assert (case["instance_type"], case["accepted"]) == ("ml.g5.xlarge", False)


def test_card_check_reads_the_names_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without readings the step reads NVML's (a stand-in pynvml: no GPU here): a T4 is
    ml.g4dn.xlarge's card, and the other card's type is ml.g5.xlarge."""
    from shared_helpers import StandInNvml

    nvml = StandInNvml({0: MIB}, names=("Tesla T4",), total_bytes=15360 * MIB)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    result = _steps().card_check()
    assert result["seen"]["nvml_names"] == ["Tesla T4"] and result["seen"]["card"] == "T4"
    assert result["seen"]["nvml_total_mib"] == [15360]
    cases = [(c["instance_type"], c["accepted"]) for c in result["seen"]["cases"]]
    assert cases == [("ml.g4dn.xlarge", True), ("ml.g5.xlarge", False)]


def test_without_a_gpu_each_step_is_skipped_with_its_reason(tmp_path: Path) -> None:
    _no_gpu_here()
    steps = _steps()
    card = steps.run_step(steps.CARD_CHECK, steps.card_check)
    check = steps.run_step(steps.CLI_CHECK, steps.cli_check, tmp_path)
    gauges = steps.run_step(
        steps.EMULATOR_GAUGES, steps.emulator_gauges, tmp_path, b"", workdir=tmp_path
    )
    assert [s["status"] for s in (card, check, gauges)] == ["skipped"] * 3
    assert card["reason"] == "NVML sees no GPU (no pynvml, no driver or no GPU)"
    assert check["reason"] == "NVML sees no GPU: check would read host memory"
    assert gauges["reason"] == "NVML sees no GPU: the emulator would use the host probe"
    assert "- skipped: NVML sees no GPU: check would read host memory" in (
        steps.steps_markdown([check])
    )


def test_a_step_that_raises_is_reported_failed_and_the_next_ones_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's exception never ends the proof: the step is failed with its error; where
    the shared tiny BERT cannot be built, both steps that need it fail with that error."""
    steps = _steps()
    failed = steps.run_step("divide", lambda: 1 // 0)
    assert failed["status"] == "failed" and failed["error"] == (
        "ZeroDivisionError: integer division or modulo by zero"
    )

    def no_build(workdir: Path) -> dict[str, object]:
        raise OSError("disk full")

    monkeypatch.setattr(steps, "small_model", no_build)
    seen: list[dict[str, object]] = []
    steps.run_steps(tmp_path, seen.append)
    assert [s["name"] for s in seen] == [steps.CARD_CHECK, steps.CLI_CHECK, steps.EMULATOR_GAUGES]
    error = "building the tiny BERT model folder failed: OSError: disk full"
    assert [s.get("error") for s in seen[1:]] == [error, error]


def test_check_step_reads_the_clis_json_report(tmp_path: Path) -> None:
    """The step runs the CLI as a user does and keeps its exit code and errors: a folder
    with no model exits 1 with check's own message (no server started)."""
    (tmp_path / "empty").mkdir()
    result = _steps().cli_check(tmp_path / "empty", expect_gpu=False)
    assert result["status"] == "failed" and result["seen"]["exit_code"] == 1
    assert result["seen"]["command"] == f"mmelocal check --json {tmp_path / 'empty'}"
    assert "exit code 1; no model folder (with config.pbtxt) found in" in result["error"]


def test_check_step_shapes_what_the_cli_printed() -> None:
    steps = _steps()
    garbage = steps.check_result("mmelocal check", 2, "", "Error: no such option", expect_gpu=True)
    assert garbage["error"] == "exit 2, no JSON report: Error: no such option"
    model = {"name": "m", "status": "passed", "memory_bytes": 300 * MIB,
             "memory_kind": "host_pss", "load_time_s": 1.5, "errors": []}  # fmt: skip
    report = {"ok": True, "errors": [], "models": [model], "baseline_memory_bytes": MIB}
    on_gpu = steps.check_result("mmelocal check", 0, json.dumps(report), "", expect_gpu=True)
    assert on_gpu["status"] == "failed"
    assert on_gpu["error"] == "m's memory read as host_pss, not gpu"
    assert on_gpu["lines"][1] == "m: passed, 300.0 MiB (host_pss), load 1.5 s"
    on_cpu = steps.check_result("mmelocal check", 0, json.dumps(report), "", expect_gpu=False)
    assert on_cpu["status"] == "passed" and "error" not in on_cpu


@pytest.mark.triton
def test_check_step_runs_a_model_through_the_cli(tmp_path: Path) -> None:
    """The real CLI on a real Triton (CPU here): exit 0, the model's memory read."""
    model = _python_model(tmp_path / "repo")
    result = _steps().cli_check(model, expect_gpu=False)
    assert result["status"] == "passed", result
    [checked] = result["seen"]["models"]
    assert checked["status"] == "passed" and checked["memory_kind"] == "host_pss"
    assert checked["memory_mib"] is not None


def test_gauges_step_shapes_what_the_emulator_published() -> None:
    steps = _steps()
    instances = [{"index": 0, "probe": "nvml:0", "probe_kind": "gpu"},
                 {"index": 1, "probe": "host", "probe_kind": "host"}]  # fmt: skip
    labels = '{EndpointName="local",VariantName="AllTraffic"}'
    result = steps.gauges_result(
        instances,
        {"200": 5, "507": 1},
        {"GPUUtilization": [12.0], "GPUMemoryUtilization": [40.0, 140.0]},
        {f"GPUMemoryUtilization{labels}": 90.0, f"CPUUtilization{labels}": 3.0},
    )
    assert result["status"] == "failed" and result["seen"]["per_instance_ok"] is False
    assert result["error"].split("; ") == [
        "instance 1 probe is host",
        "GPUUtilization: 1 samples for 2 instance(s)",
        "GPUMemoryUtilization: 140.0 is not a percentage",
        "/metrics has no GPUUtilization",
        "invocations answered {'200': 5, '507': 1}",
    ]
    assert result["seen"]["metrics_endpoint"] == {
        "GPUMemoryUtilization": {"series": f"GPUMemoryUtilization{labels}", "value": 90.0}
    }


@pytest.mark.triton
def test_gauges_step_serves_invocations_and_reads_each_instances_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulator, a real Triton (CPU) and real invocations; only NVML is a stand-in (no
    GPU here: 42 % busy, 4 of 16 GiB used): one sample per instance of each GPU gauge,
    and the /metrics gauge."""
    from shared_helpers import StandInNvml

    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml({0: 4 * 2**30}, names=("T",)))
    model = _python_model(tmp_path / "repo")
    result = _steps().emulator_gauges(
        model, PY_PAYLOAD, workdir=tmp_path / "work", busy_s=0.5, callers=2
    )
    assert result["status"] == "passed", result
    seen = result["seen"]
    assert seen["instances"] == [{"index": 0, "probe": "nvml:0", "probe_kind": "gpu"}]
    assert seen["per_instance"] == {"GPUUtilization": [42.0], "GPUMemoryUtilization": [25.0]}
    assert seen["per_instance_ok"] is True and set(seen["invocations"]) == {"200"}
    assert seen["metrics_endpoint"]["GPUUtilization"]["value"] == 42.0
    assert result["lines"][1] == "GPUUtilization per instance: [42.0]"


def test_report_shows_the_steps(tmp_path: Path) -> None:
    """The report's JSON keeps each step as seen; its markdown has a row per step, then
    what each saw, its error and its findings (a format test: synthetic names)."""
    gpu_proof, steps = _script(), _steps()
    report = gpu_proof.GpuProofReport(gpu={"name": "T"}, started_at="now", format_only=True)
    report.steps = [
        steps.run_step(steps.CARD_CHECK, steps.card_check, [("NVIDIA B200", 183359 * MIB)]),
        steps.run_step("divide", lambda: 1 // 0),
    ]
    json_path, md_path = gpu_proof.write_report(report, tmp_path)
    data = json.loads(json_path.read_text())
    assert [s["name"] for s in data["steps"]] == [steps.CARD_CHECK, "divide"]
    assert data["steps"][0]["seen"]["card"] is None
    markdown = md_path.read_text()
    assert "| sweep card check | passed |" in markdown and "| divide | failed |" in markdown
    assert "- NVML: NVIDIA B200 of 183359 MiB (card table: no card)" in markdown
    assert "- **finding**: the card table (gpus.yaml) has no card for NVML's" in markdown
    assert "- error: ZeroDivisionError: integer division or modulo by zero" in markdown


def test_the_trimmed_triton_wheel_keeps_one_stub_and_the_executables_mode(tmp_path: Path) -> None:
    """The nvidia-pytriton wheel is trimmed and recompressed to travel; pip must still get
    an executable tritonserver (a rewrite that drops the mode leaves Triton unable to start:
    "Permission denied", seen on the device) and only the stub of the device's Python."""
    import zipfile

    gpu_proof = _script()
    wheel = tmp_path / "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl"
    stubs = "pytriton/tritonserver/backends/python/python_backend_stubs"
    files = {
        "pytriton/tritonserver/bin/tritonserver": 0o755,
        f"{stubs}/{gpu_proof.STUB_PYTHON}/triton_python_backend_stub": 0o755,
        f"{stubs}/3.10/triton_python_backend_stub": 0o755,
        "nvidia_pytriton.libs/libpython3-abc.so": 0o644,
    }
    record = "".join(f"{name},sha256=x,1\n" for name in files)
    with zipfile.ZipFile(wheel, "w") as out:
        for name, mode in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            out.writestr(info, b"\x7fELF" + bytes(4096))
        info_dir = "nvidia_pytriton-0.7.0.dist-info"
        out.writestr(f"{info_dir}/METADATA", "Metadata-Version: 2.1\nName: nvidia-pytriton\n"
                     "Version: 0.7.0\n")  # fmt: skip
        out.writestr(f"{info_dir}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                     "Tag: py3-none-manylinux_2_35_x86_64\n")  # fmt: skip
        out.writestr(f"{info_dir}/RECORD", record)
    gpu_proof.trim_pytriton(tmp_path)
    with zipfile.ZipFile(wheel) as trimmed:
        kept = {info.filename: info for info in trimmed.infolist()}
        listed = trimmed.read("nvidia_pytriton-0.7.0.dist-info/RECORD").decode()
    server = kept["pytriton/tritonserver/bin/tritonserver"]
    assert (server.external_attr >> 16) & 0o777 == 0o755
    assert server.compress_type == zipfile.ZIP_LZMA
    assert f"{stubs}/{gpu_proof.STUB_PYTHON}/triton_python_backend_stub" in kept
    assert not [n for n in kept if "/3.10/" in n or "libpython3-" in n]
    assert "/3.10/" not in listed and "libpython3-" not in listed
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--target", str(site), str(wheel)],
        check=True,
    )  # fmt: skip
    assert (site / "pytriton/tritonserver/bin/tritonserver").stat().st_mode & 0o111
