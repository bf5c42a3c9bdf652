"""The ``mmelocal`` command: a thin click group; each subcommand lives in its own module.

Subcommand modules are imported only when their command runs, so ``mmelocal --help``
stays fast and a missing optional extra only affects the command that needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

# command name -> (module, attribute, one-line help)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "build": ("mmelocal.cli.build", "build", "Build a verified Triton model from a source."),
    "validate": ("mmelocal.cli.validate", "validate", "Validate a repository, model or tarball."),
    "package": ("mmelocal.cli.package", "package", "Package a model folder as MME tarballs."),
    "check": ("mmelocal.cli.check", "check", "Pre-deployment check on a real Triton."),
    "triton": ("mmelocal.cli.triton", "triton", "Start, stop or inspect a kept Triton server."),
    "serve": ("mmelocal.cli.serve", "serve", "Run the SageMaker MME emulator."),
    "local-aws": ("mmelocal.cli.local_aws", "local_aws", "A local AWS with real MME endpoints."),
    "demo": ("mmelocal.cli.demo", "demo", "The end-to-end demo on the packaged MiniLM."),
    "capacity": ("mmelocal.cli.capacity", "capacity", "How many copies of a model fit."),
    "loadtest": ("mmelocal.cli.loadtest", "loadtest", "Locust load test of an endpoint."),
    "loadtest-worker": (
        "mmelocal.cli.loadtest_worker",
        "loadtest_worker",
        "Locust workers here for a load test's master elsewhere.",
    ),
    "sweep": ("mmelocal.cli.sweep", "sweep", "Configuration sweep with recommendations."),
    "report": ("mmelocal.cli.report", "report", "HTML report with plots from results."),
    "traffic": (
        "mmelocal.cli.traffic",
        "traffic",
        "Make, replay, simulate traffic; size the fleet.",
    ),
    "deploy": ("mmelocal.cli.deploy", "deploy", "Deploy a store to a SageMaker MME."),
    "undeploy": ("mmelocal.cli.deploy", "undeploy", "Delete what deploy created."),
    "smoke": ("mmelocal.cli.deploy", "smoke", "Check a deployed endpoint's answers."),
    "benchmark": (
        "mmelocal.cli.benchmark",
        "benchmark",
        "Deploy, measure (capacity, load test, sweep), report, undeploy.",
    ),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Names of the subcommands whose module is installed, in help order."""
        return [name for name, (mod, _, _) in _COMMANDS.items() if _module_exists(mod)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the subcommand's module and return its click command (None if unknown)."""
        entry = _COMMANDS.get(cmd_name)
        if entry is None or not _module_exists(entry[0]):
            return None
        module = importlib.import_module(entry[0])
        command: click.Command = getattr(module, entry[1])
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands with their one-line help, without importing them."""
        rows = [(name, _COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(package_name="mmelocal")
def cli(verbose: int) -> None:
    """Build, run and measure Triton model repositories before SageMaker MME deployment."""
    from mmelocal.cli._output import configure_logging

    configure_logging(verbose)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point; errors from the library become one-line messages."""
    from mmelocal.cli._output import run_cli

    return run_cli(cli, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["cli", "main"]
