"""Figures taken from a replay's JSON for ``simulate`` and ``size`` (cold-load times, the
service time), labelled with where the replay measured: CPU figures are never shown as GPU
ones."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmelocal.errors import UserInputError
from mmelocal.traffic.simulate import LoadTimes

_CPU_FIGURE = "CPU figure"


def _replay_source(what: str, path: object, data: dict[str, Any]) -> str:
    """How a figure taken from a replay's JSON is labelled: a replay of ``mmelocal serve``
    without a GPU measured CPU figures, never shown as GPU ones."""
    where = data.get("measured_where")
    on = data.get("measured_on")
    if on == "gpu":
        return f"measured on a GPU ({what} of {path}: {where})"
    if on == "endpoint":
        return f"measured ({what} of {path}: {where})"
    if on == "cpu":
        return f"{_CPU_FIGURE}, not a GPU one ({what} of {path}: {where})"
    return f"measured where unknown, not known to be a GPU figure ({what} of {path}" + (
        f": {where})" if where else ")"
    )


#: what a file given for a replay's figures must be
_REPLAY_FILE = "the --json of `mmelocal traffic replay`"


def replay_data(path: Path | str) -> dict[str, Any]:
    """A replay's result document (``--from-replay``, ``--load-seconds FILE``), whatever
    the file's name; a :class:`UserInputError` for a file that is none: no JSON, no traffic
    result, or a simulation's (its cold loads and latencies are the figures it was given,
    not measurements; it records ``load_seconds_source``, a replay never does)."""
    from mmelocal.traffic.results import TrafficResult

    if not Path(path).is_file():
        raise UserInputError(f"{path}: no such file (give {_REPLAY_FILE})")
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))  # read once
    except OSError as exc:
        raise UserInputError(f"cannot read {path}: {exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserInputError(
            f"{path} is not JSON: give {_REPLAY_FILE}, or load times of your own as "
            "seconds on the command line (2.5, or a list: 1.2,3.4)"
        ) from None
    data = TrafficResult.from_document(document, path).data
    if "load_seconds_source" in data:
        raise UserInputError(
            f"{path} is a simulation's result (`traffic simulate --json`): its cold loads "
            f"and latencies are the figures it was given, not measurements; give {_REPLAY_FILE}"
        )
    return data


@dataclass(frozen=True, kw_only=True)
class Replay:
    """A replay's result file read once (:func:`read_replay`): every figure a command takes
    from it comes from this one reading, so a file replaced meanwhile cannot mix two."""

    path: Path | str
    data: dict[str, Any]


def read_replay(path: Path | str) -> Replay:
    """The replay's result document at ``path`` (:func:`replay_data`), with its path."""
    return Replay(path=path, data=replay_data(path))


def replay_load_times(replay: Replay) -> LoadTimes:
    """The load times a replay's JSON recorded: how long each load held its instance
    (``load_cycle_s``, what :func:`~mmelocal.traffic.compare.config_from_replay` simulates
    with), else the loads themselves (``cold_load_s``, a replay of another server),
    labelled with where the replay measured."""
    path, data = replay.path, replay.data
    samples = tuple(float(x) for x in data.get("load_cycle_s") or data.get("cold_load_s", []))
    if not samples:
        raise UserInputError(
            f"{path} holds no cold-load times (the replay recorded no load): give --load-seconds"
        )
    return LoadTimes(samples_s=samples, source=_replay_source("load times", path, data))


def _load_times(value: str | None, *, replay: Replay | None = None) -> Any:
    """``--load-seconds``: a replay's result file, read by what it holds whatever its name
    (:func:`replay_data`), else seconds (``2.5``) or a list to draw from (``1.2,3.4``). An
    existing file wins over numbers: a file called ``2.5`` is read, not taken as 2.5 s (the
    source of the times says which file). The file ``replay`` (``--from-replay``) was read
    from, by whatever name (its resolved path), is not read again: its one reading gives
    the times."""
    if value is None:
        return None
    if Path(value).is_file():
        if replay is None or Path(value).resolve() != Path(replay.path).resolve():
            replay = read_replay(value)
        return replay_load_times(replay)
    try:
        samples = tuple(float(x) for x in value.split(","))
    except ValueError:
        if value.endswith(".json"):
            # a replay's name: say that there is no such file
            return replay_load_times(read_replay(value))
        raise UserInputError(
            "--load-seconds takes seconds (2.5), a list (1.2,3.4), or a file: "
            f"{_REPLAY_FILE}; got {value!r}, neither numbers nor a file"
        ) from None
    return LoadTimes(samples_s=samples, source="given")


def _service_s(service_ms: float | None, from_replay: Replay | None) -> tuple[float | None, str]:
    if service_ms is not None and from_replay is not None:
        raise UserInputError("give --service-ms or --from-replay, not both")
    if service_ms is not None:
        if service_ms < 0:
            raise UserInputError(f"--service-ms must be >= 0, got {service_ms:g}")
        return service_ms / 1e3, "given"
    if from_replay is not None:
        warm = from_replay.data["latency_ms"]["warm"]["p50"]
        if warm is None:
            raise UserInputError(
                f"{from_replay.path}: the replay has no warm request to take a service time from"
            )
        return warm / 1e3, _replay_source("warm p50", from_replay.path, from_replay.data)
    return None, "none"


def _replayed_endpoint(
    from_replay: Replay, *, capacity_given: bool, given: set[str]
) -> tuple[dict[str, Any], str | None]:
    """What ``--from-replay`` sets beside the service time: the replayed emulator's waits
    and limits and hot-model threshold (its state page's options), its instance count and,
    when no capacity option was given, its capacity per instance (its memory rule, or the
    most models one instance held), as :class:`SimConfig` fields, as
    :func:`~mmelocal.traffic.compare.config_from_replay` sets them; the fields in ``given``
    (options on the command line) are left out. Also how the capacity is described (None
    when it is not taken from the replay)."""
    from mmelocal.traffic.compare import emulator_options, replay_capacity

    data = from_replay.data
    fields: dict[str, Any] = dict(emulator_options(data))
    if data.get("emulator_instances"):
        fields["instances"] = int(data["emulator_instances"])
    fields = {k: v for k, v in fields.items() if k not in given}
    if capacity_given:
        return fields, None
    capacity = replay_capacity(data, int(fields.get("instances", 1)))
    fields.update(capacity)
    if "memory_limit_bytes" in capacity:
        source = (
            f"the replayed emulator's memory: {capacity['memory_limit_bytes']:,} bytes for "
            "models, each at what it measured the model holding (mean "
            f"{capacity['default_footprint_bytes']:,} bytes), {from_replay.path}"
        )
    else:
        source = f"the most models one instance held ready at once, {from_replay.path}"
    return fields, source
