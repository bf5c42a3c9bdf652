"""mmelocal's pytest plugin, seen from a project that installs it (pytester).

The plugin is loaded through its ``pytest11`` entry point, as in any project that installs
mmelocal; each test writes a small project and runs pytest on it.
"""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mmelocal.runtime.python_copies import gpu_available

if TYPE_CHECKING:
    from mmelocal.testing.triton import TestTritonServer

pytest_plugins = ["pytester"]

OWN_MARKERS_INI = """
[pytest]
addopts = --strict-markers
markers =
    gpu: this project's own meaning (runs on any machine)
    docker: this project's own meaning (runs on any machine)
"""


def test_projects_own_gpu_and_docker_markers_run(pytester: pytest.Pytester) -> None:
    pytester.makeini(OWN_MARKERS_INI)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_gpu_means_something_else():
            assert True

        @pytest.mark.docker
        def test_docker_means_something_else():
            assert True
        """
    )
    result = pytester.runpytest("-p", "mmelocal")
    result.assert_outcomes(passed=2)


def test_mmelocal_gpu_marker_skips_with_reason_without_gpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mmelocal_gpu
        def test_needs_gpu():
            assert True
        """
    )
    result = pytester.runpytest("--strict-markers", "-rs")
    if gpu_available():
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*needs an NVIDIA GPU (NVML finds none)*"])


def test_gpu_marker_and_test_server_follow_what_cuda_visible_devices_leaves(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML sees a GPU, but ``CUDA_VISIBLE_DEVICES=`` hides it from every CUDA process (a
    Triton started here included): ``mmelocal_gpu`` tests skip saying so, and the test
    server prepares models for the CPU it will run on."""
    from shared_helpers import StandInNvml

    from mmelocal.testing.triton import TestTritonServer

    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml({0: 0}, names=("Tesla T4",)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mmelocal_gpu
        def test_needs_gpu():
            assert True
        """
    )
    result = pytester.runpytest("--strict-markers", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs an NVIDIA GPU*CUDA_VISIBLE_DEVICES=*"])
    server = TestTritonServer(workdir=pytester.path / "server")
    try:
        assert server.gpu is False
    finally:
        server.stop()


def test_mmelocal_docker_marker_skips_or_fails_as_asked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{pytester.path}/no-engine.sock")
    monkeypatch.delenv("MMELOCAL_REQUIRE_DOCKER", raising=False)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mmelocal_docker
        def test_needs_engine():
            assert True
        """
    )
    skipped = pytester.runpytest("--strict-markers", "-rs")
    skipped.assert_outcomes(skipped=1)
    skipped.stdout.fnmatch_lines(["*needs a Docker engine: no engine answers*"])

    monkeypatch.setenv("MMELOCAL_REQUIRE_DOCKER", "1")
    required = pytester.runpytest("--strict-markers")
    required.assert_outcomes(passed=1)


def test_mmelocal_docker_marker_skips_on_another_machines_engine(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine on another machine (``DOCKER_HOST``) answers, but mmelocal refuses it
    (:class:`~mmelocal.errors.RemoteDockerEngineError`: its containers mount this
    machine's folders): the marked tests ran and failed with that error. They skip saying
    so, without asking the engine; with ``MMELOCAL_REQUIRE_DOCKER=1`` they run and fail."""
    asked: list[str] = []

    class _Answering:
        def __init__(self, **_: object) -> None:
            asked.append("from_env")

        def ping(self) -> bool:
            return True

        def close(self) -> None:
            pass

    engine = types.ModuleType("docker")
    engine.from_env = _Answering  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "docker", engine)  # an engine that answers
    monkeypatch.setenv("DOCKER_HOST", "tcp://gpu-box.invalid:2375")
    monkeypatch.delenv("MMELOCAL_REQUIRE_DOCKER", raising=False)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mmelocal_docker
        def test_needs_engine():
            from mmelocal.docker_host import refuse_remote_engine

            refuse_remote_engine(needs="the test mounts this machine's folders")
        """
    )
    skipped = pytester.runpytest("--strict-markers", "-rs")
    skipped.assert_outcomes(skipped=1)
    skipped.stdout.fnmatch_lines(
        ["*needs a Docker engine: the one at tcp://gpu-box.invalid:2375 (DOCKER_HOST) runs on "
         "another machine*unset DOCKER_HOST*"]
    )  # fmt: skip
    assert asked == []  # refused before it is reached (an ssh:// engine would be)

    monkeypatch.setenv("MMELOCAL_REQUIRE_DOCKER", "1")
    required = pytester.runpytest("--strict-markers")
    required.assert_outcomes(failed=1)
    required.stdout.fnmatch_lines(["*RemoteDockerEngineError*"])


def test_fixtures_are_offered_and_default_config_is_empty(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_config(mme_endpoint_config):
            assert mme_endpoint_config == {}
        """
    )
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(passed=1)
    listing = pytester.runpytest("--fixtures").stdout.str()
    for name in ("triton_server", "load_model", "triton_client", "tritonclient_http"):
        assert f"\n{name} " in listing, name
    for name in ("mme_endpoint", "mme_endpoint_config"):
        assert f"\n{name} " in listing, name


def test_option_placeholders_name_no_variable_nothing_reads(pytester: pytest.Pytester) -> None:
    """``pytest --help`` shows each option's value as a placeholder: argparse's default
    was the option's name in capitals (``--mmelocal-docker-image=MMELOCAL_DOCKER_IMAGE``),
    which reads as an environment variable, and no ``MMELOCAL_DOCKER_IMAGE``,
    ``MMELOCAL_BACKENDS`` or ``MMELOCAL_REGION`` exists (the image's is
    ``MMELOCAL_TEST_TRITON_IMAGE``)."""
    text = pytester.runpytest("--help").stdout.str()
    for option, value in (
        ("tritonserver", "PATH"),
        ("docker-image", "IMAGE"),
        ("backends", "NAMES"),
        ("endpoint", "NAME"),
        ("region", "REGION"),
    ):
        assert f"--mmelocal-{option}={value}" in text, option
    assert "=MMELOCAL_" not in text


def test_plugin_declares_only_prefixed_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_undeclared():
            assert True
        """
    )
    # In a subprocess: pytest remembers declared markers per process.
    result = pytester.runpytest_subprocess("--strict-markers")
    result.stdout.fnmatch_lines(["*'gpu' not found in `markers` configuration option*"])
    assert result.ret != 0


@pytest.mark.parametrize(
    "bad",
    [{"start_timeout_s": 0}, {"launcher": "docker", "docker_image": " "}],
    ids=["timeout", "image"],
)
def test_test_server_refused_at_construction_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any]
) -> None:
    """A ``TestTritonServer`` whose launcher refuses its arguments raises before any ``with``
    could clean up: its temporary folder must not outlive the error."""
    from mmelocal.errors import UserInputError
    from mmelocal.testing.triton import TestTritonServer

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(UserInputError):
        TestTritonServer(**bad)
    assert list(tmp_path.iterdir()) == []


def test_add_model_says_what_is_wrong_with_the_path(tmp_path: Path) -> None:
    """``load_model`` / ``add_model`` said "X is not a model folder (no config.pbtxt)" for a
    path that does not exist, for a ``model.tar.gz`` and for the repository that holds the
    model folder alike: the message now says which, and what to pass instead."""
    from mmelocal.errors import UserInputError
    from mmelocal.testing.tiny_model import write_model, write_tarball
    from mmelocal.testing.triton import TestTritonServer

    repository = tmp_path / "models"
    write_model(repository, name="tiny")
    write_model(repository, name="other")
    tarball = write_tarball(tmp_path / "model.tar.gz")
    server = TestTritonServer()
    try:
        with pytest.raises(UserInputError, match="no-such-model does not exist"):
            server.add_model(tmp_path / "no-such-model")
        with pytest.raises(UserInputError, match=r"is a file.*mme_endpoint\.add_tarball"):
            server.add_model(tarball)
        with pytest.raises(UserInputError) as info:
            server.add_model(repository)
        assert "a model repository" in str(info.value)
        assert f"{repository / 'other'}, {repository / 'tiny'}" in str(info.value)
        assert server.add_model(repository / "tiny").name == "tiny"
    finally:
        server.stop()


GATED_MODEL_PY = """
import os
import time


class TritonPythonModel:
    def initialize(self, args):
        deadline = time.monotonic() + 120
        while not os.path.exists({gate!r}) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return []
"""


@pytest.mark.triton
def test_load_model_unloads_a_load_that_timed_out(
    triton_server: TestTritonServer, tmp_path: Path
) -> None:
    """A load that times out goes on inside Triton and ends loaded: ``load_model`` must
    unload it after the test as it does any other, or it stays for the rest of the session
    (memory the next tests measure, a name they collide with)."""
    from shared_helpers import wait_for

    from mmelocal.errors import MmeLocalError
    from mmelocal.testing import plugin
    from mmelocal.testing.tiny_model import write_model

    gate = tmp_path / "gate"
    model = write_model(tmp_path / "src", name="plugin_gated_load")
    (model / "1" / "model.py").write_text(GATED_MODEL_PY.format(gate=str(gate)))
    fixture = plugin.load_model._get_wrapped_function()(triton_server)
    load = next(fixture)
    with pytest.raises(MmeLocalError):
        load(model, timeout_s=1.0)
    gate.touch()  # the load Triton goes on with now finishes

    def state() -> str | None:
        for entry in triton_server.client.index():
            if entry.get("name") == "plugin_gated_load":
                return str(entry.get("state") or "")
        return ""

    wait_for(lambda: state() == "READY", timeout_s=60, what="the timed-out load to finish")
    with pytest.raises(StopIteration):
        next(fixture)  # the fixture's teardown
    assert state() != "READY"


SIGTERMED_SESSION = """
import os
import signal
from pathlib import Path


def test_is_stopped_from_outside(triton_server):
    Path({record!r}).write_text(f"{{triton_server.workdir}}\\n{{triton_server.launcher.pid()}}")
    os.kill(os.getpid(), signal.SIGTERM)  # a CI job cancelled, ``timeout`` run out
"""


@pytest.mark.triton
def test_a_session_stopped_by_sigterm_leaves_its_server_files_to_pytest(
    pytester: pytest.Pytester,
) -> None:
    """SIGTERM ends pytest with no teardown: the server dies with its parent, but its work
    folder (the repository's model copies and the log) stayed in ``/tmp`` for ever, one per
    stopped run. Under pytest's base temporary folder it goes with pytest's own clean-up of
    old runs (and the log is there to read meanwhile)."""
    from shared_helpers import wait_for

    record = pytester.path / "server.txt"
    basetemp = pytester.path / "basetemp"
    pytester.makepyfile(SIGTERMED_SESSION.format(record=str(record)))
    result = pytester.runpytest_subprocess(f"--basetemp={basetemp}")
    assert result.ret == -15, result.stdout.str()  # killed by SIGTERM
    workdir, pid = record.read_text().split("\n")
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout_s=30, what="Triton to exit")
    assert Path(workdir).is_relative_to(basetemp), workdir


def test_mmelocal_gpu_marker_without_nvml_package_says_what_to_install(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without nvidia-ml-py mmelocal cannot see a GPU that is there (docs/pytest.md's install
    line has no ``gpu`` extra): the skip must say so, not claim there is no GPU."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mmelocal_gpu
        def test_needs_gpu():
            assert True
        """
    )
    result = pytester.runpytest("--strict-markers", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*nvidia-ml-py*mmelocal[[]gpu[]]*"])


def test_skips_name_each_test_not_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-rs`` folds skips by location and reason: a skip raised inside the plugin was
    reported at ``mmelocal/testing/plugin.py:LINE`` for every test, one line for all of
    them, and the user could not tell which of their tests had not run. Skipped as
    ``pytest.mark.skip`` does, each test is named at its own file and line."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the same reason on every machine
    monkeypatch.setenv("DOCKER_HOST", f"unix://{pytester.path}/no-engine.sock")
    monkeypatch.delenv("MMELOCAL_REQUIRE_DOCKER", raising=False)
    gpu_test = "import pytest\n\n\n@pytest.mark.mmelocal_gpu\ndef test_gpu():\n    pass\n"
    pytester.makepyfile(
        test_one=gpu_test,
        test_two=gpu_test + "\n\n@pytest.mark.mmelocal_docker\ndef test_docker():\n    pass\n",
    )
    result = pytester.runpytest("--strict-markers", "-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]1[]] test_one.py:4: needs an NVIDIA GPU*nvidia-ml-py*",
            "SKIPPED [[]1[]] test_two.py:4: needs an NVIDIA GPU*nvidia-ml-py*",
            "SKIPPED [[]1[]] test_two.py:9: needs a Docker engine: no engine answers*",
        ]
    )
    result.stdout.no_fnmatch_line("*plugin.py*")


@pytest.mark.parametrize(
    ("args", "flag", "reader"),
    [
        (["--mmelocal-docker-image", "my/triton:1"], "--mmelocal-docker-image", "docker"),
        (
            ["--mmelocal-launcher", "docker", "--mmelocal-tritonserver", "/opt/tritonserver"],
            "--mmelocal-tritonserver",
            "local",
        ),
    ],
    ids=["image-with-local", "binary-with-docker"],
)
def test_an_option_the_chosen_launcher_does_not_read_is_refused(
    pytester: pytest.Pytester, args: list[str], flag: str, reader: str
) -> None:
    """As ``mmelocal check`` refuses ``--image`` without ``--launcher docker``: an option the
    launcher would ignore stops the run with what to change, instead of a server other than
    the one asked for."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*{flag} is only read by --mmelocal-launcher {reader}*add --mmelocal-launcher {reader}*"]
    )


def test_a_launcher_variable_of_no_known_launcher_is_refused_before_any_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--mmelocal-launcher=Docker`` stops the run (argparse's choices), but argparse does
    not check a default: ``MMELOCAL_TEST_LAUNCHER=Docker`` (docs/environment.md) errored in
    every test that used the server, with a message that did not name the variable."""
    monkeypatch.setenv("MMELOCAL_TEST_LAUNCHER", "Docker")
    pytester.makepyfile("def test_uses_the_server(triton_server):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*MMELOCAL_TEST_LAUNCHER is 'Docker'*one of local, docker*--mmelocal-launcher*"]
    )


def test_the_image_environment_variable_is_a_default_not_a_mismatch(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MMELOCAL_TEST_TRITON_IMAGE is the image *when* docker runs: set for a whole CI, it
    must not stop the runs that use the local binary."""
    monkeypatch.setenv("MMELOCAL_TEST_TRITON_IMAGE", "my/triton:1")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    pytester.runpytest("--mmelocal-launcher", "local").assert_outcomes(passed=1)


def test_test_server_refuses_an_argument_its_launcher_does_not_read() -> None:
    from mmelocal.errors import UserInputError
    from mmelocal.testing.triton import TestTritonServer

    with pytest.raises(UserInputError, match="docker_image is only read by launcher docker"):
        TestTritonServer(launcher="local", docker_image="my/triton:1")


def test_a_missing_backend_is_hinted_with_the_plugins_own_flags(tmp_path: Path) -> None:
    """Under pytest the hint said ``--launcher docker`` (the CLI's flag); the plugin's is
    ``--mmelocal-launcher docker`` (its image: ``--mmelocal-docker-image``)."""
    from mmelocal.errors import MmeLocalError
    from mmelocal.testing.tiny_model import write_model
    from mmelocal.testing.triton import TestTritonServer

    python_model = write_model(tmp_path / "models", name="tiny")
    tf_model = tmp_path / "models" / "tf"
    (tf_model / "1" / "model.savedmodel").mkdir(parents=True)
    (tf_model / "config.pbtxt").write_text('name: "tf"\nplatform: "tensorflow_savedmodel"\n')
    server = TestTritonServer(backends=frozenset({"onnxruntime"}))
    try:
        for model in (python_model, tf_model):
            with pytest.raises(MmeLocalError) as info:
                server.add_model(model)
            text = str(info.value)
            assert "--mmelocal-launcher docker" in text, text
            assert " --launcher" not in text and "`--launcher" not in text, text
        assert "--mmelocal-docker-image" in text
    finally:
        server.stop()


def _numpy_2_python(folder: Path) -> Path:
    """An executable the stub check takes for a Python whose numpy is 2.0.2 (it answers the
    version question as such a Python would)."""
    python = folder / "python"
    python.write_text("#!/bin/sh\necho 2.0.2\n")
    python.chmod(0o755)
    return python


def test_the_numpy_refusal_under_the_plugin_names_the_plugins_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """triton_server's server refused numpy 2 saying '(--launcher docker)', the CLI's flag;
    there Docker is chosen with --mmelocal-launcher docker."""
    from mmelocal.errors import UserInputError
    from mmelocal.runtime.install import STUB_PYTHON_ENV
    from mmelocal.testing.triton import TestTritonServer

    monkeypatch.setenv(STUB_PYTHON_ENV, str(_numpy_2_python(tmp_path)))
    server = TestTritonServer(workdir=tmp_path / "server")
    try:
        with pytest.raises(UserInputError, match=r"numpy 2\.0\.2") as info:
            server.start()
    finally:
        server.stop()
    text = str(info.value)
    assert "--mmelocal-launcher docker" in text, text
    assert "(--launcher" not in text and " --launcher" not in text, text


MME_ENDPOINT_HINTS = """
import io, json, tarfile
from pathlib import Path

import botocore.exceptions
import pytest


def test_numpy(mme_endpoint):
    pass


def test_tensorflow(mme_endpoint, tmp_path):
    tarball = tmp_path / "tf.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        config = b'platform: "tensorflow_savedmodel"\\n'
        info = tarfile.TarInfo("config.pbtxt")
        info.size = len(config)
        tar.addfile(info, io.BytesIO(config))
        folder = tarfile.TarInfo("1/model.savedmodel")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    mme_endpoint.add_tarball("tf.tar.gz", tarball)
    with pytest.raises(botocore.exceptions.ClientError) as info:
        mme_endpoint.invoke("tf.tar.gz", {"inputs": []})
    print("HINT:", info.value)
"""


def test_mme_endpoint_hints_name_its_config_not_the_cli(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under mme_endpoint the emulator's hints named the CLI's --launcher: a TensorFlow
    model's refusal and the numpy refusal. There Docker is chosen with the
    mme_endpoint_config fixture (EmulatorConfig's launcher and image)."""
    # tritonclient is imported here: pytester's in-process runs drop what they import, and
    # ml_dtypes, beneath it, cannot be imported twice
    import tritonclient.grpc  # noqa: F401

    from mmelocal.runtime.install import STUB_PYTHON_ENV

    pytester.makepyfile(MME_ENDPOINT_HINTS)
    expected = 'mme_endpoint_config = {"launcher": "docker"'
    tf = pytester.runpytest("-s", "-k", "tensorflow")
    tf.assert_outcomes(passed=1)
    hint = next(line for line in tf.outlines if "HINT:" in line)
    assert expected in hint and "--launcher" not in hint, hint
    monkeypatch.setenv(STUB_PYTHON_ENV, str(_numpy_2_python(tmp_path)))
    numpy = pytester.runpytest("-k", "numpy")
    numpy.assert_outcomes(errors=1)
    text = numpy.stdout.str()
    assert "numpy 2.0.2" in text and expected in text, text
    assert "(--launcher docker)" not in text, text
