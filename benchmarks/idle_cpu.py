"""CPU an idle emulator uses: ``mmelocal serve`` with the tiny model loaded, no traffic.

The emulator starts as ``overhead.py`` starts it (:class:`overhead.Setup`'s command, Triton
outside a network namespace), serves the tiny Python-backend model once (a cold load), waits
``--settle`` seconds, then reads the emulator process's user + system time from
``/proc/PID/stat`` over ``--rounds`` windows of ``--window`` seconds each (Triton's own
processes are not counted: they are the same with or without the emulator).

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/idle_cpu.py [--rounds 3] [--window 10]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from overhead import Setup, http_ok, mme_headers, tiny_model

from mmelocal.runtime.netns import NETNS_ENV
from mmelocal.runtime.readiness import (
    start_logging_server,
    stop_child,
    wait_until_ready,
)


def cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=10.0, help="seconds per reading")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before the first")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mmelocal-idle-cpu-"))
    store = work / "store"
    store.mkdir()
    model = tiny_model(store, 0.0)
    setup = Setup(work, store)
    serve, url = start_logging_server(
        setup.serve_command, work / "serve.log", timeout_s=180, env={NETNS_ENV: "0"}
    )
    try:
        wait_until_ready(
            lambda: http_ok(f"{url}/ping"),
            timeout_s=180,
            url=url,
            log_path=work / "serve.log",
            process=serve,
        )
        request = urllib.request.Request(
            f"{url}/endpoints/bench/invocations", data=model.body, headers=mme_headers(model.target)
        )
        urllib.request.urlopen(request, timeout=120).read()
        time.sleep(args.settle)
        hz = os.sysconf("SC_CLK_TCK")
        for _ in range(args.rounds):
            t0, c0 = time.monotonic(), cpu_ticks(serve.pid)
            time.sleep(args.window)
            seconds, ticks = time.monotonic() - t0, cpu_ticks(serve.pid) - c0
            print(f"idle emulator: {1e3 * ticks / hz / seconds:.2f} ms of CPU per second")
    finally:
        stop_child(serve)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
