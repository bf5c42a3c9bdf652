"""Load and first-inference time of each test model on the pip tritonserver, and the
LocalLauncher's own start overhead against tritonserver's time to ready.

Start overhead: ``LocalLauncher.start()`` (find the binary, reuse the backend folder,
resolve ports, spawn, readiness polling) against the same tritonserver argv spawned with
a bare ``subprocess.Popen`` and polled for ``/v2/health/ready`` in a tight loop, alternated
in the same run (median of ``--repeat``). The ratio launcher/bare is the figure of merit.

Models: a Python-backend model (numpy), a tiny MLP as TorchScript and ONNX, and the
acceptance models (tiny BERT from a random BertConfig, resnet18 with weights=None) as
TorchScript and ONNX, built with mmelocal's builder; native ones run through mmelocal's
Python runner. Each is loaded, queried once with its reference inputs (first inference),
queried again (warm), and unloaded.

Goal: launcher/bare start ratio <= 1.3.
Run: ``.venv/bin/python benchmarks/triton_load.py [--repeat 5] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "runtime"))

from runtime_models import write_mlp, write_python_model

from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.local import (
    LocalLauncher,
    find_tritonserver,
    prepare_backend_directory,
    server_environment,
)
from mmelocal.runtime.python_copies import prepare_repository
from mmelocal.runtime.samples import load_reference, sample_inputs
from mmelocal.runtime.server_config import ServerConfig


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def bare_start_s(repo: Path) -> float:
    """tritonserver's own time to ready: bare Popen, tight polling, then kill."""
    install = find_tritonserver()
    config = ServerConfig(
        model_repository=repo, backend_directory=prepare_backend_directory(install)
    ).resolved()
    url = f"http://127.0.0.1:{config.http_port}"
    start = time.monotonic()
    process = subprocess.Popen(
        [str(install.binary), *config.to_args()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=server_environment(install, config),
    )
    try:
        while not _ready(url):
            if process.poll() is not None:
                raise RuntimeError("tritonserver exited during the bare start")
            time.sleep(0.005)
        return time.monotonic() - start
    finally:
        process.terminate()
        process.wait(timeout=30)


def launcher_start_s(repo: Path) -> tuple[float, float]:
    """(total seconds of LocalLauncher.start(), the launcher's own share of them)."""
    launcher = LocalLauncher(ServerConfig(model_repository=repo))
    start = time.monotonic()
    launcher.start()
    total = time.monotonic() - start
    overhead = launcher.start_overhead_s or 0.0
    launcher.stop()
    return total, overhead


def build_models(src: Path, quick: bool) -> None:
    """Write the test models into ``src``."""
    write_python_model(src, "python_numpy")
    write_mlp(src, "mlp_torchscript", "torchscript")
    write_mlp(src, "mlp_onnx", "onnx")
    if quick:
        return
    from mmelocal.builder.build import BuildOptions, build_model
    from mmelocal.testing.tiny_bert import save_tiny_bert

    bert = save_tiny_bert(src.parent / "tinybert-src", tokenizer=False)
    for spec, family in ((str(bert), "tinybert"), ("torchvision:resnet18", "resnet18")):
        for fmt in ("torchscript", "onnx"):
            build_model(
                spec,
                repo=src,
                options=BuildOptions(
                    name=f"{family}_{fmt}",
                    format=fmt,
                    seq_len=16,
                    verify=False,
                    overrides={"warmup_batch_sizes": (1,)},
                ),
            )


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="skip tiny BERT and resnet18")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmelocal-bench-load-"))
    empty = work / "empty"
    empty.mkdir()

    bare, total, own = [], [], []
    bare_start_s(empty)  # warm the page cache once
    for _ in range(args.repeat):
        bare.append(bare_start_s(empty))
        t, o = launcher_start_s(empty)
        total.append(t)
        own.append(o)
    b, t, o = statistics.median(bare), statistics.median(total), statistics.median(own)
    print(f"start (median of {args.repeat}, alternated)")
    print(f"  tritonserver bare spawn->ready     {b * 1000:8.1f} ms")
    print(f"  LocalLauncher.start() total        {t * 1000:8.1f} ms   ratio {t / b:5.2f}x")
    print(f"  launcher's own share (not server)  {o * 1000:8.1f} ms   {o / t:6.1%} of total")

    src, served = work / "src", work / "served"
    build_models(src, args.quick)
    prepare_repository(src, served, backends_available={"python"}, gpu=False)
    print("\nmodel                     load s   1st infer ms   warm infer ms   unload s")
    with LocalLauncher(ServerConfig(model_repository=served)) as launcher:
        client = TritonClient.for_launcher(launcher)
        for model_dir in sorted(p for p in served.iterdir() if p.is_dir()):
            name = model_dir.name
            reference = load_reference(src / name)
            if reference is not None and reference[0]:
                inputs = reference[0]
            else:
                from mmelocal.builder.model_config import read_config

                inputs = sample_inputs(read_config(model_dir / "config.pbtxt"))
            load_s = client.load(name)
            start = time.monotonic()
            client.infer(name, inputs)
            first_ms = (time.monotonic() - start) * 1000
            start = time.monotonic()
            client.infer(name, inputs)
            warm_ms = (time.monotonic() - start) * 1000
            unload_s = client.unload(name)
            print(f"{name:24s} {load_s:7.2f} {first_ms:13.1f} {warm_ms:15.1f} {unload_s:10.2f}")
        client.close()


if __name__ == "__main__":
    main()
