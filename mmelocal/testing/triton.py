"""A Triton server for tests: a launcher, a temporary repository and helpers to add models.

:class:`TestTritonServer` is what the ``triton_server`` fixture yields. Models are added
to its repository with :meth:`TestTritonServer.add_model` (a model folder, or anything with
a ``model_dir`` attribute such as the builder's ``BuildResult``); native platforms the
server lacks are served through mmelocal's Python runner (:mod:`mmelocal.runtime.python_copies`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mmelocal.builder.backends import CONTAINER_BACKENDS, PIP_SERVER_BACKENDS, PYTEST_FLAGS
from mmelocal.errors import UserInputError
from mmelocal.runtime.client import TritonClient
from mmelocal.runtime.launcher import TritonLauncher
from mmelocal.runtime.launchers import (
    OWNED_LAUNCHERS,
    check_launcher_kind,
    make_launcher,
    misplaced_option,
)
from mmelocal.runtime.lifecycle import StartStopContext
from mmelocal.runtime.python_copies import PreparedModel, gpu_available, prepare_model_for_server
from mmelocal.runtime.server_config import ServerConfig

logger = logging.getLogger(__name__)

#: the launchers a test server may use (an external server is not one the fixture owns)
LAUNCHERS = OWNED_LAUNCHERS
#: the backends of the pip tritonserver (kept under this name for tests that pass it)
PYTHON_ONLY = PIP_SERVER_BACKENDS
#: the test server's environment: SageMaker's entrypoint with gRPC and metrics on
TEST_SERVER_ENV = {"SAGEMAKER_TRITON_ALLOW_GRPC": "true", "SAGEMAKER_TRITON_ALLOW_METRICS": "true"}


class TestTritonServer(StartStopContext):
    """A started Triton on a temporary repository (explicit model control, SageMaker on).

    ``launcher`` is ``"local"`` (the pip tritonserver, default) or ``"docker"``;
    ``backends`` is the set of backends the server has (default: Python only for the
    local binary, everything for Docker images). ``workdir`` is the empty folder for the
    repository and the log (created if missing; default a new temporary folder); it is
    removed at :meth:`stop`.
    """

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(
        self,
        *,
        launcher: str = "local",
        tritonserver: Path | str | None = None,
        docker_image: str | None = None,
        backends: frozenset[str] | None = None,
        start_timeout_s: float = 120.0,
        sagemaker: bool = True,
        workdir: Path | str | None = None,
    ) -> None:
        check_launcher_kind(launcher, LAUNCHERS)
        given = {
            "tritonserver": ("tritonserver", tritonserver),
            "docker_image": ("image", docker_image),
        }
        mismatch = misplaced_option(launcher, given)
        if mismatch is not None:
            raise UserInputError(mismatch)
        if workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="mmelocal-test-triton-"))
        else:
            self.workdir = Path(workdir)
            self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.repository = self.workdir / "repository"
            self.repository.mkdir()
            # whether this server sees a GPU (CUDA_VISIBLE_DEVICES, which it inherits):
            # models keep KIND_GPU only then
            self.gpu = gpu_available()
            # SageMaker's flags, with the entrypoint's own knobs for gRPC and metrics turned
            # on: tests reach this server with tritonclient's gRPC client and read its metrics
            config = ServerConfig(
                model_repository=self.repository,
                sagemaker=sagemaker,
                sagemaker_env=TEST_SERVER_ENV if sagemaker else {},
            )
            self.launcher: TritonLauncher = make_launcher(
                launcher,
                config,
                tritonserver=tritonserver,
                image=docker_image,
                start_timeout_s=start_timeout_s,
                log_path=self.workdir / "tritonserver.log",
                flags=PYTEST_FLAGS,  # the plugin's server: its hints name the plugin's flags
            )
        except BaseException:
            # no ``with`` (so no stop()) ever runs for an object that was never made
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        default = PIP_SERVER_BACKENDS if launcher == "local" else CONTAINER_BACKENDS
        self.backends = backends or default
        self._client: TritonClient | None = None

    @property
    def client(self) -> TritonClient:
        """An mmelocal :class:`TritonClient` on this server (shared, thread-safe)."""
        if self._client is None:
            self._client = TritonClient.for_launcher(self.launcher)
        return self._client

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.launcher.endpoints.http_url

    def start(self) -> TestTritonServer:
        """Start the server (waits until ready)."""
        self.launcher.start()
        return self

    def stop(self) -> None:
        """Stop the server and remove its repository (the log is kept beside it if asked)."""
        try:
            if self._client is not None:
                self._client.close()
            self.launcher.stop()
        finally:
            if not os.environ.get("MMELOCAL_KEEP_TEST_SERVER_FILES"):
                shutil.rmtree(self.workdir, ignore_errors=True)

    def add_model(self, model: Any, *, name: str | None = None) -> PreparedModel:
        """Copy a model folder (or ``BuildResult``) into the repository, derived if needed."""
        model_dir = Path(getattr(model, "model_dir", model))
        if not (model_dir / "config.pbtxt").is_file():
            raise UserInputError(_not_a_model_folder(model_dir))
        prepared = prepare_model_for_server(
            model_dir,
            self.repository,
            backends_available=self.backends,
            gpu=self.gpu,
            flags=PYTEST_FLAGS,  # the plugin's server: its hints name the plugin's flags
        )
        if name is not None and name != prepared.name:
            raise UserInputError(
                f"model folder {model_dir} is named {prepared.name!r} in its config, not {name!r}"
            )
        return prepared

    def load_model(self, model: Any, *, timeout_s: float | None = None) -> str:
        """Add ``model`` and load it; return its name."""
        prepared = self.add_model(model)
        self.client.load(prepared.name, timeout_s=timeout_s)
        return prepared.name

    def unload_model(self, name: str, *, timeout_s: float | None = None) -> None:
        """Unload ``name`` and wait until Triton reports it gone."""
        self.client.unload(name, timeout_s=timeout_s)


def _not_a_model_folder(path: Path) -> str:
    """What is wrong with ``path`` (which has no ``config.pbtxt``) and what to pass instead."""
    if not path.exists():
        return f"{path} does not exist: pass a model folder (config.pbtxt and 1/)"
    if path.is_file():
        return (
            f"{path} is a file: load_model takes a model folder (config.pbtxt and 1/); "
            "serve a model.tar.gz with the mme_endpoint fixture (mme_endpoint.add_tarball)"
        )
    models = sorted(str(p.parent) for p in path.glob("*/config.pbtxt"))
    if models:
        return (
            f"{path} is a model repository, not a model folder: pass one of its models "
            f"({', '.join(models)})"
        )
    return f"{path} is not a model folder (no config.pbtxt)"


__all__ = ["TestTritonServer"]
