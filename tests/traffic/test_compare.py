"""A simulation set up from a replay (mmelocal.traffic.compare) and the replay's record of
the emulator's loaded set, read from a real HTTP server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmelocal.errors import UserInputError
from mmelocal.traffic.compare import agreement, config_from_replay, simulate_replay
from mmelocal.traffic.results import TrafficResult
from mmelocal.traffic.simulate import simulate
from mmelocal.traffic.trace import Trace


def _replayed(**data: Any) -> TrafficResult:
    base: dict[str, Any] = {
        "hit_ratio": 0.5,
        "max_loaded": 8,
        "load_cycle_s": [2.0, 3.0],
        "latency_ms": {"warm": {"p50": 5.0}},
    }
    return TrafficResult({**base, **data})


def _four_in_turn() -> tuple[tuple[str, ...], Trace]:
    """Four models called in turn, 10 s apart, 40 calls: least recently used eviction with
    room for fewer than 4 misses every call."""
    models = ("m0", "m1", "m2", "m3")
    trace = Trace(
        times_s=np.arange(40, dtype=np.float64) * 10.0,
        model_ids=np.arange(40, dtype=np.int32) % 4,
        models=models,
    )
    return models, trace


def test_a_replays_capacity_is_per_instance() -> None:
    """Two instances held 8 models at once between them, at most 4 each: each simulated
    instance holds 4, not the fleet's 8."""
    replayed = _replayed(max_loaded_per_instance=4, emulator_instances=2)
    config = config_from_replay(replayed)
    assert (config.instances, config.models_per_instance) == (2, 4)
    assert config_from_replay(replayed, instances=3).models_per_instance == 4
    one = _replayed(max_loaded_per_instance=8, emulator_instances=1)
    assert config_from_replay(one).models_per_instance == 8


def test_a_replay_without_per_instance_figures_is_refused_for_several_instances() -> None:
    old = _replayed()  # written before the replay recorded each instance's most
    assert config_from_replay(old).models_per_instance == 8  # one instance: the fleet's
    with pytest.raises(UserInputError, match="not what one instance holds"):
        config_from_replay(old, instances=2)


def test_a_sped_up_replay_is_compared_with_the_trace_at_its_speed() -> None:
    """--speed 2 sent the second request 1 s after the first, while the first's 1.5 s load
    was still going: the replay saw two cold starts. At the trace's own pace (2 s apart)
    the second finds the model loaded: comparing with that simulation would call a correct
    simulator wrong (before: compared, 1 vs 2 cold starts)."""
    trace = Trace(
        times_s=np.asarray([0.0, 2.0]), model_ids=np.zeros(2, dtype=np.int32), models=("m",)
    )
    replayed = _replayed(
        speed=2.0,
        max_loaded_per_instance=1,
        emulator_instances=1,
        load_cycle_s=[1.5],
        hit_ratio=0.0,
        cold_starts=2,
    )
    at_its_pace = simulate(trace, config_from_replay(replayed))
    assert at_its_pace["cold_starts"] == 1
    with pytest.raises(UserInputError, match=r"--speed 2 .*simulate_replay"):
        agreement(replayed, at_its_pace)
    simulated = simulate_replay(trace, replayed)
    assert simulated["speed"] == 2.0 and simulated["cold_starts"] == 2
    agree = agreement(replayed, simulated)
    assert agree.cold_starts_simulated == agree.cold_starts_replayed == 2 and agree.holds
    # a replay at the trace's pace is compared with a plain simulation, as before
    same_pace = _replayed(**{**replayed.data, "speed": 1.0, "cold_starts": 1, "hit_ratio": 0.5})
    assert agreement(same_pace, at_its_pace).holds
    with pytest.raises(UserInputError, match="the replay sent 3 requests and this trace has 2"):
        simulate_replay(trace, _replayed(**{**replayed.data, "requests": 3}))


def test_the_emulators_memory_and_limits_come_from_its_state_page() -> None:
    """A replay of ``mmelocal serve`` records its options and memory (its state page): the
    simulation's capacity is the emulator's memory rule (the room for models, each at its
    measured footprint), and it waits and gives up as the emulator was told to, with no
    capacity given by hand."""
    state_page = {
        "emulator_options": {
            "load_wait_timeout_s": 5.0,
            "load_timeout_s": 8.0,
            "busy_wait_s": 2.0,
            "hot_rps_threshold": 7.0,
            "invoke_timeout_s": 60.0,
        },
        "memory_room_bytes": 1_000,
        "footprints_bytes": {"a": 300, "b": 200},
    }
    config = config_from_replay(
        _replayed(max_loaded_per_instance=1, emulator_instances=1, **state_page)
    )
    assert config.models_per_instance is None
    assert (config.memory_limit_bytes, dict(config.footprint_bytes)) == (
        1_000,
        {"a": 300, "b": 200},
    )
    assert config.default_footprint_bytes == 250  # a model it never loaded: their mean
    assert (config.load_wait_timeout_s, config.load_limit_s, config.busy_wait_s) == (5, 8, 2)
    assert config.hot_rps_threshold == 7.0


def test_a_model_the_emulator_measured_at_0_bytes_is_simulated_at_0_not_the_mean() -> None:
    """The emulator records 0 for a GPU model whose processes hold none of the card: the
    simulation counts it at 0, not at the other models' mean."""
    config = config_from_replay(
        _replayed(
            max_loaded_per_instance=1,
            emulator_instances=1,
            memory_room_bytes=1_000,
            footprints_bytes={"a": 300, "cpu": 0},
        )
    )
    assert dict(config.footprint_bytes) == {"a": 300, "cpu": 0}
    assert config.default_footprint_bytes == 150


def test_the_capacity_is_the_emulators_memory_not_the_most_it_once_held() -> None:
    """The emulator's capacity is memory (PSS on a CPU host): its readings move, and a
    replay may see 4 models ready at once for a moment where its memory holds 3 most of
    the time (the validation's Zipf 0.8 replay: 4 seen, room for 3 by its state page; the
    simulation held 4 all along and hit 17 points more). Four models in turn, room for 3
    at their measured footprints: least recently used eviction misses every call, as the
    emulator did (before: capacity 4, 36 hits of 40)."""
    mib = 2**20
    models, trace = _four_in_turn()
    replayed = _replayed(
        max_loaded_per_instance=4,
        emulator_instances=1,
        load_cycle_s=[1.0],
        memory_room_bytes=int(75.8 * mib),
        footprints_bytes=dict.fromkeys(models, int(20.5 * mib)),
    )
    simulated = simulate(trace, config_from_replay(replayed))
    assert simulated["max_loaded"] == 3
    assert simulated["hit_ratio"] == 0.0 and simulated["cold_starts"] == 40
    # a model twice the size takes the room of two: m0 (41 MiB) beside one other only
    big = {
        **replayed.data,
        "footprints_bytes": {**replayed.data["footprints_bytes"], "m0": 41 * mib},
    }
    two = Trace(
        times_s=np.arange(3, dtype=np.float64) * 10.0,
        model_ids=np.asarray([0, 1, 2], dtype=np.int32),
        models=models,
    )
    assert simulate(two, config_from_replay(_replayed(**big)))["max_loaded"] == 2


@pytest.mark.parametrize(("room_mib", "fits"), [(77, 3), (74, 2)])
def test_loaded_models_count_at_what_they_hold_and_a_load_at_the_most(
    room_mib: int, fits: int
) -> None:
    """The emulator plans a load with the most the model was measured at (its stub's PSS
    alone: 28 MiB for the tiny model, ``footprints_bytes``) against what the loaded
    models hold now (24 MiB each beside the others, ``held_footprints_bytes``). With 77 MiB
    of room it holds 3: 2 x 24 + 28 = 76. The validation's replays held 3 there where the
    simulation, counting every loaded model at its most, held 2 (failed before: 2 for 77).
    With 74 MiB a third load plans for 28 beside 48 and evicts: 2, though 3 x 24 = 72
    would fit."""
    mib = 2**20
    models, trace = _four_in_turn()
    replayed = _replayed(
        max_loaded_per_instance=3,
        emulator_instances=1,
        load_cycle_s=[1.0],
        memory_room_bytes=room_mib * mib,
        footprints_bytes=dict.fromkeys(models, 28 * mib),
        held_footprints_bytes=dict.fromkeys(models, 24 * mib),
    )
    assert simulate(trace, config_from_replay(replayed))["max_loaded"] == fits


def test_a_replay_without_the_emulators_memory_keeps_the_count_it_saw() -> None:
    """A replay of another server (or an older one) has no memory figures: each simulated
    instance holds the most one instance held ready at once."""
    config = config_from_replay(_replayed(max_loaded_per_instance=6, emulator_instances=1))
    assert (config.models_per_instance, config.memory_limit_bytes) == (6, None)
    with pytest.raises(UserInputError, match="saw no model loaded"):
        config_from_replay(_replayed(max_loaded_per_instance=0, emulator_instances=1))


def test_simulate_from_replay_simulates_the_replayed_emulator(tmp_path: Path) -> None:
    """``traffic simulate --from-replay`` takes what the replay recorded of the emulator's
    state page, as :func:`config_from_replay` does: its load wait (0.5 s: a caller of a 2 s
    load gets ModelNotReadyException), load limit, busy wait, hot-model threshold, its
    instances and, with no capacity option, its memory (room for one model here). Before,
    it took only the warm p50: the platform's 60 s wait (no error), and a capacity had to
    be given."""
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    trace = Trace(
        times_s=np.asarray([0.0, 10.0, 20.0, 30.0]),
        model_ids=np.asarray([0, 1, 0, 1], dtype=np.int32),
        models=("a", "b"),
    )
    replayed = _replayed(
        requests=4,
        max_loaded_per_instance=2,
        emulator_instances=1,
        load_cycle_s=[2.0],
        emulator_options={
            "load_wait_timeout_s": 0.5,
            "load_timeout_s": 300.0,
            "busy_wait_s": 3.0,
            "hot_rps_threshold": 9.0,
        },
        memory_room_bytes=150,
        footprints_bytes={"a": 100, "b": 100},
    )
    replay_json = replayed.write_json(tmp_path / "r.json")
    path = write_trace(trace, tmp_path / "t.csv")
    args = ["traffic", "simulate", str(path), "--load-seconds", str(replay_json)]
    args += ["--from-replay", str(replay_json), "--json", str(tmp_path / "s.json")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "s.json").read_text())
    expected = simulate(trace, config_from_replay(replayed)).data
    assert data["errors_by_class"] == expected["errors_by_class"]
    assert data["errors_by_class"] == {"ModelNotReadyException": 4}
    assert (data["memory_limit_bytes"], data["models_per_instance"]) == (150, None)
    assert data["max_loaded"] == expected["max_loaded"] == 1
    assert data["load_limit_s"] == 300.0
    # an option given on the command line wins over the replay's
    given = CliRunner().invoke(cli, [*args, "--models-per-instance", "2"])
    assert given.exit_code == 0, given.output
    assert json.loads((tmp_path / "s.json").read_text())["models_per_instance"] == 2
    # the replay's memory room is under its emulator's threshold: --threshold has nothing
    # to apply to without a footprint (it was dropped without a word)
    threshold = CliRunner().invoke(cli, [*args, "--threshold", "0.5"])
    assert threshold.exit_code == 2, threshold.output
    assert "with --from-replay alone the capacity is the replayed emulator's" in " ".join(
        threshold.output.split()
    )


def test_simulate_from_replay_takes_the_replays_load_times(tmp_path: Path) -> None:
    """A replay records how long each load held its instance (``load_cycle_s``), what
    :func:`config_from_replay` simulates with; ``traffic simulate --from-replay`` took the
    replay's waits and capacity but its loads lasted --load-seconds' default, 1 s, unless
    the replay's file was passed there too. Here 2 s loads outlast the 1.5 s load wait
    (ModelNotReadyException), 1 s ones do not. --load-seconds given still wins."""
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    trace = Trace(
        times_s=np.asarray([0.0, 10.0]), model_ids=np.asarray([0, 1], dtype=np.int32),
        models=("a", "b"),
    )  # fmt: skip
    replayed = _replayed(
        requests=2, max_loaded_per_instance=2, emulator_instances=1, load_cycle_s=[2.0],
        emulator_options={"load_wait_timeout_s": 1.5},
    )  # fmt: skip
    replay = replayed.write_json(tmp_path / "replay.out")  # any name: not only *.json
    path = write_trace(trace, tmp_path / "t.csv")
    args = ["traffic", "simulate", str(path), "--from-replay", str(replay)]
    args += ["--json", str(tmp_path / "s.json")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "s.json").read_text())
    expected = simulate(trace, config_from_replay(replayed)).data
    assert data["cold_load_s"] == expected["cold_load_s"] == [2.0, 2.0]
    assert data["errors_by_class"] == {"ModelNotReadyException": 2}
    assert (
        "load times of" in data["load_seconds_source"]
        and str(replay) in data["load_seconds_source"]
    )
    given = CliRunner().invoke(cli, [*args, "--load-seconds", "1"])
    assert given.exit_code == 0, given.output
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["cold_load_s"] == [1.0, 1.0] and data["load_seconds_source"] == "given"
    assert data["errors_by_class"] == {}
    # the replay's load cycles hold a first use's download: not added twice
    twice = CliRunner().invoke(cli, [*args, "--download-seconds", "5"])
    assert twice.exit_code == 2 and "give --load-seconds too" in twice.output


def test_load_seconds_reads_a_replay_by_its_content_and_refuses_other_files(
    tmp_path: Path,
) -> None:
    """--load-seconds read a replay only from a name ending in .json: the replay as
    replay.out (which --from-replay reads) was refused as "not seconds", and a simulation's
    --json (also *.json; its cold loads are the draws it was given) was read as measured
    load times. A file is now read by what it holds: a replay whatever its name; a
    simulation's result, or a file that is no JSON, is refused saying which file is wanted
    (--from-replay refuses a simulation's result too)."""
    from mmelocal.cli.traffic._measured import _load_times, read_replay
    from mmelocal.traffic.simulate import LoadTimes, SimConfig

    replay = _replayed(load_cycle_s=[2.0]).write_json(tmp_path / "replay.out")
    assert _load_times(str(replay)).samples_s == (2.0,)
    assert _load_times("1.5,2").samples_s == (1.5, 2.0)
    trace = Trace(times_s=np.asarray([0.0]), model_ids=np.asarray([0]), models=("a",))
    config = SimConfig(models_per_instance=1, load=LoadTimes(samples_s=(7.0,)))
    simulated = simulate(trace, config).write_json(tmp_path / "sim.json")
    for read in (lambda: _load_times(str(simulated)), lambda: read_replay(simulated)):
        with pytest.raises(UserInputError, match=r"sim\.json is a simulation's result.*replay"):
            read()
    numbers = tmp_path / "loads.csv"
    numbers.write_text("1.2\n3.4\n")
    with pytest.raises(UserInputError, match=r"loads\.csv is not JSON.*replay.*1\.2,3\.4"):
        _load_times(str(numbers))
    with pytest.raises(UserInputError, match=r"missing\.json: no such file"):
        _load_times(str(tmp_path / "missing.json"))


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files ``Path.read_text`` reads from now on, in order."""
    reads: list[Path] = []
    read_text = Path.read_text

    def counted(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    return reads


def test_load_seconds_reads_an_existing_file_once_whatever_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay saved as ``2.5`` was taken as 2.5 s (numbers won over the file the user
    named), and a replay's file was read twice (once to see it is JSON, once for the
    result). An existing file wins, read once; numbers that name no file are seconds."""
    from mmelocal.cli.traffic._measured import _load_times

    replay = _replayed(load_cycle_s=[7.0]).write_json(tmp_path / "2.5")
    reads = count_reads(monkeypatch)
    assert _load_times(str(replay)).samples_s == (7.0,)
    assert reads == [replay]
    monkeypatch.chdir(tmp_path)
    loads = _load_times("2.5")
    assert loads.samples_s == (7.0,) and "2.5" in loads.source and loads.source != "given"
    assert _load_times("1.5").samples_s == (1.5,)  # no file of that name: seconds


def test_simulate_from_replay_reads_the_replay_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``traffic simulate --from-replay`` read the replay's file three times (its endpoint,
    its warm p50, its load times): a file replaced between the reads gave one simulation
    figures of two replays. It is read once and every figure comes from that reading."""
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    trace = Trace(times_s=np.asarray([0.0]), model_ids=np.asarray([0]), models=("a",))
    replay = _replayed(max_loaded_per_instance=1, emulator_instances=1).write_json(
        tmp_path / "replay.json"
    )
    path = write_trace(trace, tmp_path / "t.csv")
    reads = count_reads(monkeypatch)
    args = ["traffic", "simulate", str(path), "--from-replay", str(replay)]
    result = CliRunner().invoke(cli, [*args, "--json", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    assert reads.count(replay) == 1


def test_simulate_reads_a_replay_given_for_both_from_replay_and_load_seconds_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--from-replay FILE --load-seconds FILE`` (one file, here named by its absolute and
    by its relative path) read and parsed the file twice, so a file replaced between the
    reads mixed two replays. One reading serves both: the load times are the replay's
    ``load_cycle_s``."""
    from click.testing import CliRunner

    from mmelocal.cli.main import cli
    from mmelocal.traffic.trace import write_trace

    trace = Trace(times_s=np.asarray([0.0]), model_ids=np.asarray([0]), models=("a",))
    replay = _replayed(
        max_loaded_per_instance=1, emulator_instances=1, load_cycle_s=[4.0]
    ).write_json(tmp_path / "replay.json")
    path = write_trace(trace, tmp_path / "t.csv")
    reads = count_reads(monkeypatch)
    out = tmp_path / "s.json"
    args = ["traffic", "simulate", str(path), "--from-replay", str(replay)]
    monkeypatch.chdir(tmp_path)  # the same file by its relative name
    result = CliRunner().invoke(cli, [*args, "--load-seconds", "replay.json", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert [p for p in reads if p.name == "replay.json"] == [replay]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert "replay.json" in data["load_seconds_source"]
    assert data["cold_load_s"] == [4.0]
