"""One self-contained HTML page (PNG plots inlined as data URIs) plus CSV and JSON files.

:func:`write_report` takes any mix of results (load tests, capacity runs, projections,
sweeps, estimates) and writes into ``out_dir``:

- ``index.html``: every plot as an inline PNG (also saved as ``*.png`` beside it) and the
  numbers as tables; the page needs no network and no other file;
- one CSV per result (its steps, loads or rows);
- ``results.json``: the list of every result's data (each with its ``kind``);
- ``.mmelocal-report.json``: the names of those files. A report written again into the
  same folder removes the earlier report's files it does not write again, and only
  those (:mod:`mmelocal.bench.report.manifest`).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mmelocal.bench.report import plots
from mmelocal.bench.report.manifest import earlier_files, replace_manifest
from mmelocal.bench.results import output_dir, write_text
from mmelocal.errors import BenchError
from mmelocal.units import mib_value

logger = logging.getLogger(__name__)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1300px; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: right; }
th { background: #f0f0f0; vertical-align: bottom; } td.l, th.l { text-align: left; }
td.l { white-space: nowrap; } .wide { overflow-x: auto; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { color: #666; font-size: 0.9em; } h2 { border-bottom: 1px solid #ddd; }
"""


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`write_report` wrote."""

    html: Path
    json: Path
    csv: tuple[Path, ...]
    png: tuple[Path, ...]


class _Page:
    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.parts: list[str] = []
        self.csv: list[Path] = []
        self.png: list[Path] = []

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def para(self, text: str, *, note: bool = False) -> None:
        cls = ' class="note"' if note else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")

    def image(self, stem: str, make: Callable[[], bytes], alt: str) -> None:
        data = make()
        path = self.out_dir / f"{stem}.png"
        path.write_bytes(data)
        self.png.append(path)
        encoded = base64.b64encode(data).decode("ascii")
        self.parts.append(
            f'<img src="data:image/png;base64,{encoded}" alt="{html.escape(alt)}" '
            f'data-file="{html.escape(path.name)}">'
        )

    def table(
        self, stem: str, rows: Sequence[dict[str, Any]], *, html_hides: Sequence[str] = ()
    ) -> None:
        """Write ``rows`` as ``<stem>.csv`` (every column) and as an HTML table (every column
        but ``html_hides``)."""
        if not rows:
            self.para("(no rows)", note=True)
            return
        path = self.out_dir / f"{stem}.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        self.csv.append(path)
        columns = [c for c in rows[0] if c not in html_hides]
        head = "".join(
            f'<th class="l">{html.escape(_header(c))}</th>'
            if i == 0
            else f"<th>{html.escape(_header(c))}</th>"
            for i, c in enumerate(columns)
        )
        body = []
        for row in rows:
            cells = "".join(
                f'<td class="l">{_cell(row[c])}</td>' if i == 0 else f"<td>{_cell(row[c])}</td>"
                for i, c in enumerate(columns)
            )
            body.append(f"<tr>{cells}</tr>")
        self.parts.append(f'<div class="wide"><table><tr>{head}</tr>{"".join(body)}</table></div>')


#: Column-name suffixes (the CSV field names) shown as units in the page's table headers.
_UNIT_SUFFIXES = (("_ms", "ms"), ("_rps", "req/s"), ("_mib", "MiB"), ("_s", "s"))


def _header(column: str) -> str:
    """``p99_latency_ms`` -> ``p99 latency (ms)``: the CSV name, readable, unit in brackets."""
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix):
            return f"{column[: -len(suffix)].replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:,.2f}"
    return html.escape(str(value))


def _add_loadtest(page: _Page, result: Any, stem: str) -> None:
    from mmelocal.bench.loadtest.result import summary_lines

    page.heading(f"Load test: {result.label or result.endpoint}")
    started = f", started {result.started_at}" if result.started_at else ""
    page.para(
        f"{result.endpoint} ({result.mode}), {result.target_count} targets{started}, "
        f"{result.wall_s:.0f} s, {len(result.shape.stages)} steps up to "
        f"{result.shape.max_users} users"
    )
    warnings = {s.message() for s in result.saturated}
    for line in summary_lines(result):
        page.para(line, note=line in warnings)  # saturated: latency includes client queueing
    page.image(
        f"{stem}-latency-throughput",
        lambda: plots.loadtest_latency_throughput(result),
        "latency and throughput against users",
    )
    page.image(
        f"{stem}-requests",
        lambda: plots.loadtest_success_failure(result),
        "successful and failed requests per step",
    )
    page.table(f"{stem}-steps", [step.to_dict() for step in result.steps])
    if result.workers > 1 or result.lost_workers:
        page.table(
            f"{stem}-workers",
            [
                {
                    "worker": w.name,
                    "host": w.host,
                    "status": w.status,
                    "requests": w.requests,
                    "cpu_percent_of_a_core": w.cpu_percent,
                    "missed_stages": ", ".join(w.missed_stages),
                }
                for w in result.worker_details
            ],
        )
    if result.errors:
        page.table(f"{stem}-errors", [{"error": k, "count": v} for k, v in result.errors.items()])


def _add_projection(page: _Page, projection: Any, stem: str, *, standalone: bool) -> None:
    if standalone:
        page.heading("Projection to other GPUs")
    baseline_mib = mib_value(projection.baseline_bytes)
    per_model_mib = mib_value(projection.per_model_bytes)
    page.para(
        f"count = floor(({projection.threshold:g} × total − baseline {baseline_mib} MiB)"
        f" / per model {per_model_mib} MiB)"
    )
    page.table(
        stem,
        [
            {
                "gpu": row.gpu,
                "memory_mib": mib_value(row.memory_bytes),
                "instance_type": row.instance_type,
                "gpus_per_instance": row.gpus_per_instance,
                "models_per_gpu": row.models_per_gpu,
                "models_per_instance": row.models_per_instance,
            }
            for row in projection.rows
        ],
    )


def _add_capacity(page: _Page, result: Any, stem: str) -> None:
    page.heading(f"Capacity: {result.label or result.source}")
    for line in result.summary_lines():
        page.para(line)
    page.image(f"{stem}-memory", lambda: plots.capacity_memory(result), "memory against models")
    page.table(f"{stem}-loads", result.load_rows())
    if result.projection is not None:
        _add_projection(page, result.projection, f"{stem}-projection", standalone=False)


def _add_sweep(page: _Page, result: Any, stem: str) -> None:
    page.heading(f"Configuration sweep: {result.source}")
    page.para(
        f"Target {result.target_rps:g} requests/s with p99 latency <= {result.max_latency_ms:g} ms"
        f" on {result.instance_type}; each configuration's rate is the best load-test step with"
        f" no failure within that limit. Measured on {result.machine or 'this machine'}"
        + (f" ({result.started_at})." if result.started_at else ".")
    )
    label = "Recommendation (CPU run, no GPU sizing)" if result.relative_only else "Recommendation"
    page.para(f"{label}: {result.recommendation}")
    page.para(result.price_note, note=True)
    page.image(f"{stem}-comparison", lambda: plots.sweep_comparison(result), "sweep comparison")
    if any(row.loadtest is not None for row in result.rows):
        page.image(
            f"{stem}-curves",
            lambda: plots.sweep_throughput_curves(result),
            "throughput against users per configuration",
        )
    page.table(f"{stem}-rows", result.table_rows(), html_hides=("reason",))
    for note in result.notes():
        page.para(note, note=True)


def _add_estimate(page: _Page, result: Any, stem: str, measurements: Sequence[Any]) -> None:
    """The estimate's parts and counts; a GPU capacity result of the same source in the
    same report is shown beside it, and wins."""
    if result.measured is None:
        from mmelocal.bench.estimate.model import measured_from_capacity

        same = [m for m in measurements if m.source == result.source and m.loads]
        # its format and precision first
        same.sort(
            key=lambda m: (
                m.model_format != result.model_format,
                getattr(m, "precision", "") != result.precision,
            )
        )
        if same:
            result = result.with_measurement(measured_from_capacity(same[0]))
    page.heading(f"Capacity estimate: {result.source}")
    b = result.batches
    page.para(
        f"{result.model_format}, {result.precision}, {result.params:,} parameters, "
        f"{b.instances} instance(s); batches assumed: {b.describe()}. "
        "Estimated from the model (no GPU); each part is a range with its source."
    )
    page.table(
        f"{stem}-parts",
        [
            {
                "part": p.name,
                "scope": p.scope,
                "low_mib": mib_value(p.low_bytes),
                "point_mib": mib_value(p.point_bytes),
                "high_mib": mib_value(p.high_bytes),
                "source": p.source,
            }
            for p in result.parts
        ],
    )
    m = result.measured
    if m is not None:
        _, point, _ = result.per_copy
        page.para(
            f"Measured ({m.origin}, {m.probe}): {mib_value(m.per_copy_bytes)} MiB per copy against "
            f"an estimated {mib_value(point)} MiB"
            + (
                "; the measurement wins."
                if m.applies_to(result.model_format, result.precision)
                else f"; {m.why_not(result.model_format, result.precision)}, so the estimate "
                "stands."
            )
        )
    page.table(
        f"{stem}-cards",
        [
            {
                "gpu": c.gpu,
                "instance_types": ", ".join(c.instance_types),
                "checked": "projected" if c.projected else "published runs",
                "copies_low": c.low,
                "copies_point": c.point,
                "copies_high": c.high,
                "copies_measured": c.measured,
            }
            for c in result.cards
        ],
    )
    for note in result.notes:
        page.para(note, note=True)


def _add_comparison(page: _Page, results: Sequence[Any]) -> None:
    from mmelocal.bench.endpoint.result import comparison_rows, step_rows

    page.heading("Comparison per model and framework")
    page.para(
        "Per instance type: the models loaded within the memory threshold, and among the "
        "load-test steps without a failed request the lowest mean latency, the highest "
        "throughput and the most concurrent users; 'trt vs pt (%)' is TensorRT's "
        "difference from PyTorch."
    )
    cpu = [r for r in results if r.on_cpu]
    if cpu:
        page.para(
            "Where these figures were taken: "
            + "; ".join(dict.fromkeys(r.figures_from for r in cpu))
            + ". Models loaded are host-memory counts and latency and throughput CPU figures: "
            "none of them is a GPU figure, and no GPU projection is made from them.",
            note=True,
        )
    page.table("benchmark-comparison", comparison_rows(results))
    page.para("Every load-test step of those runs (the published summary_results.csv):")
    page.table("benchmark-steps", step_rows(results))


def _add_benchmark(page: _Page, result: Any, stem: str) -> None:
    _add_capacity(page, result.capacity, f"{stem}-capacity")
    if result.loadtest is not None and result.on_cpu:
        page.para(
            f"Load test below: latency and throughput are CPU figures ({result.figures_from}),"
            " not GPU figures.",
            note=True,
        )
    if result.loadtest is not None:
        _add_loadtest(page, result.loadtest, f"{stem}-loadtest")


def write_report(results: Sequence[Any], out_dir: Path | str, *, title: str = "") -> ReportFiles:
    """Write the HTML page, PNGs, CSVs and ``results.json`` for ``results`` into ``out_dir``."""
    if not results:
        raise BenchError("nothing to report: give at least one result")
    out = output_dir(out_dir)
    earlier = earlier_files(out)
    page = _Page(out)
    benchmarks = [r for r in results if getattr(r, "kind", None) == "benchmark"]
    if benchmarks:
        _add_comparison(page, benchmarks)
    counts: dict[str, int] = {}
    for result in results:
        kind = getattr(result, "kind", None)
        counts[str(kind)] = counts.get(str(kind), 0) + 1
        stem = f"{kind}-{counts[str(kind)]}"
        if kind == "loadtest":
            _add_loadtest(page, result, stem)
        elif kind == "capacity":
            _add_capacity(page, result, stem)
        elif kind == "projection":
            _add_projection(page, result, stem, standalone=True)
        elif kind == "sweep":
            _add_sweep(page, result, stem)
        elif kind == "estimate":
            runs = [r for r in results if getattr(r, "kind", "") == "capacity"]
            _add_estimate(page, result, stem, runs)
        elif kind == "benchmark":
            _add_benchmark(page, result, stem)
        else:
            raise BenchError(f"cannot report a result of kind {kind!r}")
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    heading = title or "mmelocal report"
    document = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(heading)}</title><style>{_STYLE}</style></head><body>"
        f'<h1>{html.escape(heading)}</h1><p class="note">generated {generated}</p>'
        + "\n".join(page.parts)
        + "</body></html>\n"
    )
    html_path = write_text(out / "index.html", document)
    json_path = write_text(
        out / "results.json",
        json.dumps([r.to_dict() for r in results], indent=2, default=str) + "\n",
    )
    replace_manifest(out, [html_path, json_path, *page.csv, *page.png], earlier)
    logger.info("report written to %s (%d plots, %d CSV)", html_path, len(page.png), len(page.csv))
    return ReportFiles(html=html_path, json=json_path, csv=tuple(page.csv), png=tuple(page.png))


__all__ = ["ReportFiles", "write_report"]
