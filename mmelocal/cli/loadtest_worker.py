"""``mmelocal loadtest-worker``: Locust workers on this machine for a master on another one."""

from __future__ import annotations

import click

from mmelocal.bench.loadtest.workers import (
    DEFAULT_MASTER_PORT,
    DEFAULT_MASTER_WAIT_S,
    NO_MASTER_EXIT_CODE,
)
from mmelocal.cli._output import err_console, fail


@click.command("loadtest-worker")
@click.option("--master-host", required=True, help="Address of the machine running the master.")
@click.option(
    "--master-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_MASTER_PORT,
    show_default=True,
    help="Port the master binds (its --master-port).",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes to start here (one per core they may use).",
)
@click.option(
    "--master-timeout",
    "master_wait_s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_MASTER_WAIT_S,
    show_default=True,
    help="Seconds to wait for the master to answer before giving up (exit 1).",
)
def loadtest_worker(
    master_host: str, master_port: int, processes: int, master_wait_s: float
) -> None:
    """Join the load test that `mmelocal loadtest --remote-workers N --master-host ADDR` runs
    on another machine: the master sends the settings and the payload (no local files are
    needed) and the stage to run; this exits when the master's test ends.

    The endpoint URL is used as the master was given it: it must be reachable from here
    (not 127.0.0.1 of the master's machine). boto3 mode signs with this machine's AWS
    credentials.
    """
    import subprocess
    import sys

    from mmelocal.bench.loadtest.runner import DIST_MODULE, _child_env

    command = [
        sys.executable,
        "-m",
        DIST_MODULE,
        "worker",
        "--master-host",
        master_host,
        "--master-port",
        str(master_port),
        "--master-wait",
        str(master_wait_s),
    ]
    err_console.print(
        f"{processes} Locust worker(s) waiting for the master at {master_host}:{master_port} "
        f"(up to {master_wait_s:g} s; start `mmelocal loadtest --remote-workers N "
        "--master-host ADDR` there)",
        highlight=False,
    )
    children = [subprocess.Popen(command, env=_child_env()) for _ in range(processes)]
    try:
        codes = [child.wait() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if NO_MASTER_EXIT_CODE in codes:
        fail(
            f"no load-test master answered at {master_host}:{master_port} within "
            f"{master_wait_s:g} s: start the master first (mmelocal loadtest --remote-workers "
            "N --master-host ADDR), check --master-host/--master-port and that the port is "
            "reachable from here, or wait longer with --master-timeout",
            code=1,
        )
    if any(codes):
        raise SystemExit(max(codes))
