"""Validate a model repository, a model folder or a ``model.tar.gz`` before deployment.

:func:`validate_path` finds what the path is and collects every problem it can see
without running a server: layout, version folders, config.pbtxt against Triton's schema,
the file the platform needs, inputs and outputs against the artifact (ONNX: names,
count, data types, ranks and dims from the graph; TorchScript: the number and names of
``forward`` arguments - ranks and dtypes are not recorded statically in TorchScript),
the batch dimension against ``max_batch_size`` (see :mod:`mmelocal.builder.compare`), warmup
and batching settings against ``max_batch_size`` (:mod:`mmelocal.builder.warmup_checks`), an
ensemble against the step folders beside it and their configs
(:mod:`mmelocal.builder.ensemble_checks`), and for tarballs the MME layout
plus the safety checks of :func:`~mmelocal.builder.tarball.safe_extract`. Tarballs go through
:func:`~mmelocal.builder.mme_layout.read_layout` (SageMaker's layout rules); a folder of
tarballs (a store) is also checked for ensemble steps that two tarballs share, when the
endpoint runs Triton without model namespacing (SageMaker's entrypoint turns it on unless
``SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING=false``; with it, each tarball's steps are
its own).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.builder import repository, tarball
from mmelocal.builder.backends import execution_env_problem, host_limit
from mmelocal.builder.compare import check_artifact
from mmelocal.builder.ensemble import ENSEMBLE_PLATFORM
from mmelocal.builder.ensemble_checks import check_ensemble
from mmelocal.builder.findings import SEVERITIES, Problem
from mmelocal.builder.mme_layout import MmeLayout, read_layout, step_collisions
from mmelocal.builder.model_config import read_config
from mmelocal.builder.warmup_checks import WARMUP_FOLDER, check_batching, check_warmup_files
from mmelocal.errors import ConfigError, UnsafeArchiveError

_GUESSED_FILES = [*repository.PLATFORM_FILES.values(), "model.py"]


@dataclass
class ValidationReport:
    """All findings for one path; ``ok`` when there is no error (warnings allowed)."""

    path: str
    kind: str = "unknown"
    models: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: the problems found in each model folder, keyed by the folder's resolved path (inside
    #: a tarball: where it was extracted, see ``extract_to`` of :func:`validate_path`)
    by_folder: dict[Path, list[Problem]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """True when no problem has severity ``error``."""
        return not self.errors

    @property
    def errors(self) -> list[Problem]:
        """The problems with severity ``error``."""
        return [p for p in self.problems if p.severity == "error"]

    def add(self, code: str, path: Path | str, message: str, severity: str = "error") -> None:
        """Record a problem."""
        self.problems.append(Problem(code, str(path), message, severity))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: path, kind, ok, models, problems."""
        return {
            "path": self.path,
            "kind": self.kind,
            "ok": self.ok,
            "models": list(self.models),
            "problems": [asdict(p) for p in self.problems],
        }

    def to_json(self) -> str:
        """The report as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)


def validate_path(
    path: Path | str,
    *,
    max_members: int = tarball.DEFAULT_MAX_MEMBERS,
    max_unpacked_bytes: int = tarball.DEFAULT_MAX_UNPACKED_BYTES,
    extract_to: Path | None = None,
    model_namespacing: bool = True,
) -> ValidationReport:
    """Validate a repository, model folder, model.tar.gz or a store (a folder of tarballs);
    never raises for bad content.

    ``extract_to``: a ``model.tar.gz`` is extracted into this folder and left there (for a
    caller that goes on with the same files, such as ``check``), instead of a temporary one.

    ``model_namespacing`` is whether the endpoint's Triton runs with it (SageMaker's
    default); without it, a store's tarballs whose ensembles share a step name collide
    and each shared name is a warning.
    """
    p = Path(path)
    report = ValidationReport(path=str(p))
    try:
        _validate_any(p, report, max_members, max_unpacked_bytes, extract_to, model_namespacing)
    except OSError as exc:
        report.add("path.unreadable", exc.filename or p, exc.strerror or str(exc))
    return report


def _validate_any(
    p: Path,
    report: ValidationReport,
    max_members: int,
    max_bytes: int,
    extract_to: Path | None,
    namespacing: bool = True,
) -> None:
    if not p.exists():
        report.add("path.missing", p, "path does not exist")
    elif p.is_file():
        if p.name == "config.pbtxt":
            report.kind = "model"
            _validate_model(p.parent, report, display=p.parent)
        elif tarball.is_gzip(p) or p.name.endswith(tarball.TARBALL_SUFFIXES):
            report.kind = "tarball"
            _validate_tarball(p, report, max_members, max_bytes, extract_to=extract_to)
        else:
            report.add("path.type", p, "not a folder or a .tar.gz file")
    elif not p.is_dir():
        report.add("path.type", p, "not a folder or a .tar.gz file")
    elif _looks_like_model(p):
        report.kind = "model"
        _validate_model(p, report, display=p)
    elif _looks_like_store(p):
        report.kind = "store"
        _validate_store(p, report, max_members, max_bytes, namespacing)
    else:
        report.kind = "repository"
        _validate_repository(p, report)


def _looks_like_model(p: Path) -> bool:
    if (p / "config.pbtxt").exists():
        return True
    subdirs = [c for c in p.iterdir() if c.is_dir() and not c.name.startswith(".")]
    return bool(subdirs) and all(c.name.isdigit() for c in subdirs)


def _looks_like_store(p: Path) -> bool:
    """A folder of tarballs (an MME's S3 prefix, mirrored) and no model folder."""
    has_models = any(c.is_dir() and (c / "config.pbtxt").is_file() for c in p.iterdir())
    return not has_models and any(p.rglob("*.tar.gz"))


def _validate_store(
    store: Path, report: ValidationReport, max_members: int, max_bytes: int, namespacing: bool
) -> None:
    layouts: dict[str, MmeLayout] = {}
    for tar_path in sorted(store.rglob("*.tar.gz")):
        target = tar_path.relative_to(store).as_posix()
        layout = _validate_tarball(tar_path, report, max_members, max_bytes, label=target)
        if layout is not None:
            layouts[target] = layout
    if namespacing:
        return  # each tarball's steps are its own (SageMaker's default)
    for name, targets in step_collisions(layouts).items():
        report.add(
            "store.step_collision",
            store,
            f"ensemble step {name!r} is in {targets}: without model namespacing "
            "(SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING=false) step names are global in one "
            "Triton, so on an instance that has loaded one of them the others fail to load; "
            "rename the steps or leave namespacing on",
            "warning",
        )


def _validate_repository(repo: Path, report: ValidationReport) -> None:
    entries = [c for c in sorted(repo.iterdir()) if not c.name.startswith(".")]
    folders = [c for c in entries if c.is_dir()]
    for stray in (c for c in entries if not c.is_dir()):
        report.add("repo.stray_file", stray, "file at the repository top level", "warning")
    if not folders:
        report.add("repo.empty", repo, "no model folders (expected <repo>/<model>/config.pbtxt)")
        return
    for folder in folders:
        _validate_model(folder, report, display=folder)


def _validate_tarball(
    tar_path: Path,
    report: ValidationReport,
    max_members: int,
    max_bytes: int,
    *,
    label: str | None = None,
    extract_to: Path | None = None,
) -> MmeLayout | None:
    """Extract, apply the MME layout rules, validate every folder a load touches; the
    layout with the extracted paths (gone on return unless extracted into ``extract_to``),
    None when it did not extract."""
    tmp = Path(tempfile.mkdtemp(prefix="mmelocal-validate-"))
    name = label or tar_path.name
    try:
        out = extract_to if extract_to is not None else tmp / "x"
        try:
            tarball.safe_extract(
                tar_path, out, max_members=max_members, max_unpacked_bytes=max_bytes
            )
        except tarball.BadArchiveError as exc:
            report.add("archive.corrupt", name, _strip_prefix(str(exc), tar_path))
            return None
        except UnsafeArchiveError as exc:
            report.add("archive.unsafe", name, _strip_prefix(str(exc), tar_path))
            return None
        layout = read_layout(out)

        def shown(path: Path | str) -> str:
            rel = Path(path).relative_to(out).as_posix()
            return name if rel == "." else f"{name}:{rel}"

        for finding in layout.findings:
            if finding.code == "config.invalid" and Path(finding.path) in layout.folders:
                continue  # the folder's own check says it, with the line
            report.add(finding.code, shown(finding.path), finding.message, finding.severity)
        for folder in layout.folders:
            served = folder == layout.served_dir
            _validate_model(folder, report, display=shown(folder), served=served, in_tarball=True)
        return layout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _strip_prefix(message: str, tar_path: Path) -> str:
    return message.removeprefix(f"{tar_path}: ").removeprefix(f"{tar_path} ")


def _validate_model(
    model_dir: Path,
    report: ValidationReport,
    *,
    display: Path | str,
    served: bool = False,
    in_tarball: bool = False,
) -> None:
    """Check one model folder; ``served``: the folder an MME serves as the TargetModel;
    ``in_tarball``: extracted from a tarball (whose layout check reports missing steps).
    What it finds is also kept under the folder in ``report.by_folder``."""
    first = len(report.problems)
    try:
        _check_model_folder(
            model_dir, report, display=display, served=served, in_tarball=in_tarball
        )
    finally:
        report.by_folder[model_dir.resolve()] = report.problems[first:]


def _check_model_folder(
    model_dir: Path,
    report: ValidationReport,
    *,
    display: Path | str,
    served: bool,
    in_tarball: bool,
) -> None:
    where = str(display)
    report.models.append(model_dir.name)
    config_path = model_dir / "config.pbtxt"
    if not config_path.is_file():
        report.add("config.missing", where, "no config.pbtxt in the model folder")
        return
    try:
        cfg = read_config(config_path)
    except ConfigError as exc:
        msg = str(exc).removeprefix(f"{config_path}:").removeprefix(f"{exc.line}:").strip()
        if exc.line is not None:
            msg = f"line {exc.line}: {msg}"
        report.add("config.invalid", f"{where}/config.pbtxt", msg)
        return
    _check_name(cfg, model_dir, report, where, served=served)
    _check_host(cfg, model_dir, report, where)
    check_warmup_files(cfg, model_dir, report, where)
    check_batching(cfg, report, where, model_name=model_dir.name)
    versions = _loaded_versions(cfg, _versions(model_dir, report, where), report, where)
    if cfg.platform == ENSEMBLE_PLATFORM or cfg.HasField("ensemble_scheduling"):
        check_ensemble(cfg, model_dir, report, where, in_tarball=in_tarball)
    if cfg.platform == ENSEMBLE_PLATFORM:
        return  # an ensemble's version folder is empty: its steps hold the artifacts
    filename = repository.artifact_filename(cfg)
    if not cfg.platform and not cfg.backend:
        report.add(
            "config.no_platform",
            where,
            "neither platform nor backend set; Triton guesses from the file name",
            "warning",
        )
    for version in versions:
        vdir = model_dir / str(version)
        names = [filename] if filename else _GUESSED_FILES
        artifact = next((vdir / n for n in names if (vdir / n).exists()), None)
        if artifact is None:
            present = sorted(c.name for c in vdir.iterdir())
            report.add(
                "artifact.missing",
                f"{where}/{version}",
                f"{filename or 'model file'} not found (present: {present})",
            )
            continue
        for finding in check_artifact(cfg, artifact):
            report.add(
                finding.code,
                f"{where}/{version}/{artifact.name}",
                finding.message,
                finding.severity,
            )


def _check_name(
    cfg: Any, model_dir: Path, report: ValidationReport, where: str, *, served: bool
) -> None:
    if served and not cfg.name:
        report.add("config.no_name", where, "config has no name: served as the TargetModel", "info")
    elif served and cfg.name != model_dir.name:
        report.add(
            "config.name_ignored",
            where,
            f"config name {cfg.name!r} is ignored: an MME serves this model as the TargetModel",
            "info",
        )
    elif not cfg.name:
        report.add(
            "config.no_name", where, "config has no name; Triton uses the folder name", "warning"
        )
    elif cfg.name != model_dir.name:
        report.add(
            "config.name_mismatch",
            where,
            f"config name {cfg.name!r} differs from its folder {model_dir.name!r}",
        )


def _check_host(cfg: Any, model_dir: Path, report: ValidationReport, where: str) -> None:
    """What a CPU-only host cannot run (a warning: the cloud can), and a Python model's
    execution environment (an error: no host can run it)."""
    limit = host_limit(cfg, gpu=False)
    if limit is not None:
        message = f"SageMaker runs it; a CPU-only host cannot: {limit}"
        report.add("host.unsupported", where, message, "warning")
    env_problem = execution_env_problem(cfg, model_dir, stub_python=None)
    if env_problem is not None:
        report.add("python.execution_env", where, env_problem)


def _versions(model_dir: Path, report: ValidationReport, where: str) -> list[int]:
    versions = []
    for child in sorted(model_dir.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or child.name == WARMUP_FOLDER:
            continue
        if child.name.isdigit() and not child.name.startswith("0"):
            versions.append(int(child.name))
        else:
            report.add(
                "layout.ignored_folder",
                f"{where}/{child.name}",
                "not a version folder (versions are numbers >= 1); Triton ignores it",
                "warning",
            )
    if not versions:
        report.add(
            "layout.no_version", where, "no version folder (expected e.g. <model>/1/<model file>)"
        )
    return sorted(versions)


def _loaded_versions(
    cfg: Any, versions: list[int], report: ValidationReport, where: str
) -> list[int]:
    """The version folders Triton loads under the config's ``version_policy`` (default: the
    latest one); a policy that picks none fails the load."""
    policy = cfg.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        loaded = list(versions)
    elif choice == "specific":
        loaded = [v for v in versions if v in set(policy.specific.versions)]
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        loaded = versions[len(versions) - count :] if count > 0 else []
    if versions and not loaded:
        report.add(
            "layout.no_version",
            where,
            f"version_policy picks none of the version folders {versions}; Triton fails the "
            "load ('at least one version must be available under the version policy')",
        )
    unloaded = [v for v in versions if v not in loaded]
    if loaded and unloaded:
        report.add(
            "layout.unloaded_version",
            where,
            f"version folders {unloaded} are not loaded under the version_policy "
            f"(loaded: {loaded}); they are not checked",
            "info",
        )
    return loaded


__all__ = ["SEVERITIES", "Problem", "ValidationReport", "validate_path"]
