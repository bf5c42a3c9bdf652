"""The options every closed-loop load generator shares: Locust workers and their master."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from mmelocal.bench.loadtest.workers import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_MASTER_HOST

F = TypeVar("F", bound=Callable[..., Any])


def loadgen_options(command: F) -> F:
    """``--workers``, ``--remote-workers``, ``--master-host``, ``--master-port``,
    ``--connect-timeout`` (Locust's distributed mode; see :func:`generators_from`)."""
    options = [
        click.option(
            "--workers",
            type=click.IntRange(min=0),
            default=None,
            help="Locust worker processes on this machine, plus a master [default: one per "
            "core less one; half the cores when the endpoint is on this machine; 1 for runs "
            "under 20 users].",
        ),
        click.option(
            "--remote-workers",
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            help="Workers to wait for from other machines (start them there with mmelocal "
            "loadtest-worker --master-host THIS_HOST).",
        ),
        click.option(
            "--master-host",
            default=DEFAULT_MASTER_HOST,
            show_default=True,
            help="Address the Locust master binds (0.0.0.0 or this machine's address for "
            "remote workers).",
        ),
        click.option(
            "--master-port",
            type=click.IntRange(1, 65535),
            default=None,
            help="Port the master binds [default: 5557 with remote workers, else a free one].",
        ),
        click.option(
            "--connect-timeout",
            "connect_timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            default=DEFAULT_CONNECT_TIMEOUT_S,
            show_default=True,
            help="Seconds the master waits for its workers to connect.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def generators_from(params: Mapping[str, Any]) -> Any:
    """The :class:`~mmelocal.bench.loadtest.workers.LoadGenerators` of the values of
    :func:`loadgen_options`."""
    from mmelocal.bench.loadtest.workers import LoadGenerators

    return LoadGenerators(
        workers=params.get("workers"),
        remote_workers=params.get("remote_workers", 0),
        master_host=params.get("master_host", DEFAULT_MASTER_HOST),
        master_port=params.get("master_port"),
        connect_timeout_s=params.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S),
    )


__all__ = ["generators_from", "loadgen_options"]
