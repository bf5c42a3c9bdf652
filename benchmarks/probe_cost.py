"""Cost of one host-pss reading on a tree of 5 processes shaped like Triton with 4 stubs.

The tree is a bash with 4 Python children that import torch and hold a 100 MB tensor each
(as Python-backend stubs running TorchScript do), then sleep. A full reading
(``process_tree_memory``) lists the tree through ``/proc/PID/task/*/children`` and reads
each process's ``memory_full_info`` (psutil: ``/proc/PID/smaps_rollup``), which makes the
kernel walk that process's page tables: its cost grows with resident memory. The host
probe's ``TreeMemoryReader`` repeats a full reading only when the tree changed; on a steady
tree a reading is one ``statm`` per process. Both are compared in the same run with psutil
alone walking the tree (``children(recursive=True)``, which scans ``/proc``) for the same
PSS, and for RSS only (``memory_info``, about what the old host-rss probe cost).

Run: ``.venv/bin/python benchmarks/probe_cost.py [--reads 20] [--plain]`` (``--plain``:
children that import nothing, a tree of small processes).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from subprocess import PIPE

import psutil

from mmelocal.runtime.memory import TreeMemoryReader, process_tree_memory


def per_read_us(fn: Callable[[], object], reads: int) -> float:
    """Best of 3 rounds of ``reads`` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reads):
            fn()
        best = min(best, (time.perf_counter() - t0) / reads)
    return best * 1e6


def psutil_tree(pid: int, full: bool) -> int:
    """PSS (``full``) or RSS of the tree, read with psutil alone."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    if full:
        return sum(p.memory_full_info().pss for p in procs)
    return sum(p.memory_info().rss for p in procs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--plain", action="store_true", help="children that import nothing")
    args = parser.parse_args()
    work = "" if args.plain else "import torch; x = torch.ones(25_000_000); "
    child = f"{sys.executable} -c '{work}print(flush=True); import time; time.sleep(300)'"
    proc = subprocess.Popen(["bash", "-c", " & ".join([child] * 4) + " & wait"], stdout=PIPE)
    try:
        assert proc.stdout is not None
        for _ in range(4):  # each child prints one line once it holds its memory
            proc.stdout.readline()
        tree = process_tree_memory(proc.pid)
        if len(tree.processes) != 5:
            raise SystemExit(f"expected a tree of 5 processes, got {len(tree.processes)}")
        reader = TreeMemoryReader()
        reader.read(proc.pid)
        full = per_read_us(lambda: process_tree_memory(proc.pid), args.reads)
        steady = per_read_us(lambda: reader.read(proc.pid), args.reads * 10)
        ps_full = per_read_us(lambda: psutil_tree(proc.pid, True), args.reads)
        ps_rss = per_read_us(lambda: psutil_tree(proc.pid, False), args.reads * 10)
    finally:
        proc.kill()
        proc.wait()
    mib = 1024 * 1024
    print(
        f"tree of 5: PSS {tree.pss_bytes / mib:.1f} MiB, USS {tree.uss_bytes / mib:.1f} MiB, "
        f"RSS {tree.rss_bytes / mib:.1f} MiB (RSS/PSS {tree.rss_bytes / tree.pss_bytes:.2f})"
    )
    print(f"full reading (smaps_rollup x 5):        {full:9.0f} us per read")
    print(f"host-pss reader, tree unchanged (statm): {steady:9.0f} us ({steady / full:.3f}x)")
    print(f"psutil memory_full_info (same PSS):     {ps_full:9.0f} us ({ps_full / full:.2f}x)")
    print(f"psutil memory_info (RSS only):          {ps_rss:9.0f} us ({ps_rss / full:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
