"""The options every closed-loop load generator shares: Locust workers and their master."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from mmelocal.bench.loadtest.workers import DEFAULT_MASTER_PORT, LoadGenerators
from mmelocal.cli._defaults import field_option
from mmelocal.cli._options import stacked

F = TypeVar("F", bound=Callable[..., Any])


def loadgen_options(command: F) -> F:
    """``--workers``, ``--remote-workers``, ``--master-host``, ``--master-port``,
    ``--connect-timeout`` (Locust's distributed mode; see :func:`generators_from`): each
    named after the :class:`LoadGenerators` field it sets, with its default."""
    return stacked(
        click.option(
            "--workers",
            type=click.IntRange(min=0),
            default=None,
            help="Locust worker processes on this machine, plus a master [default: one per "
            "core less one; half the cores when the endpoint is on this machine; 1 for runs "
            "under 20 users].",
        ),
        field_option(
            LoadGenerators,
            "remote_workers",
            type=click.IntRange(min=0),
            help="Workers to wait for from other machines (start them there with mmelocal "
            "loadtest-worker --master-host THIS_HOST).",
        ),
        field_option(
            LoadGenerators,
            "master_host",
            help="Address the Locust master binds (0.0.0.0 or this machine's address for "
            "remote workers).",
        ),
        click.option(
            "--master-port",
            type=click.IntRange(1, 65535),
            default=None,
            help=f"Port the master binds [default: {DEFAULT_MASTER_PORT} with remote workers, "
            "else a free one].",
        ),
        field_option(
            LoadGenerators,
            "connect_timeout_s",
            "--connect-timeout",
            type=click.FloatRange(min=0, min_open=True),
            help="Seconds the master waits for its workers to connect.",
        ),
    )(command)


def generators_from(params: Mapping[str, Any]) -> LoadGenerators:
    """The :class:`~mmelocal.bench.loadtest.workers.LoadGenerators` of the values of
    :func:`loadgen_options` in ``params`` (other keys are ignored)."""
    names = [item.name for item in dataclasses.fields(LoadGenerators)]
    return LoadGenerators(**{name: params[name] for name in names if name in params})


__all__ = ["generators_from", "loadgen_options"]
