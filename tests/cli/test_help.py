"""Every command's ``--help``: each option says what it is for.

An option with no help text showed only its type and default in ``--help`` and in the CLI
reference page (``docs/cli.md``, generated from the commands), while the same option of
another command explained itself (``--threshold`` of ``capacity measure`` did,
``capacity estimate``'s and ``capacity project``'s did not).
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from mmelocal.cli.main import cli


def _commands() -> Iterator[tuple[str, click.Command]]:
    context = click.Context(cli)
    pending: list[tuple[str, click.Command]] = [("mmelocal", cli)]
    while pending:
        path, command = pending.pop()
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None, name
                pending.append((f"{path} {name}", sub))
        else:
            yield path, command


def test_every_option_has_a_help_text() -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command in _commands()
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert not missing, missing


def _option(path: str, flag: str) -> click.Option:
    command = dict(_commands())[path]
    return next(p for p in command.params if isinstance(p, click.Option) and flag in p.opts)


def test_defaults_in_help_are_the_librarys_values() -> None:
    """``build --atol/--rtol`` and ``traffic make --zipf`` restated their defaults in the help
    text ("[1e-4]", "(default 1.0)"), apart from the values the library uses; they now
    carry the library's value as their default, shown as every other default is."""
    from mmelocal.builder.verify import default_tolerances
    from mmelocal.cli._defaults import default_of
    from mmelocal.traffic.make import Popularity

    atol, rtol = default_tolerances("fp32")
    expected = {
        ("mmelocal build", "--atol"): atol,
        ("mmelocal build", "--rtol"): rtol,
        ("mmelocal traffic make", "--zipf"): default_of(Popularity, "zipf_s"),
    }
    for (path, flag), value in expected.items():
        option = _option(path, flag)
        assert option.default == value and option.show_default, (path, flag, option.default)
        assert "default" not in (option.help or "") and "[" not in (option.help or ""), option.help


def _shown(value: object) -> str:
    """A preset value as ``--help`` writes it (on/off, 4,8, 100)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def test_build_help_shows_what_each_preset_gives() -> None:
    """``build``'s help restated preset values ("[preset: 8 NLP, 32 CNN]", "[preset: 100]"):
    ConvNeXt and ViT batch 16, RoBERTa and ViT wait 200 us. The help now reads each preset
    (``model_repo_templates/presets``): one value when all agree, else each family's."""
    from mmelocal.builder.presets import list_presets, load_preset

    fields = {
        "--max-batch-size": "max_batch_size",
        "--dynamic-batching": "dynamic_batching",
        "--preferred-batch-size": "preferred_batch_sizes",
        "--max-queue-delay-us": "max_queue_delay_us",
        "--instances": "instance_count",
        "--kind": "kind",
        "--warmup": "warmup",
    }
    for flag, field in fields.items():
        text = _option("mmelocal build", flag).help or ""
        values = {family: _shown(load_preset(family)["config"][field]) for family in list_presets()}
        if len(set(values.values())) == 1:
            assert f"[preset: {next(iter(values.values()))}]" in text, (flag, text)
        else:
            for family, value in values.items():
                assert f"{family} {value}" in text, (flag, family, text)


def test_triton_start_log_verbose_help_shows_both_defaults() -> None:
    """``triton start --log-verbose`` said "default 0; with --sagemaker the entrypoint's,
    verbose" beside the values a plain server runs with and the entrypoint table holds; it
    now reads them."""
    from pathlib import Path

    from mmelocal.runtime.entrypoint import KNOBS
    from mmelocal.runtime.server_config import ServerConfig

    plain = ServerConfig(model_repository=Path("r"), http_port=1, grpc_port=2, metrics_port=3)
    level = next(a for a in plain.to_args() if a.startswith("--log-verbose=")).split("=")[1]
    entrypoint = next(k.default for k in KNOBS if k.key == "SAGEMAKER_TRITON_LOG_VERBOSE")
    text = _option("mmelocal triton start", "--log-verbose").help or ""
    assert f"[default: {level};" in text, text
    assert f"SAGEMAKER_TRITON_LOG_VERBOSE's default: {entrypoint}]" in text, text
