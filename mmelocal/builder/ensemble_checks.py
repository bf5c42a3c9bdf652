"""``validate``'s check of an ensemble against the step folders beside it: Triton's ensemble
rules (:mod:`mmelocal.builder.ensemble`) over the steps' configs, and the steps with no
folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmelocal.builder.ensemble import schedule_problems, step_problems
from mmelocal.builder.findings import Recorder
from mmelocal.builder.model_config import read_config
from mmelocal.errors import ConfigError


def check_ensemble(
    cfg: Any, model_dir: Path, report: Recorder, where: str, *, in_tarball: bool
) -> None:
    """Triton's ensemble checks (:mod:`mmelocal.builder.ensemble`), against the step folders
    beside the ensemble (where Triton loads them from). A step with no folder there fails
    the load first (in a tarball the layout check reports it); a step folder whose config
    does not read is reported on its own."""
    repo = model_dir.parent
    problems = schedule_problems(cfg)
    missing = sorted(
        {s.model_name for s in cfg.ensemble_scheduling.step if not (repo / s.model_name).is_dir()}
    )
    if not problems and missing:
        if not in_tarball:  # Triton's words: ConnectDependencyGraph, model_repository_manager.cc
            report.add(
                "ensemble.invalid",
                where,
                f"ensemble {model_dir.name} contains models that are not available or "
                f"ambiguous: {', '.join(missing)}; Triton fails the ensemble's load",
            )
        return
    if not problems:
        steps = {}
        for step in cfg.ensemble_scheduling.step:
            path = repo / step.model_name / "config.pbtxt"
            if step.model_name and path.is_file():
                try:
                    steps[step.model_name] = read_config(path)
                except ConfigError:
                    continue
        problems = step_problems(cfg, steps)
    for problem in problems:
        report.add("ensemble.invalid", where, f"{problem}; Triton fails the ensemble's load")


__all__ = ["check_ensemble"]
