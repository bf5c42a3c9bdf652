"""make -> replay -> simulate -> size through the CLI against a real ``mmelocal serve``
(tiny Python-backend copies), and replay's refusals. One emulator serves the module."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from mmelocal.cli.main import cli
from mmelocal.emulator.metrics import parse_prometheus
from mmelocal.errors import ReplayAbortedError, UserInputError
from mmelocal.testing.tiny_model import CONFIG, request_json, write_tarball
from mmelocal.traffic.compare import agreement, config_from_replay
from mmelocal.traffic.replay import ReplayOptions, replay, shard_schedule
from mmelocal.traffic.results import TrafficResult
from mmelocal.traffic.simulate import simulate
from mmelocal.traffic.trace import Trace, read_trace

pytestmark = pytest.mark.triton

BODY = json.dumps(request_json(np.ones((1, 4), dtype=np.float32))).encode()


class Served:
    def __init__(self, url: str, store: Path, tarball: Path) -> None:
        self.url, self.store, self.tarball = url, store, tarball

    def state(self) -> dict[str, Any]:
        """GET /emulator/state."""
        with urllib.request.urlopen(self.url + "/emulator/state", timeout=30) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    root = tmp_path_factory.mktemp("traffic")
    (root / "store").mkdir()
    tarball = write_tarball(root / "tiny.tar.gz")
    config = EmulatorConfig(
        store=str(root / "store"), cache_dir=root / "cache", memory_budget_bytes=2 * 1024**3
    )
    with EmulatorServer(config) as server:
        yield Served(server.url, root / "store", tarball)


def _callers_in_doubt(trace: Trace, shortest_s: float, longest_s: float) -> int:
    """Requests that find their model loading in one run and loaded in the other, when
    each run's loads take between ``shortest_s`` and ``longest_s``: loads run one at a
    time in order of first call, so the k-th ends between the ends the recurrence
    ``end = max(first call, previous end) + duration`` gives with every duration the
    shortest and with every duration the longest."""
    times, ids = trace.times_s, trace.model_ids
    early = late = 0.0
    doubt = 0
    for model in dict.fromkeys(ids.tolist()):  # in order of first call
        own = times[ids == model]
        early = max(float(own[0]), early) + shortest_s
        late = max(float(own[0]), late) + longest_s
        doubt += int(((own >= early) & (own <= late)).sum())
    return doubt


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_make_replay_simulate_size(served: Served, tmp_path: Path) -> None:
    trace_path, payload = tmp_path / "t.csv", tmp_path / "body.json"
    payload.write_bytes(BODY)
    _run(
        "traffic",
        "make",
        "--models",
        "3",
        "--rate",
        "8",
        "--duration",
        "4",
        "--zipf",
        "1.2",
        "--seed",
        "1",
        "--out",
        str(trace_path),
        "--store",
        str(served.store),
        "--tarball",
        str(served.tarball),
    )
    trace = read_trace(trace_path)
    loads_before = served.state()["event_counts"]["load"]
    _run(
        "traffic",
        "replay",
        str(trace_path),
        "--url",
        served.url,
        "--payload",
        str(payload),
        "--json",
        str(tmp_path / "r.json"),
        "--html",
        str(tmp_path / "r.html"),
    )
    replayed = TrafficResult.read_json(tmp_path / "r.json")
    data = replayed.data
    for key in (
        "requests",
        "errors",
        "hit_ratio",
        "cold_starts",
        "max_loaded",
        "cold_load_s_p50",
        "latency_ms",
    ):
        assert key in data
    assert data["requests"] == len(trace) and data["errors"] == 0
    # the replay's own record of every load equals the emulator's count
    loads = served.state()["event_counts"]["load"] - loads_before
    assert data["loads"] == loads == len(data["cold_load_s"]) == len(set(trace.model_ids.tolist()))
    assert data["cold_starts"] >= loads  # each load had at least the caller that asked for it
    assert data["max_loaded"] == loads  # the budget holds them all: nothing evicted
    # the caller that asked for the first load waited that whole load
    assert data["latency_ms"]["cold"]["p99"] >= 0.5 * min(data["cold_load_s"]) * 1e3
    assert "<img" in (tmp_path / "r.html").read_text()

    # the small validation: simulated with what the replay measured
    simulated = simulate(trace, config_from_replay(replayed))
    agree = agreement(replayed, simulated)
    assert simulated["loads"] == loads
    # with every model fitting, only the callers during the first loads miss; the load
    # queue decides how many. The simulation draws its load times from the replay's, so the
    # two may differ by the callers that arrive while one run's load is done and the
    # other's is not, plus one request per load at the boundary
    samples = data.get("load_cycle_s") or data["cold_load_s"]
    margin = loads + _callers_in_doubt(trace, min(samples), max(samples))
    assert abs(agree.cold_starts_simulated - agree.cold_starts_replayed) <= margin, margin

    out = _run(
        "traffic",
        "simulate",
        str(trace_path),
        "--models-per-instance",
        str(data["max_loaded"]),
        "--load-seconds",
        str(tmp_path / "r.json"),
        "--from-replay",
        str(tmp_path / "r.json"),
        "--instance-type",
        "ml.g5.xlarge",
        "--json",
        str(tmp_path / "s.json"),
    )
    assert "hit ratio" in out
    sim = json.loads((tmp_path / "s.json").read_text())
    assert sim["cold_starts"] == simulated["cold_starts"]  # the CLI runs the same simulation
    # the replay says where it measured; mmelocal serve without a GPU gives CPU figures,
    # which simulate labels so beside a GPU instance type
    on_gpu = all(i["probe_kind"] == "gpu" for i in served.state()["instances"])
    assert data["measured_on"] == ("gpu" if on_gpu else "cpu")
    assert data["measured_where"].startswith("mmelocal serve on this machine")
    if not on_gpu:
        assert sim["load_seconds_source"].startswith("CPU figure, not a GPU one")
        assert "CPU figures" in " ".join(sim["notes"])
    out = _run(
        "traffic",
        "size",
        str(trace_path),
        "--slo-p99-ms",
        "100000",
        "--instance-type",
        "ml.g5.xlarge",
        "--models-per-instance",
        "3",
        "--json",
        str(tmp_path / "z.json"),
    )
    best = json.loads((tmp_path / "z.json").read_text())["best"]
    assert best["instance_type"] == "ml.g5.xlarge" and best["count"] == 1
    assert best["latency_source"] == "needs a measurement"  # no GPU service time was given


def test_missing_target_fails_before_sending(served: Served) -> None:
    trace = Trace(
        times_s=np.array([0.0, 0.1]),
        model_ids=np.array([0, 1], dtype=np.int32),
        models=("model-0.tar.gz", "absent.tar.gz"),
    )
    (served.store / "model-0.tar.gz").unlink(missing_ok=True)
    (served.store / "model-0.tar.gz").hardlink_to(served.tarball)
    invocations = served.state()["metrics"]["Invocations"]
    with pytest.raises(UserInputError, match=r"lacks 1 TargetModel.*'absent.tar.gz' \(trace row 3"):
        replay(trace, body=BODY, url=served.url)
    assert served.state()["metrics"]["Invocations"] == invocations  # nothing was sent


def test_in_flight_cap_fails_and_rate_check(served: Served) -> None:
    (served.store / "cap.tar.gz").unlink(missing_ok=True)
    (served.store / "cap.tar.gz").hardlink_to(served.tarball)
    # a cold model: the first call waits for its load, so the second finds it in flight
    trace = Trace(
        times_s=np.array([0.0, 0.01, 0.02]),
        model_ids=np.zeros(3, dtype=np.int32),
        models=("cap.tar.gz",),
    )
    with pytest.raises(ReplayAbortedError, match="--max-in-flight cap"):
        replay(trace, body=BODY, url=served.url, options=ReplayOptions(max_in_flight=1))
    busy = Trace(
        times_s=np.linspace(0, 0.5, 2000),
        model_ids=np.zeros(2000, dtype=np.int32),
        models=("cap.tar.gz",),
    )
    with pytest.raises(UserInputError, match="peaks at 2,000 requests/s"):
        replay(busy, body=BODY, url=served.url, options=ReplayOptions(max_rate_rps=1000))


def test_replay_through_boto3_says_the_split_is_inferred(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    (served.store / "boto.tar.gz").unlink(missing_ok=True)
    (served.store / "boto.tar.gz").hardlink_to(served.tarball)
    trace = Trace(
        times_s=np.array([0.0, 0.2]), model_ids=np.zeros(2, dtype=np.int32), models=("boto.tar.gz",)
    )
    result = replay(
        trace, body=BODY, endpoint_name="local", endpoint_url=served.url, region="us-east-1"
    )
    assert result["requests"] == 2 and result["answered"] == 2
    # the emulator is no CloudWatch: the ratio is unknown, and the report says why
    assert result["hit_ratio"] is None and result["cold_starts"] is None
    assert any("INFERRED" in n and "could not read CloudWatch" in n for n in result["notes"])


def test_replay_over_the_load_tests_locust_workers(served: Served) -> None:
    names = ("w0.tar.gz", "w2.tar.gz")  # their name hashes put them on different workers
    assert (
        len(
            {
                shard.tolist()[0]
                for shard in shard_schedule(
                    Trace(
                        times_s=np.zeros(2), model_ids=np.arange(2, dtype=np.int32), models=names
                    ),
                    2,
                )
            }
        )
        == 2
    )
    for name in names:
        (served.store / name).unlink(missing_ok=True)
        (served.store / name).hardlink_to(served.tarball)
    warm = Trace(times_s=np.zeros(1), model_ids=np.zeros(1, dtype=np.int32), models=names)
    replay(warm, body=BODY, url=served.url)  # w0 is loaded (and stays: the budget holds all)
    times = np.arange(24) * 0.05
    trace = Trace(times_s=times, model_ids=(np.arange(24) % 2).astype(np.int32), models=names)
    loads_before = served.state()["event_counts"]["load"]
    heard: list[tuple[int, int, int]] = []
    result = replay(
        trace,
        body=BODY,
        url=served.url,
        workers=2,
        progress=lambda answered, total, sent: heard.append((answered, total, sent)),
    )
    assert result["requests"] == result["answered"] == 24 and result["errors"] == 0
    # the workers' answers, beside the requests due (sent): never more answered than sent
    assert heard[-1] == (24, 24, 24) and all(a <= s <= 24 for a, _, s in heard)
    assert result["loads"] == served.state()["event_counts"]["load"] - loads_before == 1
    # every request is classified from the worker's answer: w0's 12 were hits, w2's first a miss
    assert result["hit_ratio"] >= 12 / 24 and result["cold_starts"] >= 1
    assert any("2 Locust worker" in n for n in result["notes"])


def _python_model_tarball(path: Path, model_py: str) -> None:
    """A tarball of the tiny model's config with ``model_py`` as its code."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (
            ("m/config.pbtxt", CONFIG.format(name="m", scale=2.0).encode()),
            ("m/1/model.py", model_py.encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _model_cache_hit(url: str) -> tuple[float, float]:
    """The emulator's ``ModelCacheHit`` sample count and sum (``/metrics``)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    values = {k.partition("{")[0]: v for k, v in parse_prometheus(text).items()}
    return values["ModelCacheHit_count"], values["ModelCacheHit_sum"]


def test_a_replay_counts_model_cache_hit_as_the_emulator_does(served: Served) -> None:
    """The replay's hit ratio is ``ModelCacheHit``'s average as the emulator (the platform's
    reference) counts it: one sample per call that reached its model, failed calls too (a
    failed cold load 0, a loaded model's failed call 1); a call refused before it reaches a
    model (a body over the limit) is none. The replay counted the answered calls only."""
    for name, model_py in (
        ("fails-to-load.tar.gz", "raise RuntimeError('this model fails to import')\n"),
        (
            "fails-to-run.tar.gz",
            "class TritonPythonModel:\n    def execute(self, requests):\n"
            "        raise RuntimeError('this model fails to run')\n",
        ),
    ):
        _python_model_tarball(served.store / name, model_py)
    (served.store / "runs.tar.gz").unlink(missing_ok=True)
    (served.store / "runs.tar.gz").hardlink_to(served.tarball)
    models = ("runs.tar.gz", "fails-to-load.tar.gz", "fails-to-run.tar.gz")
    # each model called twice: cold (its loads one at a time), then once loaded, in a
    # second replay that starts when the first has its answers (no pause sized for the
    # loads); the model that failed to load is cold again
    each_once = Trace(times_s=np.zeros(3), model_ids=np.arange(3, dtype=np.int32), models=models)
    for _cold_then_warm in range(2):
        count, total = _model_cache_hit(served.url)
        result = replay(each_once, body=BODY, url=served.url).data
        after_count, after_total = _model_cache_hit(served.url)
        assert result["errors"] == 2 and result["answered"] == 1
        samples, hits = after_count - count, after_total - total
        assert samples == 3  # every call reached its model
        assert result["hit_ratio"] == pytest.approx(hits / samples)
        assert result["cold_starts"] == samples - hits
    # the same over the load tests' Locust workers (the models that loaded are warm now:
    # the calls all at once)
    at_once = Trace(
        times_s=np.zeros(6), model_ids=np.array([0, 1, 2, 0, 1, 2], dtype=np.int32), models=models
    )
    count, total = _model_cache_hit(served.url)
    spread = replay(at_once, body=BODY, url=served.url, workers=2).data
    after_count, after_total = _model_cache_hit(served.url)
    samples, hits = after_count - count, after_total - total
    assert samples == 6 and spread["errors"] == 4
    assert spread["hit_ratio"] == pytest.approx(hits / samples)
    assert spread["cold_starts"] == samples - hits
    # a body over InvokeEndpoint's limit is refused before any model: no sample
    big = b"x" * (served_limit() + 1)
    before = _model_cache_hit(served.url)
    refused = replay(at_once, body=big, url=served.url).data
    assert _model_cache_hit(served.url) == before
    assert refused["hit_ratio"] is None and refused["cold_starts"] == 0


def served_limit() -> int:
    """The emulator's InvokeEndpoint body limit (its default: the service's)."""
    from mmelocal.facts.sagemaker import MAX_PAYLOAD_BYTES

    return MAX_PAYLOAD_BYTES


def test_a_replay_whose_callers_time_out_agrees_with_its_simulation(tmp_path: Path) -> None:
    """A caller that waits past the load-wait timeout gets ModelNotReadyException: a
    ``ModelCacheHit`` sample of 0 on the emulator, and in the simulation of the same
    trace with the same timeout; the two agree (both counted answered calls only: 1.0)."""
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer

    store = tmp_path / "store"
    store.mkdir()
    write_tarball(store / "slow.tar.gz")
    wait_s = 0.05  # far shorter than a Python-backend load (a stub process starts)
    trace = Trace(
        times_s=np.array([0.0, 6.0, 7.0]),
        model_ids=np.zeros(3, dtype=np.int32),
        models=("slow.tar.gz",),
    )
    config = EmulatorConfig(
        store=str(store),
        cache_dir=tmp_path / "cache",
        memory_budget_bytes=2 * 1024**3,
        load_wait_timeout_s=wait_s,
    )
    with EmulatorServer(config) as server:
        count, total = _model_cache_hit(server.url)
        replayed = replay(trace, body=BODY, url=server.url)
        after = _model_cache_hit(server.url)
    assert replayed["errors_by_class"] == {"ModelNotReadyException": 1}
    assert after == (count + 3, total + 2)
    assert (replayed["hit_ratio"], replayed["cold_starts"]) == (pytest.approx(2 / 3), 1)
    # the emulator's wait is read from its state page, not given by hand
    assert replayed["emulator_options"]["load_wait_timeout_s"] == wait_s
    simulated = simulate(trace, config_from_replay(replayed))
    # one name per error class, replayed over HTTP or simulated: the two compare
    assert simulated["errors_by_class"] == replayed["errors_by_class"]
    agree = agreement(replayed, simulated)
    assert agree.hit_ratio_points == pytest.approx(0.0) and agree.cold_starts_relative == 0.0


def test_the_load_limit_counts_the_wait_for_the_loads_before_it(tmp_path: Path) -> None:
    """The platform's limit on a cold load ("the model continues to download and load into
    the inference container for up to 360 seconds", the MME guide) runs from the load's
    start: the emulator's deadline covers the download, the wait for the loads before it
    (one load at a time per instance) and Triton's load together (``loading.py``,
    ``load_deadline_s``). Two slow models called at once on one instance, under a limit
    that one load fits and two do not: the second fails at the limit, in the emulator and
    in the simulation of the same trace with that limit. The simulation counted the limit
    from the load's turn, so the second load served."""
    from mmelocal.emulator.emulator import EmulatorConfig
    from mmelocal.emulator.server import EmulatorServer
    from mmelocal.testing.tiny_model import MODEL_PY

    sleep_s, limit_s = 4.0, 8.0  # one load: the sleep and a stub's start; two: past the limit
    slow_py = MODEL_PY.replace(
        "    def initialize(self, args):\n",
        f"    def initialize(self, args):\n        time.sleep({sleep_s})\n",
    )
    assert slow_py != MODEL_PY
    store = tmp_path / "store"
    store.mkdir()
    for name in ("slow-a.tar.gz", "slow-b.tar.gz"):
        _python_model_tarball(store / name, slow_py)
    # a asks first (its download ends first: it loads first), b half a second later; a
    # again at 10 s, past b's limit (8.5 s), by when a is loaded (its load fits the limit)
    trace = Trace(
        times_s=np.array([0.0, 0.5, 10.0]),
        model_ids=np.array([0, 1, 0], dtype=np.int32),
        models=("slow-a.tar.gz", "slow-b.tar.gz"),
    )
    config = EmulatorConfig(
        store=str(store),
        cache_dir=tmp_path / "cache",
        memory_budget_bytes=2 * 1024**3,
        load_timeout_s=limit_s,
    )
    with EmulatorServer(config) as server:
        replayed = replay(trace, body=BODY, url=server.url)
        with urllib.request.urlopen(server.url + "/emulator/state", timeout=30) as resp:
            events = json.loads(resp.read())["events"]
    # the failed load is in the event log (the replay reads it: its caller is not credited
    # to a later load of b), and a's load too
    assert [(e["kind"], e["target"]) for e in events if e["kind"] in ("load", "error")] == [
        ("load", "slow-a.tar.gz"),
        ("error", "slow-b.tar.gz"),
    ], events
    assert "within 8s" in next(e["reason"] for e in events if e["kind"] == "error")
    # b's load waited for a's and failed at the limit; a is warm at 10 s
    assert replayed["errors_by_class"] == {"ModelError": 1}, replayed["errors_by_class"]
    assert replayed["hit_ratio"] == pytest.approx(1 / 3)
    assert len(replayed["load_cycle_s"]) == 1 and replayed["load_cycle_s"][0] < limit_s
    # the replay saw one model ready at most (b never loaded), but the budget holds both:
    # the simulation takes the limit and the memory from the emulator's state page (b, never
    # loaded, at the mean footprint measured)
    assert replayed["max_loaded_per_instance"] == 1
    sim_config = config_from_replay(replayed)
    assert sim_config.load_limit_s == limit_s
    assert sim_config.models_per_instance is None and sim_config.default_footprint_bytes
    assert sim_config.memory_limit_bytes is not None
    assert sim_config.memory_limit_bytes >= 2 * sim_config.default_footprint_bytes
    simulated = simulate(trace, sim_config)
    assert simulated["errors_by_class"] == replayed["errors_by_class"]
    assert simulated["failed_loads"] == 1
    agree = agreement(replayed, simulated)
    assert agree.hit_ratio_points == pytest.approx(0.0) and agree.cold_starts_relative == 0.0
