"""How many Locust processes generate the load, and where (Locust's distributed mode).

One Locust process tops out at one core (``benchmarks/loadgen_workers.py`` measures how
many raw HTTP and boto3/SigV4 requests/s that is against a trivial server).
Past that the load test measures its own client. :class:`LoadGenerators` says how many
worker processes to start on this machine (``workers``), how many more to wait for from
other machines (``remote_workers``, started there with ``mmelocal loadtest-worker``), and
where the master listens. The Locust side is :mod:`mmelocal.bench.loadtest._locust_dist`;
one local worker and no remote one runs the single process of
:mod:`mmelocal.bench.loadtest._locust_worker`.
Pure data and arithmetic: nothing here imports locust.
"""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mmelocal.errors import UserInputError

#: the port Locust's own master uses by default (``locust --master-bind-port``)
DEFAULT_MASTER_PORT = 5557
#: the master binds loopback unless told otherwise: never every interface unasked
DEFAULT_MASTER_HOST = "127.0.0.1"
#: a stage whose busiest worker used this share of one core is flagged as client-bound
SATURATED_CPU_PERCENT = 90.0
#: the share of a core each worker should stay under when we size the worker count
TARGET_CPU_PERCENT = 70.0
#: below this many users a run is tiny: one process generates it easily
TINY_RUN_USERS = 20
#: how often a worker sends the latencies it measured (what a dead worker loses at most)
BATCH_INTERVAL_S = 1.0
#: how long the master waits for its workers to connect
DEFAULT_CONNECT_TIMEOUT_S = 60.0
#: how long a worker started apart (``mmelocal loadtest-worker``) waits for its master
DEFAULT_MASTER_WAIT_S = 120.0
#: the exit code of a worker process whose master never answered
NO_MASTER_EXIT_CODE = 3


@dataclass(frozen=True, kw_only=True)
class LoadGenerators:
    """Where the load comes from.

    ``workers``: Locust worker processes started on this machine (None: :func:`default_workers`;
    0: only remote ones). ``remote_workers``: workers the master waits for from other
    machines. ``master_host``/``master_port``: the address the master binds (loopback and a
    free port by default; give ``0.0.0.0`` or an interface's address for remote workers).
    """

    workers: int | None = None
    remote_workers: int = 0
    master_host: str = DEFAULT_MASTER_HOST
    master_port: int | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 0:
            raise UserInputError(f"workers must be >= 0, got {self.workers}")
        if self.remote_workers < 0:
            raise UserInputError(f"remote workers must be >= 0, got {self.remote_workers}")
        if self.workers == 0 and self.remote_workers == 0:
            raise UserInputError(
                "--workers 0 leaves no load generator: give --remote-workers N (and start "
                "them with mmelocal loadtest-worker) or --workers >= 1"
            )
        if self.master_port is not None and not 1 <= self.master_port <= 65535:
            raise UserInputError(f"master port must be 1..65535, got {self.master_port}")
        if self.connect_timeout_s <= 0:
            raise UserInputError(f"connect timeout must be > 0 s, got {self.connect_timeout_s}")
        if not self.master_host:
            raise UserInputError("master host must be an address to bind, e.g. 127.0.0.1")

    def local_workers(self, *, endpoint_is_local: bool, max_users: int) -> int:
        """The local worker count, the default resolved."""
        if self.workers is not None:
            return self.workers
        if self.remote_workers:
            return 0
        return default_workers(endpoint_is_local=endpoint_is_local, max_users=max_users)

    @property
    def connect_host(self) -> str:
        """Where local workers reach the master."""
        return "127.0.0.1" if self.master_host in ("0.0.0.0", "*", "::") else self.master_host


def usable_cpus() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(*, endpoint_is_local: bool, max_users: int, cpus: int | None = None) -> int:
    """One for tiny runs; else one per core, less one for the master, and with the server
    under test on this machine only half the cores (the server needs the rest)."""
    cores = usable_cpus() if cpus is None else cpus
    if max_users < TINY_RUN_USERS:
        return 1
    if endpoint_is_local:
        return max(1, cores // 2)
    return max(1, cores - 1)


def endpoint_is_local(worker_config: dict[str, Any]) -> bool:
    """Whether the endpoint the load goes to is on this machine (loopback)."""
    url = worker_config.get("host") or worker_config.get("endpoint_url")
    if not url:
        return False  # a SageMaker endpoint in the cloud
    host = urlsplit(str(url)).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def workers_needed(total_cpu_percent: float, workers: int) -> int:
    """Workers that keep each under :data:`TARGET_CPU_PERCENT` at the CPU a stage used
    (one more than now at least: a saturated worker hides how much more it would use)."""
    return max(workers + 1, math.ceil(total_cpu_percent / TARGET_CPU_PERCENT))


__all__ = [
    "BATCH_INTERVAL_S",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_MASTER_HOST",
    "DEFAULT_MASTER_PORT",
    "SATURATED_CPU_PERCENT",
    "TARGET_CPU_PERCENT",
    "TINY_RUN_USERS",
    "LoadGenerators",
    "default_workers",
    "endpoint_is_local",
    "usable_cpus",
    "workers_needed",
]
