"""SageMaker's launch recipe: ``SAGEMAKER_TRITON_*`` environment -> tritonserver's argv.

SageMaker starts its Triton image through the image's entrypoint, ``docker/sagemaker/serve``
in triton-inference-server/server. The version that ships with Triton 2.51 (release r24.10,
the version of the ``nvidia-pytriton`` wheel's binary) builds, in MME mode
(``SAGEMAKER_MULTI_MODEL=true``)::

    tritonserver --allow-sagemaker=true --allow-http=false --model-control-mode=explicit \\
        --model-repository=/tmp/sagemaker --model-namespacing=true ... $ADDITIONAL_ARGS

from the model's ``Environment``. :func:`entrypoint_args` is that recipe, one knob per
entry of :data:`KNOBS` in the script's order, with the script's defaults and its shell
semantics (an empty value counts as unset; the flags string is split on whitespace, so a
value with a space becomes two arguments). :func:`entrypoint_environment` is the
environment tritonserver then sees. :func:`check_sagemaker_env` refuses, before anything
starts, a value with which tritonserver would refuse to start on SageMaker (its own
message, e.g. ``Bad option: "--log-verbose". Invalid option value. Got loud``) and returns
a warning for every ``SAGEMAKER_TRITON_*`` key the entrypoint does not read.

What mmelocal adds to the recipe for itself is :data:`MMELOCAL_FLAGS` in
:mod:`mmelocal.runtime.server_config` (ports, the HTTP endpoint on loopback, the backend folder).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mmelocal.errors import UserInputError

#: the entrypoint version this module follows (the wheel's tritonserver is 2.51 = r24.10)
ENTRYPOINT_SOURCE = "docker/sagemaker/serve of triton-inference-server/server r24.10 (Triton 2.51)"
#: the dummy repository the entrypoint passes in MME mode (every tarball is registered apart)
MME_MODEL_REPOSITORY = "/tmp/sagemaker"
#: what the entrypoint always passes, before its own arguments
FIXED_ARGS = ("--allow-sagemaker=true", "--allow-http=false", "--model-control-mode=explicit")
PREFIX = "SAGEMAKER_TRITON_"


def _stoi(value: str, *, bits: int = 32) -> int:
    """``std::stoi``/``std::stoll`` as tritonserver parses numbers: leading spaces, a
    sign, digits; anything after the digits is ignored (``"12abc"`` is 12)."""
    match = re.match(r"\s*([+-]?\d+)", value)
    if match is None:
        raise ValueError(f"Invalid option value. Got {value}")
    number = int(match.group(1))
    if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
        raise ValueError(f"Provided option value is out of bound. Got {value}")
    return number


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise ValueError(f"invalid value for bool option: {value}")


def _log_level(value: str) -> int:
    """``--log-verbose``: ``true``/``false`` or an integer (``ParseIntBoolOption``), the
    level tritonserver then runs at: ``LOG_SET_VERBOSE`` clamps it to ``max(0, level)``
    (triton-inference-server/common ``include/triton/common/logging.h``), so ``-1`` is
    verbose logging off, not a refusal."""
    lowered = value.lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    return max(0, _stoi(value))


def _port_range(value: str) -> None:
    first, sep, second = value.partition("-")
    if not sep:
        raise ValueError(
            "Cannot parse pair option due to incorrect number of inputs.--<pair option> "
            f"argument requires format <first>-<second>. Found: {value}"
        )
    _stoi(first)
    _stoi(second)


def _fraction(value: str) -> None:
    if re.match(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", value) is None:
        raise ValueError(f"Invalid option value. Got {value}")


#: the least Python-backend shared memory per model the backend accepts (1 MB)
MIN_PYTHON_SHM_BYTES = 1024 * 1024


def _byte_size(value: str) -> int:
    # the Python backend reads it with std::stol when its first model loads
    number = _stoi(value, bits=64)
    if number < MIN_PYTHON_SHM_BYTES:
        raise ValueError(
            f"the Python backend needs at least 1 MB ({MIN_PYTHON_SHM_BYTES}), got {value}"
        )
    return number


def _growth_size(value: str) -> int:
    # the Python backend reads it with std::stol and refuses <= 0 at its first model's load
    number = _stoi(value, bits=64)
    if number <= 0:
        raise ValueError(
            f"shm-growth-byte-size can't be smaller than or equal to zero, got {value}"
        )
    return number


def _any(value: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One variable the entrypoint reads.

    ``flag`` is the argument it becomes (``{}`` = the value; ``None`` = no argument:
    it acts through the environment); ``default`` is passed when the variable is unset
    (``None`` = nothing then); ``check`` raises ValueError with tritonserver's message
    for a value it would refuse.
    """

    key: str
    flag: str | None
    default: str | None = None
    check: Callable[[str], object] = _any
    what: str = ""


#: The variables the entrypoint reads, in the order it turns them into arguments.
KNOBS: tuple[Knob, ...] = (
    Knob(
        key="SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING",
        flag="--model-namespacing={}",
        default="true",
        check=_bool,
        what="passed AS IS as --model-namespacing's value: 'false' turns namespacing off, "
        "'true' leaves it on (the script's name says the opposite)",
    ),
    Knob(key="SAGEMAKER_BIND_TO_PORT", flag="--sagemaker-port={}", check=_stoi, what="platform"),
    Knob(
        key="SAGEMAKER_SAFE_PORT_RANGE",
        flag="--sagemaker-safe-port-range={}",
        check=_port_range,
        what="platform",
    ),
    Knob(key="SAGEMAKER_TRITON_ALLOW_GRPC", flag="--allow-grpc={}", default="false", check=_bool),
    Knob(
        key="SAGEMAKER_TRITON_ALLOW_METRICS",
        flag="--allow-metrics={}",
        default="false",
        check=_bool,
    ),
    Knob(key="SAGEMAKER_TRITON_METRICS_PORT", flag="--metrics-port={}", check=_stoi),
    Knob(key="SAGEMAKER_TRITON_GRPC_PORT", flag="--grpc-port={}", check=_stoi),
    Knob(
        key="SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT",
        flag="--buffer-manager-thread-count={}",
        check=_stoi,
    ),
    Knob(key="SAGEMAKER_TRITON_THREAD_COUNT", flag="--sagemaker-thread-count={}", check=_stoi),
    Knob(
        key="SAGEMAKER_TRITON_LOG_VERBOSE",
        flag="--log-verbose={}",
        default="true",
        check=_log_level,
    ),
    Knob(key="SAGEMAKER_TRITON_LOG_INFO", flag="--log-info={}", check=_bool),
    Knob(key="SAGEMAKER_TRITON_LOG_WARNING", flag="--log-warning={}", check=_bool),
    Knob(key="SAGEMAKER_TRITON_LOG_ERROR", flag="--log-error={}", check=_bool),
    Knob(
        key="SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE",
        flag="--backend-config=python,shm-default-byte-size={}",
        default="16777216",
        check=_byte_size,
    ),
    Knob(
        key="SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE",
        flag="--backend-config=python,shm-growth-byte-size={}",
        default="1048576",
        check=_growth_size,
    ),
    Knob(
        key="SAGEMAKER_TRITON_TENSORFLOW_VERSION",
        flag="--backend-config=tensorflow,version={}",
    ),
    Knob(
        key="SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT",
        flag="--model-load-gpu-limit {gpu}:{}",
        check=_fraction,
        what="one flag per GPU the instance has (none without a GPU)",
    ),
    Knob(
        key="SAGEMAKER_TRITON_ADDITIONAL_ARGS",
        flag="{}",
        what="split on whitespace and appended; tritonserver judges them at start",
    ),
)

#: variables the entrypoint or tritonserver read that add no argument
ENVIRONMENT_KNOBS: tuple[Knob, ...] = (
    Knob(key="SAGEMAKER_MULTI_MODEL", flag=None, what="platform: 'true' on an MME"),
    Knob(
        key="SAGEMAKER_TRITON_OVERRIDE_PING_MODE",
        flag=None,
        what="the /ping mode ('live' by default in MME mode); reaches tritonserver only "
        "when SAGEMAKER_TRITON_PING_MODE is in the environment too (the script does not "
        "export it)",
    ),
    Knob(
        key="SAGEMAKER_TRITON_PING_MODE",
        flag=None,
        what="read by tritonserver: 'live' answers /ping when the server is live, anything "
        "else when it is ready",
    ),
    Knob(
        key="SAGEMAKER_TRITON_DEFAULT_MODEL_NAME",
        flag=None,
        what="single-model endpoints only: ignored on a multi-model endpoint",
    ),
)

_BY_KEY = {knob.key: knob for knob in (*KNOBS, *ENVIRONMENT_KNOBS)}
#: keys SageMaker itself sets on the container; mmelocal sets its own ports
PLATFORM_KEYS = frozenset(
    {"SAGEMAKER_MULTI_MODEL", "SAGEMAKER_BIND_TO_PORT", "SAGEMAKER_SAFE_PORT_RANGE"}
)


def _set(env: Mapping[str, str], key: str) -> str | None:
    """The value as the script's ``[ -n "$KEY" ]`` sees it (empty = unset)."""
    value = env.get(key)
    return value if value else None


def _as_split(knob: Knob, value: str) -> tuple[str, list[str]]:
    """What tritonserver receives for ``value`` once the script has split its flag on
    whitespace: the flag's own value (``""`` when a leading space cut it off: ``" 5"``
    gives ``--log-verbose=`` and ``5``) and the words left over after the flag."""
    template = (knob.flag or "{}").replace("{gpu}", "0")
    slots = template.format("\0").split()
    index = next(i for i, word in enumerate(slots) if "\0" in word)
    prefix = slots[index].split("\0")[0]
    words = template.format(value).split()
    seen = words[index][len(prefix) :] if index < len(words) else ""
    return seen, words[len(slots) :]


def entrypoint_args(env: Mapping[str, str], *, gpu_count: int = 0) -> list[str]:
    """The argv after ``tritonserver`` that the entrypoint runs in MME mode for ``env``.

    ``gpu_count`` is what ``nvidia-smi -L | wc -l`` counts on the instance (0 without a
    GPU), the number of ``--model-load-gpu-limit`` flags. Values are not checked here
    (see :func:`check_sagemaker_env`): the result is what the script would run.
    """
    if gpu_count < 0:
        raise UserInputError(f"gpu_count must be >= 0, got {gpu_count}")
    words = [f"--model-repository={MME_MODEL_REPOSITORY}"]
    for knob in KNOBS:
        value = _set(env, knob.key) or knob.default
        if value is None or knob.flag is None:
            continue
        if "{gpu}" in knob.flag:
            for gpu in range(gpu_count):
                words.append(knob.flag.replace("{gpu}", str(gpu)).format(value))
        else:
            words.append(knob.flag.format(value))
    # the script expands $SAGEMAKER_ARGS unquoted: bash splits it on whitespace
    return [*FIXED_ARGS, *" ".join(words).split()]


def entrypoint_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment tritonserver sees: the model's, plus what the script changes.

    The script assigns ``SAGEMAKER_TRITON_PING_MODE`` (the override, else ``live`` in MME
    mode) without exporting it: the assignment reaches tritonserver only when the variable
    was already in the environment. ``SAGEMAKER_MULTI_MODEL`` is ``true`` (the platform's).
    """
    out = {k: v for k, v in env.items()}
    out["SAGEMAKER_MULTI_MODEL"] = "true"
    if "SAGEMAKER_TRITON_PING_MODE" in env:
        out["SAGEMAKER_TRITON_PING_MODE"] = (
            _set(env, "SAGEMAKER_TRITON_OVERRIDE_PING_MODE") or "live"
        )
    return out


def model_namespacing(env: Mapping[str, str]) -> bool:
    """Whether the entrypoint's tritonserver runs with model namespacing for ``env``
    (True unless ``SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING`` is a false value)."""
    key = "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING"
    value = _set(env, key) or "true"
    try:
        return _bool(_as_split(_BY_KEY[key], value)[0])
    except ValueError as exc:
        raise UserInputError(_refusal(key, value, exc, flag="--model-namespacing")) from None


def check_sagemaker_env(env: Mapping[str, str]) -> list[str]:
    """Refuse what would stop tritonserver from starting; return warnings for the rest.

    Raises UserInputError naming the variable and tritonserver's own message for a value
    it would refuse (``--log-verbose=loud``); returns one warning per ``SAGEMAKER_TRITON_*``
    key the entrypoint does not read, per platform key (SageMaker sets those itself) and
    per key that does nothing on a multi-model endpoint.
    """
    warnings: list[str] = []
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise UserInputError(f"environment keys and values must be strings, got {key!r}")
        knob = _BY_KEY.get(key)
        if knob is None:
            if key.startswith(PREFIX):
                warnings.append(
                    f"{key} is not read by SageMaker's Triton entrypoint ({ENTRYPOINT_SOURCE}): "
                    f"it has no effect; the variables it reads are {', '.join(known_keys())}"
                )
            continue
        if key in PLATFORM_KEYS:
            warnings.append(
                f"{key} is set by SageMaker itself on the container; mmelocal sets its own "
                "ports and ignores this value"
            )
            continue
        if key == "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME":
            warnings.append(f"{key}: {knob.what}")
            continue
        if not value or knob.flag in (None, "{}"):
            continue
        seen, extra = _as_split(knob, value)  # tritonserver parses the flag, then the rest
        try:
            knob.check(seen)
        except ValueError as exc:
            flag = (knob.flag or "").split("=")[0].split(" ")[0]
            raise UserInputError(_refusal(key, value, exc, flag=flag)) from None
        if extra:
            raise UserInputError(
                _refusal(key, value, ValueError(f"Unexpected argument: {extra[0]}"))
                + " (the entrypoint splits values on whitespace)"
            )
    return warnings


def _refusal(key: str, value: str, exc: ValueError, *, flag: str = "") -> str:
    bad = f'Bad option: "{flag}". ' if flag else ""
    return (
        f"{key}={value!r}: tritonserver would refuse to start on SageMaker with it "
        f"({bad}{exc}); fix or remove the value"
    )


def knob_value(key: str, value: str) -> int:
    """The number tritonserver reads from a numeric knob's ``value`` (already checked)."""
    knob = _BY_KEY[key]
    return int(knob.check(_as_split(knob, value)[0]))  # type: ignore[call-overload]


def knob_default(key: str) -> str | None:
    """The value the entrypoint passes for ``key`` when it is unset (None: no argument)."""
    return _BY_KEY[key].default


def knob_default_number(key: str) -> int:
    """The number a numeric knob's default gives tritonserver (KeyError: no default)."""
    default = knob_default(key)
    if default is None:
        raise KeyError(key)
    return knob_value(key, default)


def flag_enabled(args: list[str], flag: str) -> bool:
    """Whether the last ``flag=VALUE`` (or ``flag VALUE``) in ``args`` is a true value."""
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(args):
            value = args[i + 1]
    try:
        return value is not None and _bool(value)
    except ValueError:
        return False


def known_keys() -> list[str]:
    """Every variable the entrypoint (or tritonserver) reads, platform keys excluded."""
    return [k for k in _BY_KEY if k not in PLATFORM_KEYS]


def format_command(args: list[str]) -> str:
    """``tritonserver ARGS`` as one shell line (for logs and docs)."""
    return shlex.join(["tritonserver", *args])


__all__ = [
    "ENTRYPOINT_SOURCE",
    "ENVIRONMENT_KNOBS",
    "FIXED_ARGS",
    "KNOBS",
    "MIN_PYTHON_SHM_BYTES",
    "MME_MODEL_REPOSITORY",
    "PLATFORM_KEYS",
    "Knob",
    "check_sagemaker_env",
    "entrypoint_args",
    "entrypoint_environment",
    "flag_enabled",
    "format_command",
    "knob_default",
    "knob_default_number",
    "knob_value",
    "known_keys",
    "model_namespacing",
]
