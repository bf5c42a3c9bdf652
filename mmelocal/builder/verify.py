"""Run the exported artifact and its source on the same inputs and compare the outputs.

The source (the eager PyTorch module, or the ONNX file it came from) and the artifact
(TorchScript through ``torch.jit.load``, ONNX through onnxruntime on CPU) get the same
random inputs at several batch sizes and, for text models, several sequence lengths.
Every output must have the source's shape and dtype, and is compared element-wise like
``numpy.allclose``:
``|artifact - source| <= atol + rtol * |source|``. The report gives per output and
input shape the largest absolute difference and the largest relative difference
``|a - s| / |s|``, taken over the elements where the relative term of the tolerance
dominates (``|s| >= atol / rtol``, 0.1 with the fp32 defaults) so that values near zero,
which only the absolute tolerance governs, do not swamp it.

Default tolerances: fp32 ``atol=1e-4, rtol=1e-3``; fp16 ``atol=1e-2, rtol=1e-2``.
A TensorRT plan cannot be run without a GPU, and an artifact copied from the source
file has nothing independent to compare with: both are reported as skipped with the
reason, unless a reference ``.npz`` (``input:<name>`` / ``output:<name>``) is given.

A reference ``.npz`` holds one batch of ``n`` rows. For a model that batches (a dynamic
first axis and ``max_batch_size`` > 0 or unknown), its rows are also checked at the other
batch sizes (``batch_sizes``, by default 1, 2, 4 within ``max_batch_size``): the rows
taken in turn to make a batch of that size must give their recorded outputs, since
Triton's batcher serves a request alone or beside others. A model whose answer for one
request depends on the others in its batch fails there. Other sequence lengths cannot be
made from a recording: the reference is checked at its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mmelocal.builder.artifact import ExportedArtifact
from mmelocal.builder.runners import (
    first_line,
    import_torch,
    load_torchscript,
    onnx_session,
    run_session,
    run_torchscript_module,
    to_numpy,
)
from mmelocal.builder.sources.base import ModelSource
from mmelocal.errors import ExportError, UserInputError, VerificationError

TOLERANCES: dict[str, tuple[float, float]] = {"fp32": (1e-4, 1e-3), "fp16": (1e-2, 1e-2)}
"""precision -> (atol, rtol)."""
DEFAULT_BATCH_SIZES = (1, 2, 4)
DEFAULT_SEQ_LENS = (8, 32)


@dataclass(frozen=True, kw_only=True)
class VerifyRow:
    """The comparison of one output at one input shape."""

    output: str
    batch_size: int
    seq_len: int | None
    shape: tuple[int, ...]
    max_abs_diff: float
    max_rel_diff: float
    ok: bool
    problem: str = ""


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """All comparisons of one verification run (``skipped`` with a reason when none ran)."""

    rows: tuple[VerifyRow, ...]
    atol: float
    rtol: float
    skipped: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when every row is within tolerance (a skipped run is ok)."""
        return all(r.ok for r in self.rows)

    @property
    def max_abs_diff(self) -> float:
        """Largest absolute difference over all rows (0.0 when nothing ran)."""
        return max((r.max_abs_diff for r in self.rows), default=0.0)

    @property
    def max_rel_diff(self) -> float:
        """Largest relative difference over all rows (0.0 when nothing ran)."""
        return max((r.max_rel_diff for r in self.rows), default=0.0)

    def per_output(self) -> dict[str, tuple[float, float]]:
        """``{output: (max abs diff, max rel diff)}`` over every shape tried."""
        found: dict[str, tuple[float, float]] = {}
        for r in self.rows:
            a, b = found.get(r.output, (0.0, 0.0))
            found[r.output] = (max(a, r.max_abs_diff), max(b, r.max_rel_diff))
        return found

    def table(self) -> list[dict[str, Any]]:
        """Rows as plain dicts (output, batch_size, seq_len, shape, diffs, ok) for printing."""
        return [
            {
                "output": r.output,
                "batch_size": r.batch_size,
                "seq_len": r.seq_len,
                "shape": list(r.shape),
                "max_abs_diff": r.max_abs_diff,
                "max_rel_diff": r.max_rel_diff,
                "ok": r.ok,
                "problem": r.problem,
            }
            for r in self.rows
        ]


def default_tolerances(precision: str = "fp32") -> tuple[float, float]:
    """``(atol, rtol)`` for ``fp32`` or ``fp16`` (int8 uses the fp16 values)."""
    key = "fp16" if precision in ("fp16", "int8") else precision
    if key not in TOLERANCES:
        raise UserInputError(f"precision must be fp32, fp16 or int8, got {precision!r}")
    return TOLERANCES[key]


def verify(
    source: ModelSource,
    artifact: ExportedArtifact,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    batch_sizes: Sequence[int] | None = None,
    seq_lens: Sequence[int] | None = None,
    max_batch_size: int | None = None,
    reference_npz: Path | str | None = None,
    raise_on_failure: bool = True,
) -> VerifyReport:
    """Compare ``artifact`` with ``source``; raise VerificationError beyond tolerance.

    ``batch_sizes`` defaults to 1, 2, 4 (those within ``max_batch_size`` when it is > 0);
    ``seq_lens`` (text models) to 8, 32 and the source's sequence length.
    """
    a_def, r_def = default_tolerances("fp32")
    atol = a_def if atol is None else float(atol)
    rtol = r_def if rtol is None else float(rtol)
    if atol < 0 or rtol < 0:
        raise UserInputError(f"atol and rtol must be >= 0, got atol={atol}, rtol={rtol}")
    if artifact.format == "tensorrt":
        return VerifyReport(
            rows=(),
            atol=atol,
            rtol=rtol,
            skipped=True,
            notes=("TensorRT plans need a GPU to run; the ONNX it was built from was verified",),
        )
    runner = ArtifactRunner(artifact)
    if reference_npz is not None:
        batching = artifact.batch_dynamic and (max_batch_size is None or max_batch_size > 0)
        sizes = _batch_sizes(batch_sizes, max_batch_size) if batching else ()
        npz_rows = _compare_npz(runner, Path(reference_npz), sizes, atol, rtol)
        return _finish(VerifyReport(rows=tuple(npz_rows), atol=atol, rtol=rtol), raise_on_failure)
    if artifact.copied_from_source:
        return VerifyReport(
            rows=(),
            atol=atol,
            rtol=rtol,
            skipped=True,
            notes=(
                "the artifact is the source file itself: nothing independent to compare "
                "(pass a reference .npz to check its outputs)",
            ),
        )
    rows: list[VerifyRow] = []
    for b in _batch_sizes(batch_sizes, max_batch_size):
        for s in _seq_lens(seq_lens, source):
            inputs = source.make_inputs(b, s, seed=1000 + 31 * b + (s or 0))
            expected = source.run(inputs)
            named = {artifact.artifact_name(k): v for k, v in inputs.items()}
            actual = runner.run(named)
            for readable, want in expected.items():
                got = actual.get(artifact.artifact_name(readable))
                rows.append(_compare(readable, b, s, got, want, atol, rtol))
    return _finish(VerifyReport(rows=tuple(rows), atol=atol, rtol=rtol), raise_on_failure)


def _finish(report: VerifyReport, raise_on_failure: bool) -> VerifyReport:
    if raise_on_failure and not report.ok:
        bad = next(r for r in report.rows if not r.ok)
        shape = f"batch {bad.batch_size}" + (f", seq_len {bad.seq_len}" if bad.seq_len else "")
        why = bad.problem or (
            f"max abs diff {bad.max_abs_diff:.3g}, max rel diff {bad.max_rel_diff:.3g} "
            f"(atol {report.atol:g}, rtol {report.rtol:g})"
        )
        exc = VerificationError(
            f"output {bad.output!r} at {shape} differs from the source: {why}; raise "
            "--atol/--rtol if this precision loss is expected",
            max_abs_diff=report.max_abs_diff,
            max_rel_diff=report.max_rel_diff,
        )
        exc.report = report  # type: ignore[attr-defined]
        raise exc
    return report


def _batch_sizes(given: Sequence[int] | None, max_batch_size: int | None) -> tuple[int, ...]:
    if given:
        sizes = tuple(int(b) for b in given)
    elif max_batch_size and max_batch_size > 0:
        sizes = tuple(b for b in DEFAULT_BATCH_SIZES if b <= max_batch_size)
    else:
        sizes = DEFAULT_BATCH_SIZES
    if any(b < 1 for b in sizes):
        raise UserInputError(f"batch sizes must be >= 1, got {list(sizes)}")
    return sizes


def _seq_lens(given: Sequence[int] | None, source: ModelSource) -> tuple[int | None, ...]:
    if source.seq_len is None:
        return (None,)
    if given:
        lens = tuple(int(s) for s in given)
    else:
        lens = (*(s for s in DEFAULT_SEQ_LENS if s < source.seq_len), source.seq_len)
    if any(s < 1 for s in lens):
        raise UserInputError(f"sequence lengths must be >= 1, got {list(lens)}")
    return tuple(dict.fromkeys(lens))


def _compare(
    name: str, b: int, s: int | None, got: Any, want: np.ndarray, atol: float, rtol: float
) -> VerifyRow:
    shape = tuple(int(d) for d in want.shape)

    def failed(problem: str) -> VerifyRow:
        return VerifyRow(
            output=name,
            batch_size=b,
            seq_len=s,
            shape=shape,
            max_abs_diff=np.inf,
            max_rel_diff=np.inf,
            ok=False,
            problem=problem,
        )

    if got is None:
        return failed("missing from the artifact")
    got = to_numpy(got)
    if got.shape != want.shape:
        return failed(f"shape {list(got.shape)} != source {list(shape)}")
    if got.dtype != want.dtype:
        return failed(f"dtype {got.dtype} != source {want.dtype}")
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    diff = np.abs(g - w)
    finite = np.isfinite(g) == np.isfinite(w)
    max_abs = float(np.nanmax(diff)) if diff.size else 0.0
    big = np.abs(w) >= max(atol / rtol if rtol > 0 else atol, 1e-12)
    max_rel = float(np.max(diff[big] / np.abs(w[big]))) if big.any() else 0.0
    ok = bool(finite.all() and np.all(diff <= atol + rtol * np.abs(w)))
    return VerifyRow(
        output=name,
        batch_size=b,
        seq_len=s,
        shape=shape,
        max_abs_diff=max_abs,
        max_rel_diff=max_rel,
        ok=ok,
    )


def _compare_npz(
    runner: ArtifactRunner, path: Path, batch_sizes: Sequence[int], atol: float, rtol: float
) -> list[VerifyRow]:
    """Rows comparing the artifact with the recorded outputs: the batch as recorded, then
    for each of ``batch_sizes`` its rows taken in turn (none when the model does not
    batch, or a tensor's first axis is not the batch's)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise UserInputError(f"{path} is not a readable .npz file: {first_line(exc)}") from None
    inputs = {k.split(":", 1)[1]: v for k, v in arrays.items() if k.startswith("input:")}
    outputs = {k.split(":", 1)[1]: v for k, v in arrays.items() if k.startswith("output:")}
    if not inputs or not outputs:
        raise UserInputError(f"{path} needs input:<name> and output:<name> arrays")
    _check_npz_names(path, runner.artifact, inputs, outputs)
    first = next(iter(inputs.values()))
    batch = int(first.shape[0]) if first.ndim else 1
    tensors = [*inputs.values(), *outputs.values()]
    rows_of = batch >= 1 and all(t.ndim and t.shape[0] == batch for t in tensors)
    rows: list[VerifyRow] = []
    for size in dict.fromkeys((batch, *(batch_sizes if rows_of else ()))):
        pick = np.arange(size) % batch
        given = inputs if size == batch else {k: v[pick] for k, v in inputs.items()}
        wanted = outputs if size == batch else {k: v[pick] for k, v in outputs.items()}
        actual = runner.run(given)
        rows += [_compare(n, size, None, actual.get(n), w, atol, rtol) for n, w in wanted.items()]
    return rows


def _check_npz_names(
    path: Path,
    artifact: ExportedArtifact,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
) -> None:
    """Refuse a reference whose arrays are not named after the artifact's tensors (every
    input, and outputs it has), naming them: an existing file's tensors are named by its
    graph or, for TorchScript, ``output0__0`` ..., not after the model it came from."""
    wanted = {
        "input": (tuple(inputs), artifact.signature.input_names),
        "output": (tuple(outputs), artifact.signature.output_names),
    }
    for kind, (given, names) in wanted.items():
        problems: list[str] = []
        if unknown := [repr(n) for n in given if n not in names]:
            problems.append(f"names {kind}s {', '.join(unknown)} that the artifact does not have")
        if kind == "input" and (missing := [repr(n) for n in names if n not in given]):
            problems.append(f"lacks its inputs {', '.join(missing)}")
        if problems:
            raise UserInputError(
                f"reference {path} {' and '.join(problems)} (its {kind}s: {', '.join(names)}): "
                f"name the arrays {kind}:NAME after the artifact's tensors"
            )


class ArtifactRunner:
    """Loads an exported TorchScript or ONNX file once and runs it on named inputs."""

    def __init__(self, artifact: ExportedArtifact) -> None:
        self.artifact = artifact
        self._output_names = artifact.signature.output_names
        if artifact.format == "torchscript":
            self._module = load_torchscript(artifact.path)
        elif artifact.format == "onnx":
            self._session = onnx_session(artifact.path)
        else:
            raise ExportError(f"cannot run a {artifact.format} artifact here")

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Outputs keyed by the artifact's names."""
        if self.artifact.format == "torchscript":
            torch = import_torch("running TorchScript")
            tensors = {k: _to_torch(torch, v) for k, v in inputs.items()}
            ordered = {n: tensors[n] for n in self.artifact.signature.input_names}
            out = run_torchscript_module(self._module, ordered, self._output_names)
            return {k: to_numpy(v) for k, v in out.items()}
        return run_session(self._session, inputs)


def _to_torch(torch: Any, value: Any) -> Any:
    return torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value


__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_SEQ_LENS",
    "TOLERANCES",
    "ArtifactRunner",
    "VerifyReport",
    "VerifyRow",
    "default_tolerances",
    "verify",
]
