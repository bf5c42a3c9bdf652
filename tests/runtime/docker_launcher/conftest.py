"""Fixtures for the Docker launcher tests: an engine, the locally built image, a tiny model.

Policy (issue 3): with ``CI`` set, the engine is installed/started and the image built, and
any failure FAILS the tests loudly; elsewhere a missing engine (or a missing prerequisite
of the image build, e.g. no debootstrap) SKIPS them with the reason.
``MMELOCAL_TEST_TRITON_IMAGE`` names an image to use instead of building one.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import unique

from mmelocal.errors import MissingDependencyError

IMAGE_DIR = Path(__file__).resolve().parent.parent / "docker_image"
IMAGE_ENV = "MMELOCAL_TEST_TRITON_IMAGE"
PREREQUISITE_MISSING = 3  # build_image.sh's exit code when something it needs is absent

ADD_ONE_CONFIG = """\
name: "add_one"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ADD_ONE_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + 1.0).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def in_ci() -> bool:
    """True in CI (``CI`` set to anything but empty/0/false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _run_script(name: str, log: Path) -> tuple[int, str]:
    started = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.run(
            ["bash", str(IMAGE_DIR / name)], stdout=subprocess.PIPE, stderr=fh, timeout=900
        )
    out = proc.stdout.decode().strip()
    with open(log, "ab") as fh:
        took_s = time.monotonic() - started
        fh.write(f"\n[{name}: exit {proc.returncode} in {took_s:.1f}s]\n".encode())
    return proc.returncode, out


def _log_tail(log: Path, lines: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A connected ``docker.DockerClient``; CI starts the engine itself (fails if it cannot)."""
    from mmelocal.runtime.docker import DockerEngineError, cleanup_containers, docker_client

    if in_ci():
        log = tmp_path_factory.mktemp("docker") / "ensure_engine.log"
        code, _ = _run_script("ensure_engine.sh", log)
        if code != 0:
            pytest.fail(f"CI could not start a Docker engine (see {log}):\n{_log_tail(log)}")
    try:
        client = docker_client()
    except (MissingDependencyError, DockerEngineError) as exc:
        if in_ci():
            pytest.fail(f"Docker engine not usable in CI: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    cleanup_containers(orphans_only=True, client=client)  # what crashed runs left behind
    yield client
    client.close()


@pytest.fixture(scope="session")
def triton_test_image(docker_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tag of the local Triton test image (built by build_image.sh when absent)."""
    given = os.environ.get(IMAGE_ENV)
    if given:
        return given
    log = tmp_path_factory.mktemp("docker") / "build_image.log"
    code, out = _run_script("build_image.sh", log)
    if code == 0 and out:
        return out.splitlines()[-1]
    message = f"could not build the Triton test image (exit {code}, log {log}):\n{_log_tail(log)}"
    if code == PREREQUISITE_MISSING and not in_ci():
        pytest.skip(message)
    pytest.fail(message)


@pytest.fixture(scope="session")
def docker_session(docker_engine: Any) -> Iterator[str]:
    """A session label for this test run; its containers are all removed at the end."""
    from mmelocal.runtime.docker import cleanup_containers

    session = unique("pytest")
    yield session
    cleanup_containers(session=session, client=docker_engine)


@pytest.fixture(scope="session")
def add_one_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository with one Python-backend model: OUTPUT0 = INPUT0 + 1."""
    repo = tmp_path_factory.mktemp("docker-repo")
    (repo / "add_one" / "1").mkdir(parents=True)
    (repo / "add_one" / "config.pbtxt").write_text(ADD_ONE_CONFIG)
    (repo / "add_one" / "1" / "model.py").write_text(ADD_ONE_MODEL)
    return repo
