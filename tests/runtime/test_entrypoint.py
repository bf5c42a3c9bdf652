"""SageMaker's Triton entrypoint as :mod:`mmelocal.runtime.entrypoint` renders it.

The expected argv lists are written from ``docker/sagemaker/serve`` of
triton-inference-server/server at v2.51.0 (r24.10), read line by line: defaults, one knob
per ``if [ -n "$VAR" ]``, the per-GPU ``--model-load-gpu-limit``, the whitespace split of
``$SAGEMAKER_ARGS`` and the fixed head of the last line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmelocal.errors import UserInputError
from mmelocal.runtime.entrypoint import (
    check_sagemaker_env,
    entrypoint_args,
    entrypoint_environment,
    model_namespacing,
)
from mmelocal.runtime.server_config import MMELOCAL_FLAGS, ServerConfig

HEAD = ["--allow-sagemaker=true", "--allow-http=false", "--model-control-mode=explicit"]
DEFAULTS = [
    "--model-repository=/tmp/sagemaker",
    "--model-namespacing=true",
    "--allow-grpc=false",
    "--allow-metrics=false",
    "--log-verbose=true",
    "--backend-config=python,shm-default-byte-size=16777216",
    "--backend-config=python,shm-growth-byte-size=1048576",
]


def test_defaults_are_the_scripts() -> None:
    assert entrypoint_args({}) == [*HEAD, *DEFAULTS]
    # an empty value is unset for `[ -n "$VAR" ]`
    assert entrypoint_args({"SAGEMAKER_TRITON_LOG_VERBOSE": ""}) == [*HEAD, *DEFAULTS]


def test_every_knob_in_the_scripts_order() -> None:
    env = {
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--exit-on-error=false  --model-load-thread-count=2",
        "SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": "0.8",
        "SAGEMAKER_TRITON_TENSORFLOW_VERSION": "2",
        "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE": "2097152",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "33554432",
        "SAGEMAKER_TRITON_LOG_ERROR": "false",
        "SAGEMAKER_TRITON_LOG_WARNING": "false",
        "SAGEMAKER_TRITON_LOG_INFO": "true",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "0",
        "SAGEMAKER_TRITON_THREAD_COUNT": "16",
        "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": "4",
        "SAGEMAKER_TRITON_GRPC_PORT": "9001",
        "SAGEMAKER_TRITON_METRICS_PORT": "9002",
        "SAGEMAKER_TRITON_ALLOW_METRICS": "true",
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false",
    }
    assert entrypoint_args(env, gpu_count=2) == [
        *HEAD,
        "--model-repository=/tmp/sagemaker",
        "--model-namespacing=false",
        "--allow-grpc=true",
        "--allow-metrics=true",
        "--metrics-port=9002",
        "--grpc-port=9001",
        "--buffer-manager-thread-count=4",
        "--sagemaker-thread-count=16",
        "--log-verbose=0",
        "--log-info=true",
        "--log-warning=false",
        "--log-error=false",
        "--backend-config=python,shm-default-byte-size=33554432",
        "--backend-config=python,shm-growth-byte-size=2097152",
        "--backend-config=tensorflow,version=2",
        "--model-load-gpu-limit",
        "0:0.8",
        "--model-load-gpu-limit",
        "1:0.8",
        "--exit-on-error=false",
        "--model-load-thread-count=2",
    ]
    # no GPU: nvidia-smi -L counts none, so no --model-load-gpu-limit
    assert not any("gpu-limit" in a for a in entrypoint_args(env, gpu_count=0))


def test_namespacing_variable_is_passed_as_is() -> None:
    """The script passes the DISABLE variable's value as --model-namespacing's: 'false'
    turns namespacing off, 'true' leaves it on."""
    assert model_namespacing({}) is True
    assert model_namespacing({"SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false"}) is False
    assert model_namespacing({"SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "OFF"}) is False
    assert model_namespacing({"SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "true"}) is True


def test_ping_mode_reaches_the_server_only_when_exported() -> None:
    assert "SAGEMAKER_TRITON_PING_MODE" not in entrypoint_environment({})
    live = entrypoint_environment({"SAGEMAKER_TRITON_PING_MODE": "ready"})
    assert live["SAGEMAKER_TRITON_PING_MODE"] == "live"
    both = {"SAGEMAKER_TRITON_PING_MODE": "x", "SAGEMAKER_TRITON_OVERRIDE_PING_MODE": "ready"}
    assert entrypoint_environment(both)["SAGEMAKER_TRITON_PING_MODE"] == "ready"
    assert entrypoint_environment({})["SAGEMAKER_MULTI_MODEL"] == "true"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"SAGEMAKER_TRITON_LOG_VERBOSE": "loud"}, 'Bad option: "--log-verbose"'),
        ({"SAGEMAKER_TRITON_ALLOW_GRPC": "yes"}, "invalid value for bool option: yes"),
        ({"SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "disable"}, "--model-namespacing"),
        ({"SAGEMAKER_TRITON_THREAD_COUNT": "many"}, "Invalid option value. Got many"),
        ({"SAGEMAKER_TRITON_GRPC_PORT": "99999999999"}, "out of bound"),
        ({"SAGEMAKER_TRITON_LOG_INFO": "true false"}, "Unexpected argument: false"),
        # the script's unquoted $SAGEMAKER_ARGS: a leading space leaves the flag empty
        ({"SAGEMAKER_TRITON_LOG_VERBOSE": " 5"}, "Invalid option value. Got "),
        ({"SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": " 0.5"}, "Invalid option value"),
        ({"SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": "half"}, "Invalid option value"),
        ({"SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "1024"}, "at least 1 MB"),
        # the Python backend's own refusal, at every Python model's load (2.51 checked)
        ({"SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE": "0"}, "smaller than or equal to zero"),
    ],
)
def test_values_tritonserver_refuses_fail_with_its_message(env: dict[str, str], words: str) -> None:
    key = next(iter(env))
    with pytest.raises(UserInputError, match=key) as caught:
        check_sagemaker_env(env)
    assert words in str(caught.value)
    with pytest.raises(UserInputError, match=key):  # serve checks at construction
        ServerConfig(model_repository=Path("."), sagemaker=True, sagemaker_env=env)


def test_values_tritonserver_accepts() -> None:
    # std::stoi reads a leading number and ignores the rest; bools accept on/off/1/0
    ok = {
        "SAGEMAKER_TRITON_THREAD_COUNT": "12abc",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "TRUE",
        "SAGEMAKER_TRITON_LOG_INFO": "off",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--anything goes=here",
        "OMP_NUM_THREADS": "1",
    }
    assert check_sagemaker_env(ok) == []


def test_trailing_whitespace_is_dropped_as_the_script_drops_it(tmp_path: Path) -> None:
    """The script expands $SAGEMAKER_ARGS unquoted: ``true `` (a value from a YAML file, a
    here-doc) reaches tritonserver as ``true``, which it accepts."""
    env = {
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true ",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "true\n",
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false\n",
    }
    assert check_sagemaker_env(env) == []
    assert model_namespacing(env) is False
    config = ServerConfig(model_repository=tmp_path, sagemaker=True, sagemaker_env=env)
    assert config.log_verbose == 1 and config.serves_grpc
    args = entrypoint_args(env)
    assert "--allow-grpc=true" in args and "--model-namespacing=false" in args


def test_unknown_and_platform_keys_are_warnings() -> None:
    warnings = check_sagemaker_env(
        {
            "SAGEMAKER_TRITON_LOG_VERBOS": "1",
            "SAGEMAKER_BIND_TO_PORT": "8080",
            "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m",
        }
    )
    assert len(warnings) == 3
    assert "SAGEMAKER_TRITON_LOG_VERBOS is not read" in warnings[0]
    assert "SAGEMAKER_TRITON_LOG_VERBOSE" in warnings[0]  # the real names are listed
    assert "set by SageMaker itself" in warnings[1]
    assert "single-model" in warnings[2]


def test_server_config_runs_the_recipe_then_mmelocals_flags(tmp_path: Path) -> None:
    env = {"SAGEMAKER_TRITON_LOG_VERBOSE": "2", "SAGEMAKER_TRITON_ALLOW_METRICS": "true"}
    config = ServerConfig(
        model_repository=tmp_path, sagemaker=True, sagemaker_env=env, exit_timeout_s=3
    ).resolved()
    args = config.to_args()
    recipe = [
        f"--model-repository={tmp_path}" if a == "--model-repository=/tmp/sagemaker" else a
        for a in entrypoint_args(env)
    ]
    assert args[: len(recipe)] == recipe
    assert args[len(recipe) :] == [
        "--allow-http=true",
        "--http-address=127.0.0.1",
        f"--http-port={config.http_port}",
        f"--sagemaker-port={config.sagemaker_port}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={config.metrics_port}",
        "--metrics-interval-ms=200",
        "--exit-timeout-secs=3",
    ]
    assert config.log_verbose == 2  # mirrored from the environment
    # every flag mmelocal adds is listed with its reason
    listed = " ".join(MMELOCAL_FLAGS)
    for arg in args[len(recipe) :]:
        assert arg.split("=")[0] in listed, arg


def test_a_metrics_interval_of_the_callers_is_kept(tmp_path: Path) -> None:
    """mmelocal's short metrics interval (a quick stop: the poller's sleep holds
    tritonserver's exit) is added only where metrics are on and no interval is given:
    one in SAGEMAKER_TRITON_ADDITIONAL_ARGS or extra_args is the caller's, left alone."""

    def intervals(env: dict[str, str], extra: tuple[str, ...] = ()) -> list[str]:
        config = ServerConfig(
            model_repository=tmp_path, sagemaker=True, sagemaker_env=env, extra_args=extra
        ).resolved()
        args = config.to_args()
        flag = "--metrics-interval-ms"
        return [a for i, a in enumerate(args) if a.startswith(flag) or args[i - 1] == flag]

    on = {"SAGEMAKER_TRITON_ALLOW_METRICS": "true"}
    assert intervals({}) == []  # metrics off: no poller, the platform's argv as it is
    assert intervals(on) == ["--metrics-interval-ms=200"]
    given = {**on, "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--metrics-interval-ms 5000"}
    assert intervals(given) == ["--metrics-interval-ms", "5000"]
    assert intervals(on, ("--metrics-interval-ms=3000",)) == ["--metrics-interval-ms=3000"]


def test_server_config_and_environment_must_agree(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="disagree"):
        ServerConfig(
            model_repository=tmp_path,
            sagemaker=True,
            log_verbose=1,
            sagemaker_env={"SAGEMAKER_TRITON_LOG_VERBOSE": "0"},
        )
    with pytest.raises(UserInputError, match="sagemaker=True"):
        ServerConfig(model_repository=tmp_path, sagemaker_env={"A": "1"})


def test_deploy_and_serve_check_the_same_way(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """deploy --env refuses what serve --env refuses, with the same reason, and warns alike."""
    from mmelocal.deploy.plan import DeployOptions
    from mmelocal.emulator.emulator_config import EmulatorConfig
    from mmelocal.errors import DeployError

    common = {
        "store": tmp_path,
        "endpoint_name": "e",
        "s3_uri": "s3://bucket/prefix/",
        "role_arn": "arn:aws:iam::123456789012:role/SageMakerExecution",
    }
    bad = {"SAGEMAKER_TRITON_LOG_VERBOSE": "loud"}
    with pytest.raises(DeployError, match=r"Invalid option value\. Got loud"):
        DeployOptions(**common, environment=bad)  # type: ignore[arg-type]
    with pytest.raises(UserInputError, match=r"Invalid option value\. Got loud"):
        EmulatorConfig(store=str(tmp_path), sagemaker_env=bad)
    typo = {"SAGEMAKER_TRITON_LOG_VERBOS": "0"}
    with caplog.at_level("WARNING", logger="mmelocal"):
        DeployOptions(**common, environment=typo)  # type: ignore[arg-type]
        EmulatorConfig(store=str(tmp_path), sagemaker_env=typo)
    warned = [r.getMessage() for r in caplog.records if "LOG_VERBOS is not read" in r.getMessage()]
    assert len(warned) == 2


def test_serve_cli_refuses_a_bad_value_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmelocal.cli.main import main

    code = main(["serve", "--store", str(tmp_path), "--env", "SAGEMAKER_TRITON_ALLOW_GRPC=yes"])
    assert code == 2
    err = capsys.readouterr().err
    assert "SAGEMAKER_TRITON_ALLOW_GRPC" in err and "invalid value for bool option: yes" in err


def test_grpc_and_metrics_ports_follow_the_entrypoint() -> None:
    """Which listeners the launcher publishes and bridges: all of them outside MME mode,
    in MME mode only those the entrypoint's knobs turn on (both off by default)."""
    plain = ServerConfig(model_repository=Path("/m"))
    assert plain.serves_grpc and plain.serves_metrics
    mme = ServerConfig(model_repository=Path("/m"), sagemaker=True)
    assert not mme.serves_grpc and not mme.serves_metrics
    on = ServerConfig(
        model_repository=Path("/m"),
        sagemaker=True,
        sagemaker_env={"SAGEMAKER_TRITON_ALLOW_GRPC": "true"},
    )
    assert on.serves_grpc and not on.serves_metrics


@pytest.mark.parametrize("value", ["-1", "-5"])
def test_a_negative_log_verbose_is_taken_as_tritonserver_takes_it(
    tmp_path: Path, value: str
) -> None:
    """tritonserver parses ``--log-verbose`` as any int (``ParseIntBoolOption``) and
    ``LOG_SET_VERBOSE`` clamps it to ``max(0, level)`` (triton-inference-server/common
    ``logging.h``, r24.10): a negative level is verbose logging off, not a refusal."""
    env = {"SAGEMAKER_TRITON_LOG_VERBOSE": value}
    assert check_sagemaker_env(env) == []
    config = ServerConfig(model_repository=tmp_path, sagemaker=True, sagemaker_env=env)
    assert config.log_verbose == 0  # the level tritonserver runs at
    assert f"--log-verbose={value}" in entrypoint_args(env)  # passed on as the script does
    # the same level given both ways agrees
    both = ServerConfig(model_repository=tmp_path, sagemaker=True, log_verbose=0, sagemaker_env=env)
    assert both.log_verbose == 0
