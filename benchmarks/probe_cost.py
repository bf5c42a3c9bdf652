"""Cost of one host-pss reading: ``process_tree_memory`` on a tree of 5 processes.

The tree is a bash with 4 Python children (sleeping). One reading walks the tree through
``/proc/PID/task/*/children`` and reads ``/proc/PID/smaps_rollup`` of each process (the
kernel walks that process's page tables). Compared in the same run with psutil reading the
same PSS (``memory_full_info``, which parses the full ``smaps``) and with psutil's RSS
alone (``memory_info``, what the old host-rss probe cost about).

Run: ``.venv/bin/python benchmarks/probe_cost.py [--reads 300]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from mmelocal.runtime.memory import process_tree_memory, process_tree_pids


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
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    sleeper = f"{sys.executable} -c 'import time; time.sleep(120)'"
    proc = subprocess.Popen(["bash", "-c", " & ".join([sleeper] * 4) + " & wait"])
    try:
        deadline = time.monotonic() + 60
        while len(process_tree_pids(proc.pid)) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        tree = process_tree_memory(proc.pid)
        if len(tree.processes) != 5:
            raise SystemExit(f"expected a tree of 5 processes, got {len(tree.processes)}")
        ours = per_read_us(lambda: process_tree_memory(proc.pid), args.reads)
        full = per_read_us(lambda: psutil_tree(proc.pid, True), args.reads)
        rss = per_read_us(lambda: psutil_tree(proc.pid, False), args.reads)
    finally:
        proc.kill()
        proc.wait()
    mib = 1024 * 1024
    print(
        f"tree of 5: PSS {tree.pss_bytes / mib:.1f} MiB, USS {tree.uss_bytes / mib:.1f} MiB, "
        f"RSS {tree.rss_bytes / mib:.1f} MiB (RSS/PSS {tree.rss_bytes / tree.pss_bytes:.2f})"
    )
    print(f"host-pss reading (smaps_rollup):      {ours:8.0f} us per read")
    print(f"psutil memory_full_info (same PSS):   {full:8.0f} us per read ({full / ours:.1f}x)")
    print(f"psutil memory_info (RSS only):        {rss:8.0f} us per read ({rss / ours:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
