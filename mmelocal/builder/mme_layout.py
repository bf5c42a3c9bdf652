"""SageMaker's MME layout rules: extracted ``model.tar.gz`` -> what Triton serves.

The one place mmelocal decides, as Triton's SageMaker front end does
(``SageMakerMMELoadModel`` in ``src/sagemaker_server.cc``), which folder of an extracted
tarball (the ``url`` of ``POST /models``) is served, under which name, with which other
folders loaded beside it. The artifact cache, ``validate``, ``check`` and ``package`` all
call :func:`read_layout`; no other module repeats these rules.

1. ``config.pbtxt`` at the folder's root: the root is the model folder (rule ``root``).
2. Otherwise every sub-folder counts (as ``readdir`` lists them: hidden ones and
   ``__MACOSX`` too; files are ignored). A folder whose config.pbtxt matches
   ``platform:\\s*"ensemble"`` (Triton's own regular expression, on the raw text) is served
   and the folders it names in its steps load under their own names (rule ``ensemble``).
   One folder and no ensemble: that folder (rule ``folder``). Several folders and no
   ensemble, or several ensembles: Triton serves whichever ``readdir`` returns last, which
   differs between file systems, so it is an error naming the folders (rule ``ambiguous``).
   No folder at all: nothing to load (rule ``empty``).
3. The served model is registered under the TargetModel, whatever its folder or its
   config's ``name`` says (a config may omit ``name``). Steps keep their folder names;
   each tarball is registered as its own repository and SageMaker's entrypoint turns
   model namespacing on, so two tarballs with a same-named step do not collide; without
   namespacing (``SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING=false``) they do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mmelocal.builder.findings import Problem
from mmelocal.errors import ValidationError

#: Triton's ``platform_ensemble_regex_``: matched anywhere in the raw config text
ENSEMBLE_PATTERN = re.compile(r'platform:(\s)*"ensemble"')
#: the folder name SageMaker's Triton gives a root-layout model (``model_subdir = "model"``)
ROOT_FOLDER_NAME = "model"
RULES = ("root", "folder", "ensemble", "ambiguous", "empty")
_MACOS_LITTER = ("__MACOSX", ".DS_Store")


@dataclass(frozen=True, kw_only=True)
class MmeLayout:
    """What SageMaker's Triton does with one extracted tarball (module docstring)."""

    url: Path
    rule: str
    served_dir: Path | None
    steps: tuple[Path, ...] = ()
    findings: tuple[Problem, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")

    @property
    def ok(self) -> bool:
        """True when Triton has one well-defined folder to serve."""
        return self.served_dir is not None and not self.errors

    @property
    def errors(self) -> list[Problem]:
        """Findings with severity ``error``."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def folders(self) -> tuple[Path, ...]:
        """Every model folder one load touches: the served one, then its steps."""
        return ((self.served_dir,) if self.served_dir is not None else ()) + self.steps

    @property
    def step_names(self) -> tuple[str, ...]:
        """Names the steps are loaded under (their folder names; each tarball's own under
        model namespacing)."""
        return tuple(step.name for step in self.steps)

    def served_folder_name(self) -> str:
        """The folder name the served model has in a repository Triton reads."""
        if self.served_dir is None:
            raise ValidationError(f"{self.url}: no folder to serve")
        return ROOT_FOLDER_NAME if self.rule == "root" else self.served_dir.name

    @property
    def named_folders(self) -> tuple[tuple[Path, str], ...]:
        """``(folder, name)`` for every folder a load touches, named as Triton reads them
        in a repository (the served one: ``model`` for the root layout)."""
        if self.served_dir is None:
            return ()
        names = (self.served_folder_name(), *self.step_names)
        return tuple(zip(self.folders, names, strict=True))

    def raise_for_errors(self, what: str, *, except_codes: Iterable[str] = ()) -> None:
        """Raise :class:`ValidationError` naming ``what`` and every error finding (but those
        with a code in ``except_codes``)."""
        skip = set(except_codes)
        errors = [f for f in self.errors if f.code not in skip]
        if self.served_dir is not None and not errors:
            return
        reasons = "; ".join(f.message for f in errors) or "no folder to serve"
        raise ValidationError(f"{what}: {reasons}")


def read_layout(url: Path | str) -> MmeLayout:
    """Apply the platform's rules (module docstring) to the extracted folder ``url``."""
    root = Path(url)
    findings: list[Problem] = []
    if (root / "config.pbtxt").is_file():
        findings.append(
            Problem(
                code="layout.root",
                path=str(root),
                message="config.pbtxt at the archive's root: the root is the model folder",
                severity="info",
            )
        )
        return MmeLayout(url=root, rule="root", served_dir=root, findings=tuple(findings))
    with os.scandir(root) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    folders = [root / e.name for e in entries if e.is_dir(follow_symlinks=False)]
    ignored = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
    if ignored:
        findings.append(
            Problem(
                code="layout.ignored_file",
                path=str(root),
                message=f"files at the top level are ignored by Triton: {ignored}",
                severity="warning",
            )
        )
    if not folders:
        findings.append(
            Problem(
                code="layout.empty",
                path=str(root),
                message="no config.pbtxt at the root and no model folder: nothing to load; "
                "create it with `tar -C repo -czf model.tar.gz <model_name>`",
            )
        )
        return MmeLayout(url=root, rule="empty", served_dir=None, findings=tuple(findings))
    ensembles = [f for f in folders if is_ensemble(f)]
    if len(ensembles) == 1:
        steps = _ensemble_steps(ensembles[0], folders, findings)
        findings.append(
            Problem(
                code="layout.ensemble",
                path=str(ensembles[0]),
                message=f"ensemble {ensembles[0].name!r} is served; its steps load under their "
                f"own names {[s.name for s in steps]} (the tarball's own under model "
                "namespacing, SageMaker's default)",
                severity="info",
            )
        )
        return MmeLayout(
            url=root,
            rule="ensemble",
            served_dir=ensembles[0],
            steps=steps,
            findings=tuple(findings),
        )
    if len(folders) == 1:
        return MmeLayout(url=root, rule="folder", served_dir=folders[0], findings=tuple(findings))
    findings.append(_ambiguous(root, folders, ensembles))
    return MmeLayout(url=root, rule="ambiguous", served_dir=None, findings=tuple(findings))


def is_ensemble(folder: Path) -> bool:
    """True when ``folder/config.pbtxt`` matches Triton's ensemble regular expression."""
    try:
        text = (folder / "config.pbtxt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return ENSEMBLE_PATTERN.search(text) is not None


def ensemble_step_names(folder: Path) -> list[str]:
    """The ``model_name`` of every step in an ensemble's config (in order, unique)."""
    from mmelocal.builder.model_config import read_config

    config = read_config(folder / "config.pbtxt")
    names: list[str] = []
    for step in config.ensemble_scheduling.step:
        if step.model_name not in names:
            names.append(str(step.model_name))
    return names


def _ensemble_steps(
    ensemble: Path, folders: list[Path], findings: list[Problem]
) -> tuple[Path, ...]:
    from mmelocal.errors import ConfigError

    try:
        names = ensemble_step_names(ensemble)
    except ConfigError as exc:
        where = f"{exc.path}:{exc.line}:" if exc.line is not None else f"{exc.path}:"
        said = str(exc).removeprefix(where).strip()
        line = f" line {exc.line}" if exc.line is not None else ""
        message = f"config.pbtxt{line}: {said}"
        findings.append(Problem(code="config.invalid", path=str(ensemble), message=message))
        return ()
    by_name = {f.name: f for f in folders}
    steps = tuple(by_name[n] for n in names if n in by_name)
    missing = [n for n in names if n not in by_name]
    if missing:
        findings.append(
            Problem(
                code="layout.missing_step",
                path=str(ensemble),
                message=f"ensemble {ensemble.name!r} names steps with no folder in the "
                f"tarball: {missing} (steps load from the same archive, by folder name)",
            )
        )
    unused = [f.name for f in folders if f != ensemble and f.name not in names]
    if unused:
        findings.append(
            Problem(
                code="layout.unused_folder",
                path=str(ensemble.parent),
                message=f"folders that are not steps of ensemble {ensemble.name!r} are never "
                f"loaded: {unused}",
                severity="warning",
            )
        )
    return steps


def _ambiguous(root: Path, folders: list[Path], ensembles: list[Path]) -> Problem:
    names = [f.name for f in folders]
    litter = [n for n in names if n in _MACOS_LITTER or n.startswith(".")]
    if ensembles:
        what = f"{len(ensembles)} ensembles ({[e.name for e in ensembles]})"
    else:
        what = f"{len(folders)} folders and no ensemble"
    hint = (
        f"; {litter} count as folders too (macOS Finder or editor litter): repack without them "
        "(COPYFILE_DISABLE=1 tar ...)"
        if litter
        else "; put one model per tarball, or add an ensemble that chains them"
    )
    return Problem(
        code="layout.ambiguous",
        path=str(root),
        message=f"{what} at the top level: {names}; SageMaker's Triton serves whichever the "
        f"directory listing returns last, which is undefined{hint}",
    )


def step_collisions(layouts: dict[str, MmeLayout]) -> dict[str, list[str]]:
    """Step names that two or more tarballs (``{TargetModel: layout}``) both load, each
    with the TargetModels that load it: without model namespacing, on one instance the
    second load fails."""
    owners: dict[str, list[str]] = {}
    for target, layout in layouts.items():
        for name in layout.step_names:
            owners.setdefault(name, []).append(target)
    return {name: sorted(targets) for name, targets in owners.items() if len(targets) > 1}


__all__ = [
    "ENSEMBLE_PATTERN",
    "ROOT_FOLDER_NAME",
    "RULES",
    "MmeLayout",
    "ensemble_step_names",
    "is_ensemble",
    "read_layout",
    "step_collisions",
]
