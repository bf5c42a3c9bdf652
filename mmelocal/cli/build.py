"""``mmelocal build``: model source -> verified artifact -> config.pbtxt -> repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mmelocal.builder.build import BuildOptions
from mmelocal.cli._defaults import field_option, format_option, preset_option, tolerance_options
from mmelocal.cli._options import BareJsonCommand, json_option

TASKS = (
    "feature-extraction",
    "sequence-classification",
    "text-classification",
    "image-classification",
)


class _BatchSizes(click.ParamType):
    """A comma-separated list of positive integers (``4,8``)."""

    name = "N[,N...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            sizes = tuple(int(v) for v in str(value).split(",") if v.strip())
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of integers", param, ctx)
        if not sizes or any(s < 1 for s in sizes):
            self.fail(f"batch sizes must be integers >= 1, got {value!r}", param, ctx)
        return sizes


@click.command(cls=BareJsonCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source")
@click.option("--repo", required=True, type=click.Path(file_okay=False), help="Model repository.")
@click.option("--name", default=None, help="Model name (default: derived from SOURCE).")
@format_option("fmt", "Artifact format.")
@click.option(
    "--task", type=click.Choice(TASKS), default=None, help="Model head (default: from the model)."
)
@field_option(BuildOptions, "seq_len", type=int, help="Sequence length of text example inputs.")
@preset_option("max_batch_size", help="max_batch_size.", type=int)
@preset_option(
    "dynamic_batching", "--dynamic-batching/--no-dynamic-batching", help="Dynamic batching."
)
@preset_option(
    "preferred_batch_sizes",
    "--preferred-batch-size",
    "preferred_batch_size",
    type=_BatchSizes(),
    help="Preferred batch sizes, e.g. 4,8.",
)
@preset_option("max_queue_delay_us", type=int, help="Batcher delay.")
@preset_option("instance_count", "--instances", "instances", type=int, help="instance_group count.")
@preset_option("kind", type=click.Choice(("auto", "gpu", "cpu")), help="instance_group kind.")
@preset_option("warmup", "--warmup/--no-warmup", help="model_warmup entries.")
@click.option(
    "--verify/--no-verify",
    "do_verify",
    default=True,
    show_default=True,
    help="Compare the artifact with the source.",
)
@tolerance_options(BuildOptions)
@click.option(
    "--weights",
    default=None,
    metavar="DEFAULT|NAME|none",
    help="torchvision/timm weights, downloaded once into TORCH_HOME [DEFAULT]; none: random.",
)
@click.option(
    "--revision", default=None, help="Hub names: branch, tag or commit [the default branch]."
)
@field_option(
    BuildOptions, "version", "--version", "model_version", type=int, help="Version folder to write."
)
@click.option("--fp16", is_flag=True, help="TensorRT: allow FP16 kernels.")
@click.option("--int8", is_flag=True, help="TensorRT: allow INT8 kernels.")
@click.option("--trt-image", default=None, help="TensorRT: Docker image with trtexec.")
@click.option(
    "--reference",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Verify against this .npz (input:NAME / output:NAME, one batch) instead of the "
    "source; a batching model is checked on its rows at batch 1, 2 and 4 too.",
)
@json_option()
def build(
    source: str,
    repo: str,
    name: str | None,
    fmt: str,
    task: str | None,
    seq_len: int,
    max_batch_size: int | None,
    dynamic_batching: bool | None,
    preferred_batch_size: tuple[int, ...] | None,
    max_queue_delay_us: int | None,
    instances: int | None,
    kind: str | None,
    warmup: bool | None,
    do_verify: bool,
    atol: float,
    rtol: float,
    weights: str | None,
    revision: str | None,
    model_version: int,
    fp16: bool,
    int8: bool,
    trt_image: str | None,
    reference: str | None,
    json_out: Path | None,
) -> None:
    """Build SOURCE into a verified Triton model in --repo.

    Options marked [preset] default to the model family's preset
    (model_repo_templates/presets); only the ones given override it.

    SOURCE: minilm (the embedded default), a Hugging Face folder, a hub name (org/name,
    downloaded into the hub cache: HF_ENDPOINT, HF_HOME, HF_TOKEN and HF_HUB_OFFLINE apply),
    torchvision:NAME, timm:NAME, or an existing .pt / .onnx file.
    """
    from mmelocal.builder.build import build_model
    from mmelocal.cli._output import err_console

    overrides = {
        "max_batch_size": max_batch_size,
        "dynamic_batching": dynamic_batching,
        "preferred_batch_sizes": preferred_batch_size,
        "max_queue_delay_us": max_queue_delay_us,
        "instance_count": instances,
        "kind": kind,
        "warmup": warmup,
    }
    options = BuildOptions(
        name=name,
        format=fmt,
        task=task,
        seq_len=seq_len,
        weights=weights if weights is not None else _default_weights(source),
        revision=revision,
        overrides=overrides,
        verify=do_verify,
        atol=atol,
        rtol=rtol,
        version=model_version,
        fp16=fp16,
        int8=int8,
        trt_docker_image=trt_image,
        trt_docker_gpus=trt_docker_gpus(fmt, trt_image),
        reference_npz=reference,
    )
    to_stdout = json_out is not None and str(json_out) == "-"
    if err_console.is_terminal and not to_stdout:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as bar:
            job = bar.add_task("starting", total=None)
            result = build_model(
                source,
                repo=repo,
                options=options,
                progress=lambda stage, msg: bar.update(job, description=f"[bold]{stage}[/]: {msg}"),
            )
    else:
        result = build_model(
            source,
            repo=repo,
            options=options,
            progress=lambda stage, msg: err_console.print(
                f"[dim]{stage}: {msg}[/]", highlight=False
            ),
        )
    from mmelocal.cli._output import emit_json

    if not emit_json(result_to_dict(result), json_out):
        _print_result(result)


def trt_docker_gpus(fmt: str, trt_image: str | None) -> tuple[str, ...] | None:
    """The GPUs (UUIDs) a ``--trt-image`` build's container is given: those
    ``CUDA_VISIBLE_DEVICES`` names, read as the Docker launcher reads it
    (:func:`~mmelocal.runtime.visible_gpus.container_gpus`); None (every GPU) when it is
    unset, and when no container runs (another format, or TensorRT found here)."""
    if fmt != "tensorrt" or not trt_image:
        return None
    from mmelocal.builder.onnx2trt import choose_builder

    if choose_builder(docker_image=trt_image)[0] != "docker":
        return None
    from mmelocal.runtime.visible_gpus import container_gpus

    chosen = container_gpus()
    return None if chosen is None else chosen.uuids


def _default_weights(source: str) -> str | None:
    """DEFAULT (trained) weights for torchvision:/timm: sources; others take none."""
    from mmelocal.builder.sources import is_vision_spec

    return "DEFAULT" if is_vision_spec(source) else None


def result_to_dict(result: Any) -> dict[str, Any]:
    """A BuildResult as plain JSON-able data."""
    sig = result.artifact.signature_for(result.options.max_batch_size)
    report = result.verify_report
    return {
        "name": result.name,
        "model_dir": str(result.model_dir),
        "config_path": str(result.config_path),
        "artifact_path": str(result.artifact_path),
        "format": result.artifact.format,
        "platform": result.artifact.platform,
        "family": result.family,
        "inputs": [
            {"name": s.name, "data_type": s.data_type, "dims": list(s.dims)} for s in sig.inputs
        ],
        "outputs": [
            {"name": s.name, "data_type": s.data_type, "dims": list(s.dims)} for s in sig.outputs
        ],
        "max_batch_size": result.options.max_batch_size,
        "verification": None
        if report is None
        else {
            "skipped": report.skipped,
            "ok": report.ok,
            "atol": report.atol,
            "rtol": report.rtol,
            "max_abs_diff": report.max_abs_diff,
            "max_rel_diff": report.max_rel_diff,
            "rows": report.table(),
            "notes": list(report.notes),
        },
        "reference_path": str(result.reference_path) if result.reference_path else None,
        "timings_s": dict(result.timings_s),
        "notes": list(result.notes),
    }


def _print_result(result: Any) -> None:
    from rich.table import Table

    from mmelocal.cli._output import console

    sig = result.artifact.signature_for(result.options.max_batch_size)
    from mmelocal.units import mib

    size = mib(result.artifact_path.stat().st_size, digits=1)
    table = Table(title=f"built {result.name}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("artifact", f"{result.artifact.file_name} ({size})")
    table.add_row("platform", f"{result.artifact.platform} ({result.family} preset)")
    for label, specs in (("inputs", sig.inputs), ("outputs", sig.outputs)):
        table.add_row(label, "\n".join(f"{s.name}  {s.data_type}  {list(s.dims)}" for s in specs))
    table.add_row("max_batch_size", str(result.options.max_batch_size))
    table.add_row("time", "  ".join(f"{k} {v:.1f}s" for k, v in result.timings_s.items()))
    if result.notes:
        table.add_row("notes", "\n".join(result.notes))
    console.print(table)
    for label, path in (
        ("artifact", result.artifact_path),
        ("config", result.config_path),
        ("reference", result.reference_path),
    ):
        console.print(f"{label:>9}: {path}", soft_wrap=True, highlight=False)
    report = result.verify_report
    if report is None:
        console.print("verification: [yellow]off[/] (--no-verify)")
        return
    if report.skipped:
        console.print(f"verification: [yellow]skipped[/]: {'; '.join(report.notes)}")
        return
    vt = Table(
        title=f"verification (atol {report.atol:g}, rtol {report.rtol:g})", title_justify="left"
    )
    for col in ("output", "shapes", "max abs diff", "max rel diff", "ok"):
        vt.add_column(col)
    for output, (abs_diff, rel_diff) in report.per_output().items():
        rows = [r for r in report.rows if r.output == output]
        shapes = ", ".join(
            f"b{r.batch_size}" + (f"x{r.seq_len}" if r.seq_len else "") for r in rows
        )
        ok = all(r.ok for r in rows)
        vt.add_row(
            output,
            shapes,
            f"{abs_diff:.2e}",
            f"{rel_diff:.2e}",
            "[green]yes[/]" if ok else "[red]no[/]",
        )
    console.print(vt)
