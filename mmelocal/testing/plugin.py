"""mmelocal's pytest plugin (entry point ``pytest11``): real Triton fixtures for model tests.

Fixtures:

``triton_server``   session-scoped :class:`~mmelocal.testing.triton.TestTritonServer`: the
                    pip ``tritonserver`` by default, a container with
                    ``--mmelocal-launcher=docker`` (image: ``--mmelocal-docker-image``),
                    explicit model control on a temporary repository, SageMaker front end on.
``load_model``      function-scoped callable ``load_model(model_dir_or_build_result) -> name``:
                    adds the model to the server's repository (native platforms served
                    through mmelocal's Python runner when the server lacks them), loads it,
                    and unloads it when the test ends.
``triton_client``   the server's :class:`~mmelocal.runtime.client.TritonClient` (numpy in/out).
``tritonclient_http``  a raw ``tritonclient.http.InferenceServerClient`` on the server.
``mme_endpoint``    an MME emulator on an empty store, or with ``--mmelocal-endpoint NAME``
                    (``--mmelocal-region``) the deployed endpoint NAME
                    (:mod:`~mmelocal.testing.emulator_fixtures`); under pytest-xdist the
                    controller deletes what the workers uploaded once all are done
                    (:mod:`~mmelocal.testing.worker_uploads`).

Markers (prefixed, so the plugin never acts on a project's own ``gpu`` or ``docker``
markers): ``mmelocal_gpu`` skips without an NVIDIA GPU (or without ``nvidia-ml-py``, the
reason naming ``mmelocal[gpu]``); ``mmelocal_docker`` skips without a
Docker engine of this machine (``DOCKER_HOST`` naming another machine's counts as none;
except with ``MMELOCAL_REQUIRE_DOCKER=1``: there a missing engine must fail, not hide).
This module is imported by every pytest run: everything heavy is imported inside fixtures.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from mmelocal.builder.backends import PYTEST_FLAGS
from mmelocal.runtime.launchers import OWNED_LAUNCHERS, misplaced_option
from mmelocal.testing.emulator_fixtures import ENDPOINT_ENV, REGION_ENV, remote_options

if TYPE_CHECKING:
    import tritonclient.http

    from mmelocal.runtime.client import TritonClient
    from mmelocal.testing.triton import TestTritonServer

#: the environment variable that gives ``--mmelocal-launcher`` its default
LAUNCHER_ENV = "MMELOCAL_TEST_LAUNCHER"
GPU_MARKER = "mmelocal_gpu"
DOCKER_MARKER = "mmelocal_docker"
_MARKERS = (
    f"{GPU_MARKER}: needs an NVIDIA GPU (mmelocal skips it with the reason when none is present)",
    f"{DOCKER_MARKER}: needs a running Docker engine (mmelocal skips it without one unless "
    "MMELOCAL_REQUIRE_DOCKER=1)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Options that choose how ``triton_server`` runs Triton."""
    group = parser.getgroup("mmelocal", "mmelocal Triton fixtures")
    group.addoption(
        PYTEST_FLAGS.launcher,
        choices=OWNED_LAUNCHERS,
        default=os.environ.get(LAUNCHER_ENV, "local"),
        help="how triton_server starts Triton: the pip tritonserver (local) or docker",
    )
    group.addoption(
        "--mmelocal-tritonserver",
        default=None,
        metavar="PATH",
        help="tritonserver binary or install folder for the local launcher",
    )
    group.addoption(
        PYTEST_FLAGS.image,
        default=None,
        metavar="IMAGE",
        help=f"image for {PYTEST_FLAGS.docker} (default: $MMELOCAL_TEST_TRITON_IMAGE, "
        "else NVIDIA's Triton image)",
    )
    group.addoption(
        "--mmelocal-backends",
        default=None,
        metavar="NAMES",
        help="comma-separated backends the server has (default: python for the local "
        "binary, all for docker); models needing others are served by mmelocal's runner",
    )
    group.addoption(
        "--mmelocal-endpoint",
        default=None,
        metavar="NAME",
        help=f"run mme_endpoint tests against the deployed multi-model endpoint NAME instead "
        f"of the emulator (default: ${ENDPOINT_ENV})",
    )
    group.addoption(
        "--mmelocal-region",
        default=None,
        metavar="REGION",
        help=f"the region of --mmelocal-endpoint (default: ${REGION_ENV}, else boto3's: "
        "AWS_DEFAULT_REGION or the profile's)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers, so ``--strict-markers`` accepts them in any project; refuse a
    Triton option the chosen launcher would ignore (as ``mmelocal check`` does)."""
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    opts = config.option
    launcher = getattr(opts, "mmelocal_launcher", "local")
    if launcher not in OWNED_LAUNCHERS:  # argparse checks the flag's choices, not a default
        raise pytest.UsageError(
            f"{LAUNCHER_ENV} is {launcher!r}: it must be one of {', '.join(OWNED_LAUNCHERS)} "
            f"(the default of {PYTEST_FLAGS.launcher}); fix or unset it"
        )
    mismatch = misplaced_option(
        launcher,
        {
            "--mmelocal-tritonserver": (
                "tritonserver",
                getattr(opts, "mmelocal_tritonserver", None),
            ),
            PYTEST_FLAGS.image: ("image", getattr(opts, "mmelocal_docker_image", None)),
        },
        launcher_flag=PYTEST_FLAGS.launcher,
    )
    if mismatch is not None:
        raise pytest.UsageError(mismatch)
    if getattr(opts, "mmelocal_endpoint", None) == "":
        raise pytest.UsageError("--mmelocal-endpoint needs the name of a deployed endpoint")
    if getattr(opts, "mmelocal_region", None) and remote_options(config)[0] is None:
        raise pytest.UsageError(
            f"--mmelocal-region is only read with --mmelocal-endpoint NAME (or {ENDPOINT_ENV}): "
            "name the deployed endpoint to test, or leave --mmelocal-region out"
        )


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, for each worker: where the workers record what they upload to
    ``--mmelocal-endpoint``'s prefix (:mod:`~mmelocal.testing.worker_uploads`)."""
    from mmelocal.testing.worker_uploads import hand_folder_to

    if remote_options(node.config)[0] is not None:
        hand_folder_to(node)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """xdist's controller, every worker done: delete what the workers uploaded to
    ``--mmelocal-endpoint``'s prefix; a failure fails the run, with its line."""
    from mmelocal.testing.worker_uploads import delete_recorded_uploads

    name, region = remote_options(session.config)
    if name is None:
        return
    problem = delete_recorded_uploads(session.config, name, region)
    if problem is None:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"ERROR {problem}", red=True)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)  # after -k / -m deselect: nothing is probed for them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``mmelocal_gpu`` / ``mmelocal_docker`` tests when the GPU or engine is absent.

    The skip is a ``pytest.mark.skip`` on the test, so ``-rs`` names each test at its own
    file and line (a skip raised here would name this module for all of them), and the
    GPU and engine are looked for once per session, only when a selected test asks.
    Only mmelocal's own markers are looked at: a project's ``gpu`` marker means what that
    project says it means.
    """
    probes: dict[str, Callable[[], str | None]] = {
        GPU_MARKER: _gpu_missing_reason,
        DOCKER_MARKER: _docker_skip_reason,
    }
    reasons: dict[str, str | None] = {}
    for item in items:
        for marker, probe in probes.items():
            if item.get_closest_marker(marker) is None:
                continue
            if marker not in reasons:
                reasons[marker] = probe()
            reason = reasons[marker]
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def _docker_skip_reason() -> str | None:
    """Why ``mmelocal_docker`` tests skip here (None: they run, or must fail without an
    engine because :func:`_docker_required`)."""
    if _docker_required():
        return None
    reason = _docker_missing_reason()
    return f"needs a Docker engine: {reason}" if reason else None


def _docker_required() -> bool:
    """Whether a missing Docker engine must fail ``mmelocal_docker`` tests instead of skipping.

    Opt-in through ``MMELOCAL_REQUIRE_DOCKER=1`` (mmelocal's own CI sets it), so a user's
    CI without Docker still skips with the reason.
    """
    value = os.environ.get("MMELOCAL_REQUIRE_DOCKER", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def _gpu_missing_reason() -> str | None:
    """Why an ``mmelocal_gpu`` test cannot run here (None: NVML sees a GPU and
    ``CUDA_VISIBLE_DEVICES`` leaves one to a Triton started here).

    NVML is looked for first: without ``nvidia-ml-py`` a GPU that is there goes unseen, and
    the reason says what to install instead of claiming there is none.
    """
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return (
            "needs an NVIDIA GPU, which mmelocal looks for through NVML: nvidia-ml-py is not "
            "installed (pip install 'mmelocal[gpu]')"
        )
    from mmelocal.errors import UserInputError
    from mmelocal.runtime.memory import gpu_count
    from mmelocal.runtime.visible_gpus import server_gpus

    if gpu_count() == 0:
        return "needs an NVIDIA GPU (NVML finds none)"
    try:
        visible = server_gpus()
    except UserInputError as exc:
        return f"needs an NVIDIA GPU that a Triton started here sees: {exc}"
    if visible.indices:
        return None
    return (
        f"needs an NVIDIA GPU that a Triton started here sees: NVML finds {gpu_count()}, "
        f"CUDA none ({visible.origin})"
    )


def _docker_missing_reason() -> str | None:
    """Why no Docker engine of this machine can run mmelocal's containers (None: one
    answers). An engine on another machine (``DOCKER_HOST``) is refused by mmelocal (its
    containers mount this machine's folders), so it counts as none; it is not asked."""
    from mmelocal.docker_host import remote_engine

    try:
        import docker
    except ImportError:
        return "the docker package is not installed (pip install 'mmelocal[docker]')"
    address = remote_engine()
    if address is not None:
        return (
            f"the one at {address} (DOCKER_HOST) runs on another machine, and mmelocal's "
            "containers mount this machine's folders: unset DOCKER_HOST, or run the tests "
            "on that machine"
        )
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
    except Exception as exc:
        return f"no engine answers ({str(exc).splitlines()[0][:120]})"
    return None


@pytest.fixture(scope="session")
def triton_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestTritonServer]:
    """A started Triton for the whole session (see the module docstring)."""
    from mmelocal.testing.triton import TestTritonServer

    opts = request.config.option
    backends_opt = getattr(opts, "mmelocal_backends", None)
    backends = frozenset(b.strip() for b in backends_opt.split(",")) if backends_opt else None
    launcher = getattr(opts, "mmelocal_launcher", "local")
    image = getattr(opts, "mmelocal_docker_image", None)
    if launcher == "docker" and not image:
        # the variable is the image of docker runs, not an option of local ones
        image = os.environ.get("MMELOCAL_TEST_TRITON_IMAGE") or None
    server = TestTritonServer(
        launcher=launcher,
        tritonserver=getattr(opts, "mmelocal_tritonserver", None),
        docker_image=image,
        backends=backends,
        # under pytest's base folder: a run killed before its teardown (SIGTERM) leaves it
        # to pytest's clean-up of old runs, not in /tmp for ever
        workdir=tmp_path_factory.mktemp("mmelocal-triton"),
    )
    with server:
        yield server


@pytest.fixture
def load_model(triton_server: TestTritonServer) -> Iterator[Callable[..., str]]:
    """``load_model(model_dir_or_build_result) -> name``; loaded models unload after the test."""
    loaded: list[str] = []

    def load(model: Any, *, timeout_s: float | None = None) -> str:
        name = str(triton_server.add_model(model).name)
        # recorded before the load: one that times out goes on in Triton and ends loaded
        loaded.append(name)
        triton_server.client.load(name, timeout_s=timeout_s)
        return name

    yield load
    for name in reversed(loaded):
        if triton_server.launcher.is_alive():
            triton_server.unload_model(name)


@pytest.fixture
def triton_client(triton_server: TestTritonServer) -> TritonClient:
    """The session server's mmelocal TritonClient (infer with numpy arrays)."""
    return triton_server.client


@pytest.fixture
def tritonclient_http(
    triton_server: TestTritonServer,
) -> Iterator[tritonclient.http.InferenceServerClient]:
    """A raw ``tritonclient.http.InferenceServerClient`` on the session server."""
    import tritonclient.http as th

    client = th.InferenceServerClient(
        triton_server.launcher.endpoints.http_host_port, network_timeout=120.0
    )
    yield client
    client.close()


# The MME emulator fixtures (mmelocal.testing.emulator_fixtures imports nothing heavy).
from mmelocal.testing.emulator_fixtures import (  # noqa: E402, F401
    mme_endpoint,
    mme_endpoint_config,
)

# The local AWS fixtures (mmelocal.testing.local_aws_fixtures imports nothing heavy).
from mmelocal.testing.local_aws_fixtures import (  # noqa: E402, F401
    local_aws,
    local_aws_env,
    local_aws_options,
)
