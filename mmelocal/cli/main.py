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

# command name -> one-line help; the command is the attribute named like it (dashes as
# underscores) of the module mmelocal.cli.<same name>
_COMMANDS: dict[str, str] = {
    "build": "Build a verified Triton model from a source.",
    "validate": "Validate a repository, model or tarball.",
    "package": "Package a model folder as MME tarballs.",
    "check": "Pre-deployment check on a real Triton.",
    "triton": "Start, stop or inspect a kept Triton server.",
    "serve": "Run the SageMaker MME emulator.",
    "local-aws": "A local AWS with real MME endpoints.",
    "demo": "The end-to-end demo on the packaged MiniLM.",
    "capacity": "How many copies of a model fit.",
    "loadtest": "Locust load test of an endpoint.",
    "loadtest-worker": "Locust workers here for a load test's master elsewhere.",
    "sweep": "Configuration sweep with recommendations.",
    "report": "HTML report with plots from results.",
    "traffic": "Make, replay, simulate traffic; size the fleet.",
    "deploy": "Deploy a store to a SageMaker MME.",
    "undeploy": "Delete what deploy created.",
    "smoke": "Check a deployed endpoint's answers.",
    "benchmark": "Deploy, measure (capacity, load test, sweep), report, undeploy.",
}


def _where(name: str) -> tuple[str, str]:
    """(module, attribute) of command ``name``."""
    attribute = name.replace("-", "_")
    return f"mmelocal.cli.{attribute}", attribute


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Names of the subcommands whose module is installed, in help order."""
        return [name for name in _COMMANDS if _module_exists(_where(name)[0])]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the subcommand's module and return its click command (None if unknown)."""
        if cmd_name not in _COMMANDS:
            return None
        module, attribute = _where(cmd_name)
        if not _module_exists(module):
            return None
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands with their one-line help, without importing them."""
        rows = [(name, _COMMANDS[name]) for name in self.list_commands(ctx)]
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
