"""What the local AWS's HTTPS proxy costs per call (the way the SageMaker SDK reaches STS).

Measured in one run, in-process: ``GetCallerIdentity`` p50 and p99 over 200 sequential
calls (keep-alive) through ``HTTPS_PROXY`` to ``https://sts.us-east-1.amazonaws.com``
(``CONNECT``, then TLS with the local CA), against the same call to ``AWS_ENDPOINT_URL``
(plain HTTP, the reference), the two interleaved in rounds so load changes hit both.

Goal: the proxy adds a few milliseconds at most (it carries a notebook's handful of STS
calls, not its traffic). Run: ``.venv/bin/python benchmarks/local_aws_proxy.py``.
"""

from __future__ import annotations

import os
import time

import boto3

from mmelocal.localaws import LocalAws
from mmelocal.stats import nearest_rank

CALLS = 200
ROUNDS = 4


def main() -> None:
    with LocalAws(port=0) as aws:
        os.environ.update(aws.env())
        clients = {
            "AWS_ENDPOINT_URL (reference)": boto3.client("sts", region_name="us-east-1"),
            "HTTPS_PROXY + AWS_CA_BUNDLE": boto3.client(
                "sts", region_name="us-east-1", endpoint_url="https://sts.us-east-1.amazonaws.com"
            ),
        }
        times: dict[str, list[float]] = {label: [] for label in clients}
        for client in clients.values():
            client.get_caller_identity()  # connections opened, TLS done
        for _ in range(ROUNDS):
            for label, client in clients.items():
                for _ in range(CALLS // ROUNDS):
                    start = time.perf_counter()
                    client.get_caller_identity()
                    times[label].append(time.perf_counter() - start)
    reference = sorted(next(iter(times.values())))
    print(f"GetCallerIdentity, {CALLS} calls each, keep-alive")
    for label, values in times.items():
        ordered = sorted(values)
        p50, p99 = nearest_rank(ordered, 0.5), nearest_rank(ordered, 0.99)
        ratio = p50 / nearest_rank(reference, 0.5)
        print(f"  {label:30s} p50 {p50 * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms  x{ratio:.2f}")


if __name__ == "__main__":
    main()
