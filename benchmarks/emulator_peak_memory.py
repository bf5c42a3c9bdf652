"""Peak resident memory of the emulator process itself under many big requests at once.

``mmelocal serve`` (a subprocess, one tritonserver, the tiny numpy model as the store, made
to take ``--compute-ms`` per execution as a CPU ResNet-50 would, so that the requests queue
and every body is held by the emulator at the same time) is warmed with one small call;
then N callers (threads, one connection each, 127.0.0.1 only) send one InvokeEndpoint
each with a 3 MiB JSON body (a valid KServe v2 request padded with whitespace to the size
of the seeds' ResNet-50 JSON payload), all released at once.
The emulator's peak resident memory comes from ``VmHWM`` in ``/proc/PID/status`` (the
kernel's high-water mark, exact; a fresh server per caller count, so each peak is that
round's) and from sampling ``VmRSS`` every 5 ms.

Printed per round: the baseline RSS (warm, idle), the peak, and the peak's growth over the
baseline as a ratio to ``callers x body``: a request held once gives about 1.0; a body
copied along the way gives a multiple. Only the emulator process is measured (not Triton).

Bounded: at most 200 callers, one request each, 180 s per request, 600 s per round.
Run: ``.venv/bin/python benchmarks/emulator_peak_memory.py [--callers 50,200]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BODY_BYTES = 3 * 1024 * 1024
MAX_CALLERS = 200
REQUEST_TIMEOUT_S = 180.0
ROUND_TIMEOUT_S = 600.0
HOST = "127.0.0.1"


def padded_body(size: int) -> bytes:
    """The tiny model's request, padded with JSON whitespace to ``size`` bytes (or unpadded)."""
    import numpy as np

    from mmelocal.testing.tiny_model import request_json

    small = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()
    return small[:-1] + b" " * (size - len(small)) + b"}"


def status_kib(pid: int, field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of ``pid`` in KiB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def post(port: int, body: bytes, timeout_s: float = REQUEST_TIMEOUT_S) -> int:
    """One InvokeEndpoint on loopback; the HTTP status."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "t.tar.gz"}
        conn.request("POST", "/endpoints/bench/invocations", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def one_round(store: Path, callers: int, body: bytes) -> dict[str, float]:
    """Fresh server, warm call, ``callers`` big calls at once; memory figures in bytes."""
    from mmelocal.runtime.readiness import (
        http_ok,
        start_logging_server,
        stop_child,
        wait_until_ready,
    )

    cli = Path(sys.executable).with_name("mmelocal")
    proc, url = start_logging_server(
        [str(cli), "serve", "--store", str(store), "--host", HOST],
        store.parent / "serve.log",
        timeout_s=180,
    )
    try:
        port = int(url.rsplit(":", 1)[1])
        wait_until_ready(
            lambda: http_ok(f"{url}/ping"), timeout_s=180, url=url, log_path=None, process=proc
        )
        if post(port, padded_body(0)) != 200:  # the cold load, with a small body
            raise SystemExit("the warm-up call failed")
        baseline = status_kib(proc.pid, "VmRSS") * 1024
        sampled = [baseline]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                sampled.append(status_kib(proc.pid, "VmRSS") * 1024)
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = threading.Barrier(callers)

        def call(_: int) -> int:
            start.wait(timeout=60)
            return post(port, body)

        t0 = time.monotonic()
        with ThreadPoolExecutor(callers) as pool:
            statuses = list(pool.map(call, range(callers), timeout=ROUND_TIMEOUT_S))
        seconds = time.monotonic() - t0
        done.set()
        sampler.join()
        hwm = status_kib(proc.pid, "VmHWM") * 1024
    finally:
        stop_child(proc)
    return {
        "callers": callers,
        "ok": sum(1 for s in statuses if s == 200),
        "seconds": seconds,
        "baseline_bytes": baseline,
        "peak_bytes": max(hwm, max(sampled)),
        "sampled_peak_bytes": max(sampled),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", default="50,200", help="comma-separated caller counts")
    parser.add_argument(
        "--compute-ms", type=float, default=20.0, help="model time per execution (default 20)"
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.callers.split(",")]
    if any(not 1 <= c <= MAX_CALLERS for c in counts):
        raise SystemExit(f"callers must be between 1 and {MAX_CALLERS}")
    from mmelocal.testing.tiny_model import write_tarball

    body = padded_body(BODY_BYTES)
    mib = 1024 * 1024
    print(
        f"body {len(body) / mib:.1f} MiB, model {args.compute_ms:g} ms per execution; "
        "emulator process only (not Triton)"
    )
    print(
        f"{'callers':>8} {'ok':>5} {'s':>6} {'baseline MiB':>13} {'peak MiB':>9} "
        f"{'callers x body MiB':>19} {'peak / (c x b)':>15} {'(peak - base) / (c x b)':>24}"
    )
    with tempfile.TemporaryDirectory(prefix="mmelocal-peak-") as tmp:
        store = Path(tmp) / "store"
        store.mkdir()
        write_tarball(store / "t.tar.gz", compute_ms=args.compute_ms)
        for callers in counts:
            r = one_round(store, callers, body)
            held = callers * len(body)
            print(
                f"{callers:>8} {r['ok']:>5.0f} {r['seconds']:>6.1f} "
                f"{r['baseline_bytes'] / mib:>13.0f} {r['peak_bytes'] / mib:>9.0f} "
                f"{held / mib:>19.0f} {r['peak_bytes'] / held:>15.2f} "
                f"{(r['peak_bytes'] - r['baseline_bytes']) / held:>24.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
