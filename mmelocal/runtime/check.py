"""Pre-deployment check of a repository, model folder or ``model.tar.gz`` on a real Triton.

:func:`check_path` runs the builder's static ``validate``, prepares a served copy (native
platforms become Python-backend copies on the pip server, see
:mod:`mmelocal.runtime.python_copies`), starts Triton, and for each model: loads it (Triton runs
the config's warmup during the load), sends a sample request built from the config (or
the build's reference inputs), checks the outputs' names and shapes, compares them with
the reference outputs when recorded, measures the memory the load took (summed PSS of
the server and its stub processes; GPU memory through NVML when there is a GPU) and unloads
it. A failing model carries Triton's own message. The user's files are never modified.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import CONTAINER_BACKENDS
from mmelocal.builder.mme_layout import read_layout
from mmelocal.builder.model_config import read_config
from mmelocal.builder.tarball import safe_extract
from mmelocal.builder.validate import ValidationReport, validate_path
from mmelocal.errors import MmeLocalError, ModelLoadError, ServerDiedError, UserInputError
from mmelocal.facts.sagemaker import DIRECT_LOAD_TIMEOUT_S, REQUEST_TIMEOUT_S
from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.launchers import LAUNCHERS, check_launcher_kind, make_launcher
from mmelocal.runtime.memory import gpu_used_bytes, process_tree_pss_bytes
from mmelocal.runtime.python_copies import available_backends, prepare_model_for_server
from mmelocal.runtime.samples import check_outputs, compare_outputs, load_reference, sample_inputs
from mmelocal.runtime.server_config import ServerConfig
from mmelocal.runtime.visible_gpus import ServerGpus

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """How :func:`check_path` runs: launcher, tolerances, timeouts, sample shape.

    ``all_loaded`` keeps every model loaded until the end and measures the memory they take
    together (does the repository fit beside its neighbours?), instead of one at a time.

    ``gpu_index``: on a GPU host, the one GPU (NVML's numbering, by PCI bus, as nvidia-smi
    prints it) the server runs on, as a SageMaker instance has one, and whose memory is
    read; the server is given that card's UUID in ``CUDA_VISIBLE_DEVICES``. None (the
    default): the first GPU a server started from here would see
    (:func:`~mmelocal.runtime.visible_gpus.server_gpus`: ``CUDA_VISIBLE_DEVICES`` as CUDA
    reads it, else GPU 0), and no GPU when it would see none (``CUDA_VISIBLE_DEVICES=``):
    then the server runs on the CPU and its host memory is read. For an ``external``
    server, name the GPU it runs on.
    """

    launcher: str = "local"
    url: str | None = None
    tritonserver: Path | None = None
    docker_image: str | None = None
    backends: frozenset[str] | None = None
    atol: float = 1e-3
    rtol: float = 1e-3
    start_timeout_s: float = 120.0
    load_timeout_s: float = DIRECT_LOAD_TIMEOUT_S
    infer_timeout_s: float = REQUEST_TIMEOUT_S
    batch_size: int = 1
    dynamic_dim: int = 8
    all_loaded: bool = False
    gpu_index: int | None = None

    def __post_init__(self) -> None:
        check_launcher_kind(self.launcher)
        if self.launcher == "external" and not self.url:
            raise UserInputError(
                "launcher 'external' needs url, the running server's HTTP address (mmelocal "
                "check --url http://127.0.0.1:8000)"
            )
        if self.atol < 0 or self.rtol < 0:
            raise UserInputError(f"atol and rtol must be >= 0, got {self.atol}, {self.rtol}")
        if self.gpu_index is not None and self.gpu_index < 0:
            raise UserInputError(f"gpu_index must be >= 0, got {self.gpu_index}")
        for name in ("batch_size", "dynamic_dim"):
            if getattr(self, name) < 1:
                raise UserInputError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class ModelCheck:
    """The outcome for one model; ``status`` is ``passed`` or ``failed``."""

    name: str
    status: str = "passed"
    load_time_s: float | None = None
    first_infer_ms: float | None = None
    unload_time_s: float | None = None
    memory_bytes: int | None = None
    memory_kind: str | None = None
    warmup_samples: int = 0
    reference: str = "absent"
    max_abs_diff: float | None = None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        """Record an error; the model fails."""
        self.status = "failed"
        self.errors.append(message)


@dataclass
class CheckReport:
    """Everything :func:`check_path` found; ``ok`` only when every model passed."""

    path: str
    validation: ValidationReport
    models: list[ModelCheck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    server_log: str | None = None
    baseline_memory_bytes: int | None = None
    all_loaded_memory_bytes: int | None = None
    memory_kind: str | None = None

    @property
    def ok(self) -> bool:
        """True when validation found no error, there was a model, and all models passed."""
        return (
            not self.errors and bool(self.models) and all(m.status == "passed" for m in self.models)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "ok": self.ok,
            "errors": list(self.errors),
            "validation": self.validation.to_dict(),
            "models": [asdict(m) for m in self.models],
            "server_log": self.server_log,
            "baseline_memory_bytes": self.baseline_memory_bytes,
            "all_loaded_memory_bytes": self.all_loaded_memory_bytes,
            "memory_kind": self.memory_kind,
        }


#: where a tarball is unpacked in the check's work folder
EXTRACTED = "extracted"


def check_path(
    path: Path | str,
    options: CheckOptions | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> CheckReport:
    """Validate, serve, load, query and unload every model under ``path`` (module docstring)."""
    opts = options or CheckOptions()
    say = progress or (lambda message: None)
    source = Path(path)
    say(f"validating {source}")
    work = Path(tempfile.mkdtemp(prefix="mmelocal-check-"))
    try:
        # a tarball is extracted once, by validate, into the folder the check goes on with
        validation = validate_path(source, extract_to=work / EXTRACTED)
        report = CheckReport(path=str(source), validation=validation)
        model_dirs = _model_dirs(source, work, report)
        if not model_dirs:
            if not report.errors:
                report.errors.append(f"no model folder (with config.pbtxt) found in {source}")
            return report
        served = work / "served"
        served.mkdir()
        card = _server_gpu(opts)
        gpu = card.indices[0] if card.indices else None  # NVML's number of the card read
        launcher = _make_launcher(opts, served, card)
        backends = _backends(opts, launcher)
        targets: list[_Target] = []
        for model_dir, folder_name in model_dirs:
            check = ModelCheck(name=folder_name or model_dir.name)
            report.models.append(check)
            for problem in validation.by_folder.get(model_dir.resolve(), []):
                if problem.severity == "error":
                    check.fail(f"validate: {problem.code}: {problem.message}")
            try:
                prepared = prepare_model_for_server(
                    model_dir,
                    served,
                    backends_available=backends,
                    gpu=gpu is not None,
                    folder_name=folder_name,
                )
            except MmeLocalError as exc:
                check.fail(str(exc))
                continue
            check.name = prepared.name
            check.notes.extend(prepared.notes)
            config = read_config(prepared.served_dir / "config.pbtxt")
            targets.append(_Target(check, model_dir, prepared.served_dir, config))
        if not targets:
            return report
        say(f"starting Triton ({opts.launcher})")
        with launcher:
            report.server_log = str(launcher.log_path) if launcher.log_path else None
            report.baseline_memory_bytes, report.memory_kind = _memory(launcher, gpu)
            restarted = False
            for index, target in enumerate(targets):
                say(f"checking {target.check.name}")
                if not launcher.is_alive():
                    say("restarting Triton")
                    launcher.stop()
                    launcher.start()
                    restarted = True
                client = TritonClient.for_launcher(
                    launcher, timeout_s=opts.infer_timeout_s, load_timeout_s=opts.load_timeout_s
                )
                log_offset = _log_size(launcher.log_path)  # the log runs on across restarts
                try:
                    _check_model(client, launcher, target, opts, gpu, unload=not opts.all_loaded)
                except ServerDiedError as exc:
                    reason = crash_reason(launcher.log_path, offset=log_offset)
                    target.check.fail(
                        f"Triton crashed while checking this model{reason}: {exc}"
                        + (
                            "; the next models run on a restarted server"
                            if index + 1 < len(targets)
                            else ""
                        )
                    )
                finally:
                    client.close()
            if opts.all_loaded and launcher.is_alive():
                _measure_and_unload_all(launcher, targets, report, opts, gpu, restarted)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _model_dirs(source: Path, work: Path, report: CheckReport) -> list[tuple[Path, str | None]]:
    """The model folders to check, each with the folder name to serve it under (None: its
    own). A tarball goes through the MME layout rules: the folders one load touches."""
    if not source.exists():
        report.errors.append(f"{source} does not exist")
        return []
    if source.is_file() and source.name == "config.pbtxt":
        source = source.parent
    if source.is_dir():
        if (source / "config.pbtxt").is_file():
            return [(source, None)]
        return [
            (c, None)
            for c in sorted(source.iterdir())
            if c.is_dir() and (c / "config.pbtxt").is_file()
        ]
    root = work / EXTRACTED  # validate extracted a tarball there
    if report.validation.kind != "tarball":  # not gzip: say what the archive reader says
        try:
            safe_extract(source, root)
        except MmeLocalError as exc:
            report.errors.append(f"cannot extract {source}: {exc}")
            return []
    if not root.is_dir():
        found = report.validation.errors
        reasons = [p.message for p in found if p.code.startswith("archive.")]
        report.errors.append(f"cannot extract {source}: {'; '.join(reasons)}")
        return []
    layout = read_layout(root)
    if not layout.ok:
        report.errors.extend(f"{source.name}: {f.message}" for f in layout.errors)
        return []
    return list(layout.named_folders)


def _server_gpu(opts: CheckOptions) -> ServerGpus:
    """The one GPU the server runs on (none: it runs on the CPU): ``opts.gpu_index``, a
    number this machine has not being refused, else the first the server would see."""
    from mmelocal.runtime.visible_gpus import server_gpus

    if opts.gpu_index is not None:
        return server_gpus(chosen=(opts.gpu_index,))
    visible = server_gpus()
    if not visible.indices:
        return visible
    return ServerGpus(
        names=visible.names[:1],
        indices=visible.indices[:1],
        uuids=visible.uuids[:1],
        total_bytes=visible.total_bytes[:1],
        env=visible.pin(0),
        origin=f"the first GPU of {visible.origin}",
    )


def _make_launcher(opts: CheckOptions, served: Path, card: ServerGpus) -> TritonLauncher:
    # one GPU, the one read, by UUID: exact whatever order CUDA numbers the GPUs in; none:
    # the CUDA_VISIBLE_DEVICES that hides them, also for a container (which does not
    # inherit this environment)
    env = dict(card.env)
    return make_launcher(
        opts.launcher,
        ServerConfig(model_repository=served, env=env),
        tritonserver=opts.tritonserver,
        image=opts.docker_image,
        url=opts.url,
        start_timeout_s=opts.start_timeout_s,
    )


def _backends(opts: CheckOptions, launcher: TritonLauncher) -> frozenset[str]:
    if opts.backends is not None:
        return frozenset(opts.backends)
    if opts.launcher == "local":
        from mmelocal.runtime.local import find_tritonserver, prepare_backend_directory

        install = find_tritonserver(opts.tritonserver)
        return available_backends(prepare_backend_directory(install))
    return CONTAINER_BACKENDS


@dataclass
class _Target:
    check: ModelCheck
    model_dir: Path
    served_dir: Path
    config: Any


def _measure_and_unload_all(
    launcher: TritonLauncher,
    targets: list[_Target],
    report: CheckReport,
    opts: CheckOptions,
    gpu: int | None,
    restarted: bool,
) -> None:
    now, _ = _memory(launcher, gpu)
    if now is not None and report.baseline_memory_bytes is not None and not restarted:
        report.all_loaded_memory_bytes = max(0, now - report.baseline_memory_bytes)
    client = TritonClient.for_launcher(launcher, load_timeout_s=opts.load_timeout_s)
    try:
        for target in targets:
            if target.check.load_time_s is None or not client.model_ready(target.check.name):
                continue
            try:
                target.check.unload_time_s = client.unload(target.check.name)
            except MmeLocalError as exc:
                target.check.fail(f"unload: {exc}")
    finally:
        client.close()


def _check_model(
    client: TritonClient,
    launcher: TritonLauncher,
    target: _Target,
    opts: CheckOptions,
    gpu: int | None,
    *,
    unload: bool = True,
) -> None:
    check, config = target.check, target.config
    files, config_json = _external_payload(launcher, target.served_dir, config)
    check.warmup_samples = sum(max(1, w.count) for w in config.model_warmup)
    before = _memory(launcher, gpu)
    try:
        check.load_time_s = client.load(check.name, config=config_json, files=files)
    except ModelLoadError as exc:
        message = str(exc.triton_message or exc)
        check.fail(f"load: {message}{_missing_backend_hint(message, opts)}")
        return
    after = _memory(launcher, gpu)
    if before[0] is not None and after[0] is not None:
        check.memory_bytes = max(0, after[0] - before[0])
        check.memory_kind = after[1]
    try:
        _query(client, check, target.model_dir, config, opts)
    finally:
        if unload:
            try:
                check.unload_time_s = client.unload(check.name, timeout_s=opts.load_timeout_s)
            except MmeLocalError as exc:
                check.fail(f"unload: {exc}")


_MISSING_BACKEND = re.compile(r"unable to find backend library for backend '([^']+)'")


def _missing_backend_hint(message: str, opts: CheckOptions) -> str:
    """What to do when Triton lacks a model's backend that the check took it to have (an
    external server or an image, whose backends it cannot read: all of them, unless told)."""
    found = _MISSING_BACKEND.search(message)
    if found is None or opts.backends is not None or opts.launcher == "local":
        return ""
    return (
        f" (this server has no {found.group(1)!r} backend: give the backends it has with "
        "--backends, e.g. --backends python for the pip tritonserver, which a kept "
        "`mmelocal triton start` server runs; models needing others are then served "
        "through mmelocal's Python runner)"
    )


def _query(
    client: TritonClient, check: ModelCheck, model_dir: Path, config: Any, opts: CheckOptions
) -> None:
    reference = load_reference(model_dir)
    if reference is not None and reference[0]:
        inputs, expected = reference
        check.reference = "used"
    else:
        inputs = sample_inputs(config, batch_size=opts.batch_size, dynamic_dim=opts.dynamic_dim)
        expected = {}
    batch = next(iter(inputs.values())).shape[0] if config.max_batch_size > 0 and inputs else None
    start = time.monotonic()
    try:
        outputs = client.infer(check.name, inputs, timeout_s=opts.infer_timeout_s)
    except MmeLocalError as exc:
        check.fail(f"inference: {exc}")
        return
    check.first_infer_ms = (time.monotonic() - start) * 1000
    for problem in check_outputs(config, outputs, batch_size=batch):
        check.fail(problem)
    if expected:
        problems, worst = compare_outputs(expected, outputs, atol=opts.atol, rtol=opts.rtol)
        check.max_abs_diff = worst
        check.reference = "differs" if problems else "matched"
        for problem in problems:
            check.fail(problem)


def crash_reason(log_path: Path | None, *, offset: int = 0) -> str:
    """`` (Signal (11) received.)`` style text from the end of a server log, of what was
    written from byte ``offset`` on (a crash's own lines, not an earlier crash's), or ''."""
    from mmelocal.runtime.readiness import log_tail

    tail = log_tail(log_path, lines=200, offset=offset)
    lines = [line for line in tail.splitlines() if "Signal (" in line]
    return f" ({lines[-1].strip()})" if lines else ""


def _log_size(log_path: Path | None) -> int:
    """The log's size now: where what the server writes next begins (0 when absent)."""
    try:
        return log_path.stat().st_size if log_path is not None else 0
    except OSError:
        return 0


def _memory(launcher: TritonLauncher, gpu: int | None) -> tuple[int | None, str]:
    """Used memory of GPU ``gpu`` (NVML index), else the PSS of the server's tree, else
    (a container whose processes are not this machine's: Docker Desktop's VM, no pid) the
    container's memory as its engine counts it."""
    if gpu is not None:
        used = gpu_used_bytes(gpu)
        if used is not None:
            return used, "gpu"
    pid = launcher.pid()
    if pid:
        return process_tree_pss_bytes(pid), "host_pss"
    engine_memory = getattr(launcher, "container_memory_bytes", None)
    used = engine_memory() if engine_memory is not None else None
    return (used, "container") if used is not None else (None, "host_pss")


def _external_payload(
    launcher: TritonLauncher, served: Path, config: Any
) -> tuple[dict[str, bytes] | None, str | None]:
    """For a server that cannot see our files, send config and files with the load."""
    if launcher.model_repository is not None:
        return None, None
    from google.protobuf import json_format

    files = {
        str(p.relative_to(served)): p.read_bytes()
        for p in served.rglob("*")
        if p.is_file() and p.parent != served
    }
    return files, json_format.MessageToJson(config, preserving_proto_field_name=True)


__all__ = ["LAUNCHERS", "CheckOptions", "CheckReport", "ModelCheck", "check_path"]
