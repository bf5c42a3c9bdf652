"""GPU proof in one command: what mmelocal measures on a real NVIDIA GPU, in one report.

``make gpu-proof`` (or ``python3 benchmarks/gpu_proof.py --wheels .whl --out DIR``) on a
machine with an NVIDIA GPU:

1. installs the wheels carried in ``--wheels`` (``pip install --no-index --no-deps
   --target``; nothing is fetched) and puts them on the path;
2. compares the NVML probe's device reading with ``nvidia-smi --query-gpu=memory.used,
   memory.total --format=csv`` taken right after it;
3. runs the steps of ``gpu_proof_steps.py`` (beside this script), each bounded in time and
   reported with what it saw, a failed one with its error (none fails the proof): the
   sweep's card check with NVML's names of the GPUs here, ``mmelocal check --gpu 0`` on a
   tiny BERT, and the emulator's ``GPUUtilization`` / ``GPUMemoryUtilization`` per
   instance under invocations;
4. runs the ``mmelocal_gpu``-marked tests (``pytest -m mmelocal_gpu``);
5. runs ``capacity`` on the GPU for a TorchScript ResNet-50 (``torchvision:resnet50``,
   ``weights=None``, ``INPUT__0`` [3,224,224]) and for a tiny random BERT, each served by the
   pip tritonserver (``nvidia-pytriton``) through the emulator, with its per-copy part, the
   shared runtime and the projection onto the other cards;
6. writes ``gpu-proof.json`` and ``gpu-proof.md`` under ``--out`` (after each step too, so a
   run cut short keeps what it saw). The exit status is the gpu tests'.

Without a GPU it prints one line saying so and exits with status 2; nothing is installed.

What it expects of the GPU machine (the device machines lent to sessions: see
DEVELOPERS.md, ``device``): x86-64, an NVIDIA driver with ``nvidia-smi``, Python 3.12 as
``python3`` with CUDA torch, torchvision, transformers, numpy, protobuf, aiohttp, click,
rich, pyyaml, psutil, uvloop, grpcio, nvidia-ml-py and pytest already installed. The rest
travels as wheels in ``.whl/`` (ignored by git; name it in the device call's ``carry``),
about 51 MiB of the 64 MiB the working tree may take, in this install order (one
``pip install`` takes them all; the order is the one to drop from if space runs short):

1. ``mmelocal`` itself (``python -m build --wheel`` here; pure Python, ~0.3 MiB)
2. ``nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl`` (the tritonserver binary
   and its Python backend), trimmed to the Python 3.12 stub: the other stubs and the
   bundled libpython 3.13 go, and recompressed with LZMA (53 -> 26 MiB)
3. ``numpy==1.26.4`` cp312 (18 MiB): the wheel's stub reads numpy 1.x arrays only (see
   ``mmelocal.runtime.install.check_stub_numpy``) and the machine's Python has numpy 2, so
   the stub runs in an overlay environment (``$MMELOCAL_STUB_PYTHON``: a venv whose own
   site-packages hold numpy 1.26 and which sees the machine's packages after it) while
   this process keeps numpy 2
4. ``httptools`` cp312 (the emulator's fast front, 0.5 MiB)
5. ``tritonclient-2.73.0`` (0.1 MiB), ``python_rapidjson`` cp312 (1.7 MiB),
   ``geventhttpclient`` cp312 (0.2 MiB) and what it imports: ``gevent``, ``greenlet``,
   ``zope.event``, ``zope.interface``, ``brotli``, ``certifi`` (4.5 MiB): without them
   ``tritonclient.http`` does not import, and ``mmelocal check`` cannot talk to Triton

boto3/botocore (16 MiB) do not fit and are not needed (no S3 store, no boto3 load test).
``--download-wheels .whl`` fetches exactly these here (pip, cp312 manylinux) and builds the
mmelocal wheel. Then, in one device call: ``make gpu-proof GPU_PROOF_OUT=$OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "benchmarks") not in sys.path:  # its steps module, beside it
    sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_proof_steps  # noqa: E402

WHEELS = (
    "nvidia-pytriton==0.7.0",
    "numpy==1.26.4",
    "httptools==0.9.0",
    "tritonclient==2.73.0",
    "python-rapidjson==1.25",
    "geventhttpclient==2.6.1",
    "gevent==26.9.0",
    "greenlet==3.5.6",
    "zope.event==6.2",
    "zope.interface==8.7",
    "brotli==1.2.1",
    "certifi==2026.10.19.post1",
)
PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64")
MIB = 1024 * 1024


@dataclass
class GpuProofReport:
    """What one run measured (JSON-able); ``format_only`` marks a synthetic format test."""

    gpu: dict[str, Any]
    started_at: str
    nvml: dict[str, Any] = field(default_factory=dict)
    nvidia_smi: dict[str, Any] = field(default_factory=dict)
    gpu_tests: dict[str, Any] = field(default_factory=dict)
    capacity: list[dict[str, Any]] = field(default_factory=list)
    #: the checks of :mod:`gpu_proof_steps`, in the order run (each: name, status, seen...)
    steps: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    format_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``gpu-proof.json``."""
        return {"kind": "gpu-proof", **vars(self)}

    def markdown(self) -> str:
        """The report as markdown (for the docs)."""
        from mmelocal.units import mib  # installed by now (this script may install it)

        lines = [f"# GPU proof: {self.gpu.get('name', '?')}", ""]
        if self.format_only:
            lines += ["**Format test with synthetic numbers: not a measurement.**", ""]
        lines += [
            f"started {self.started_at}; driver {self.gpu.get('driver', '?')}",
            "",
            "| memory | used MiB | total MiB |",
            "| --- | ---: | ---: |",
        ]
        for name, reading in (("NVML probe", self.nvml), ("nvidia-smi", self.nvidia_smi)):
            lines.append(
                f"| {name} | {reading.get('used_mib', '-')} | {reading.get('total_mib', '-')} |"
            )
        if "reserved_mib" in self.nvml:
            lines += [
                "",
                f"NVML reserved (the driver's; in the probe's used, not in nvidia-smi's): "
                f"{self.nvml['reserved_mib']} MiB",
            ]
        lines += ["", f"gpu tests: {self.gpu_tests.get('summary', 'not run')}", ""]
        for module, why in (self.gpu_tests.get("not_run") or {}).items():
            lines.append(f"- not run here: {module} ({why})")
        if self.gpu_tests.get("not_run"):
            lines.append("")
        if self.steps:
            lines += [*gpu_proof_steps.steps_markdown(self.steps), ""]
        if self.capacity:
            lines += [
                "| model | copies | baseline MiB | copy MiB | runtime once MiB | implied |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for run in self.capacity:
                sizes = [
                    mib(run.get(key), suffix=False)
                    for key in ("baseline_bytes", "marginal_mean_bytes", "shared_runtime_bytes")
                ]
                implied = str(run.get("implied_count", "-"))
                cells = [run["label"], str(run["count"]), *sizes, implied]
                lines.append("| " + " | ".join(cells) + " |")
            for run in self.capacity:
                rows = (run.get("projection") or {}).get("rows", [])
                if rows:
                    lines += ["", f"projection of {run['label']}:", ""]
                    lines += ["| GPU | instance type | per GPU |", "| --- | --- | ---: |"]
                    lines += [
                        f"| {r['gpu']} | {r['instance_type']} | {r['models_per_gpu']} |"
                        for r in rows
                    ]
        lines += ["", *[f"- {note}" for note in self.notes]]
        return "\n".join(lines).rstrip() + "\n"


def write_report(report: GpuProofReport, out: Path) -> tuple[Path, Path]:
    """``gpu-proof.json`` and ``gpu-proof.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "gpu-proof.json", out / "gpu-proof.md"
    json_path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    md_path.write_text(report.markdown())
    return json_path, md_path


def nvidia_smi() -> dict[str, Any] | None:
    """GPU 0 as ``nvidia-smi`` reports it (None: no nvidia-smi, no driver or no GPU)."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = "--query-gpu=name,driver_version,memory.used,memory.total"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in out.splitlines() if line.strip()]
    if not lines:
        return None
    name, driver, used, total = (part.strip() for part in lines[0].split(","))
    return {"name": name, "driver": driver, "used_mib": int(used), "total_mib": int(total)}


STUB_PYTHON_ENV = "MMELOCAL_STUB_PYTHON"  # mmelocal.runtime.install's (not importable yet)
STUB_PYTHON = "3.12"


def numpy_major() -> int:
    """The major version of the numpy beside this Python (0 when there is none)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("numpy").split(".", 1)[0])
    except PackageNotFoundError:
        return 0


def overlay_python(wheels: Path, root: Path) -> Path:
    """A venv at ``root`` whose own site-packages hold the carried numpy 1.x, then this
    Python's packages (a ``.pth`` file): the stub, which loads the site-packages of the
    first ``python3`` on its PATH, then sees numpy 1.x and the machine's torch."""
    import site
    import sysconfig

    found = sorted(wheels.glob("numpy-1.*.whl"))
    if not found:
        raise SystemExit(f"gpu-proof: numpy is 2.x here and {wheels} has no numpy 1.x wheel")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*pip, "--target", purelib, str(found[-1])], check=True)
    parents = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    # addsitedir, not bare paths: the parent's own .pth files (editable installs) count too
    lines = [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(parents)]
    Path(purelib, "zz_gpu_proof_parent.pth").write_text("\n".join(lines) + "\n")
    return python


def trim_pytriton(dest: Path) -> None:
    """Keep only the Python ``STUB_PYTHON`` stub in the downloaded nvidia-pytriton wheel (its
    other stubs and the libpython they bundle do not fit the travelling tree), compressed
    with LZMA (pip reads any method ``zipfile`` reads: 38 MiB deflated, 26 MiB so)."""
    import zipfile

    for wheel in dest.glob("nvidia_pytriton-*.whl"):
        trimmed = wheel.with_suffix(".trim")

        def keep(name: str) -> bool:
            if "/python_backend_stubs/" in name:
                return f"/python_backend_stubs/{STUB_PYTHON}/" in name
            return "nvidia_pytriton.libs/libpython3-" not in name

        with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(trimmed, "w") as out:
            for info in src.infolist():
                if not keep(info.filename):
                    continue
                data = src.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines()
                    data = (
                        "\n".join(ln for ln in lines if keep(ln.split(",", 1)[0])) + "\n"
                    ).encode()
                out.writestr(info, data, compress_type=zipfile.ZIP_LZMA)
        trimmed.replace(wheel)


def install_wheels(wheels: Path, site: Path) -> None:
    """Install every carried wheel into ``site`` (offline) and put it on the path."""
    # numpy 1.x is the stub's alone (overlay_python): this process keeps the machine's
    found = sorted(str(p) for p in wheels.glob("*.whl") if not p.name.startswith("numpy-"))
    if not found:
        raise SystemExit(f"gpu-proof: no wheels in {wheels} (see the script's docstring)")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*pip, "--no-compile", "--upgrade", "--target", str(site), *found], check=True)
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(site), os.environ.get("PYTHONPATH")])
    )
    os.environ["PATH"] = f"{site / 'bin'}{os.pathsep}{os.environ['PATH']}"


def tests_own_modules() -> set[str]:
    """The names of the tests' own modules (importable there through ``tests/conftest.py``)."""
    return {p.stem for p in (REPO / "tests").rglob("*.py")}


def missing_imports(path: Path, helpers: set[str]) -> list[str]:
    """The packages a test module imports at its top that are not installed here
    (``helpers``, the tests' own modules: :func:`tests_own_modules`, do not count)."""
    import ast
    import importlib.util

    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names - helpers if importlib.util.find_spec(n) is None)


def run_gpu_tests(out: Path) -> dict[str, Any]:
    """``pytest -m mmelocal_gpu`` (bounded to 300 s): exit code and pytest's closing line.

    Only the test files that hold ``mmelocal_gpu``-marked tests are collected, and of those
    only the ones whose imports are installed here: a module that needs what does not
    travel (boto3, moto) is listed under ``not_run`` with what it needs.
    """
    files, not_run = [], {}
    helpers = tests_own_modules()
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if "mark.mmelocal_gpu" not in path.read_text(encoding="utf-8"):
            continue
        name = str(path.relative_to(REPO))
        missing = missing_imports(path, helpers)
        if missing:
            not_run[name] = f"needs {', '.join(missing)}, which does not travel"
        else:
            files.append(name)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "mmelocal_gpu",
        "-q",
        "-p",
        "no:cacheprovider",
        # a module that still fails to import is reported as an error, not a reason to run
        # none of the others
        "--continue-on-collection-errors",
        *files,
    ]
    try:
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "summary": "timed out after 300 s", "not_run": not_run}
    (out / "gpu-tests.log").write_text(done.stdout + done.stderr)
    tail = [line for line in done.stdout.splitlines() if line.strip()]
    summary = tail[-1] if tail else "no output"
    return {"exit_code": done.returncode, "summary": summary, "not_run": not_run}


def nvml_against_smi() -> tuple[dict[str, Any], dict[str, Any]]:
    """The NVML probe's reading and nvidia-smi's, taken one right after the other."""
    from mmelocal.emulator.probes import NvmlProbe

    reading = NvmlProbe(0).read()
    smi = nvidia_smi() or {}
    nvml = {"used_mib": reading.used_bytes // MIB, "total_mib": reading.total_bytes // MIB}
    reserved = nvml_reserved_mib()
    if reserved is not None:
        nvml["reserved_mib"] = reserved
    if smi:
        nvml["used_minus_smi_mib"] = nvml["used_mib"] - smi["used_mib"]
    return nvml, smi


def nvml_reserved_mib() -> int | None:
    """What NVML's version 2 memory query calls reserved on GPU 0 (the driver's own; the
    probe's version 1 ``used`` holds it, nvidia-smi's ``memory.used`` does not); None where
    the driver has no version 2 query."""
    import pynvml

    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return int(info.reserved) // MIB
    except (pynvml.NVMLError, AttributeError):
        return None


def save_bert_base(folder: Path) -> Path:
    """A BERT-base (``BertConfig()``'s defaults: 12 layers, hidden 768, 110M parameters) with
    random weights, saved as a Hugging Face folder: the published BERT rows' architecture,
    no hub download (the device machine reaches nothing outside)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig()).eval().save_pretrained(folder)
    return folder


def capacity_runs(
    max_copies: int, workdir: Path, *, bert_base: bool = False
) -> list[dict[str, Any]]:
    """``capacity`` on the GPU: TorchScript ResNet-50 (random weights), a tiny BERT and, with
    ``bert_base``, a random BERT-base."""
    from mmelocal.bench.capacity.loop import CapacityOptions, measure_capacity
    from mmelocal.testing.tiny_bert import save_tiny_bert

    options = CapacityOptions(use_gpu=True, max_copies=max_copies, workdir=workdir)
    models: list[tuple[str | Path, str]] = [("torchvision:resnet50", "ResNet-50 (TorchScript)")]
    models.append((save_tiny_bert(workdir / "tiny-bert", tokenizer=False), "tiny BERT"))
    if bert_base:
        models.append((save_bert_base(workdir / "bert-base"), "BERT-base (TorchScript)"))
    runs = []
    for source, label in models:
        t0 = time.monotonic()
        result = measure_capacity(source, options=options, model_format="torchscript", label=label)
        runs.append({**result.to_dict(), "seconds": round(time.monotonic() - t0, 1)})
    return runs


def download_wheels(dest: Path) -> int:
    """Here (with network to the registry): the wheels above for cp312, and mmelocal's."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    pip += ["--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(dest)]
    subprocess.run([*pip, *WHEELS], check=True)
    trim_pytriton(dest)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "-o", str(dest), str(REPO)], check=True
    )
    total = sum(p.stat().st_size for p in dest.glob("*.whl"))
    print(f"{dest}: {total / MIB:.1f} MiB of wheels (the travelling tree may hold 64 MiB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-proof-out"))
    parser.add_argument("--wheels", type=Path, default=REPO / ".whl")
    parser.add_argument("--max-copies", type=int, default=12, help="per capacity run")
    parser.add_argument("--download-wheels", type=Path, help="fetch the wheels here and stop")
    parser.add_argument(
        "--bert-base", action="store_true", help="also a random BERT-base (110M parameters)"
    )
    args = parser.parse_args(argv)
    if args.download_wheels is not None:
        return download_wheels(args.download_wheels)
    gpu = nvidia_smi()
    if gpu is None:
        print("gpu-proof: no NVIDIA GPU here (nvidia-smi absent or reports none); nothing run")
        return 2
    if numpy_major() >= 2 and not os.environ.get(STUB_PYTHON_ENV):
        # the stub (only) runs in an overlay with numpy 1.x; this process keeps the
        # machine's numpy 2, which its scipy and transformers need
        root = Path(tempfile.mkdtemp(prefix="gpu-proof-venv-"))
        os.environ[STUB_PYTHON_ENV] = str(overlay_python(args.wheels, root))
    started = datetime.now(UTC).isoformat(timespec="seconds")
    if args.wheels.is_dir():
        install_wheels(args.wheels, Path(tempfile.mkdtemp(prefix="gpu-proof-site-")))
    sys.path.insert(0, str(REPO))
    args.out.mkdir(parents=True, exist_ok=True)
    report = GpuProofReport(gpu={"name": gpu["name"], "driver": gpu["driver"]}, started_at=started)
    report.nvml, report.nvidia_smi = nvml_against_smi()

    def record(step: dict[str, Any]) -> None:
        report.steps.append(step)
        print(f"gpu-proof: {step['name']}: {step['status']} ({step['seconds']} s)", flush=True)
        write_report(report, args.out)

    with tempfile.TemporaryDirectory(prefix="gpu-proof-steps-") as tmp:
        gpu_proof_steps.run_steps(Path(tmp), record)
    report.gpu_tests = run_gpu_tests(args.out)
    write_report(report, args.out)
    with tempfile.TemporaryDirectory(prefix="gpu-proof-") as tmp:
        report.capacity = capacity_runs(args.max_copies, Path(tmp), bert_base=args.bert_base)
    report.notes.append(
        f"capacity runs stop at {args.max_copies} copies; counts beyond come "
        "from the two parts (implied) and the projection"
    )
    for path in write_report(report, args.out):
        print(f"wrote {path}")
    print(report.markdown())
    return 0 if report.gpu_tests.get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
