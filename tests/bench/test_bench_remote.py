"""The benchmark procedure on a deployed endpoint, end to end, on the local AWS.

The endpoint is deployed with ``mmelocal deploy``'s functions to
:class:`mmelocal.localaws.LocalAws` (S3 and SageMaker on one port, a real Triton behind
every endpoint), reached through ``AWS_ENDPOINT_URL`` as boto3 reaches any other AWS. There
is no GPU there, so the probe reads host memory (the Triton tree's PSS).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from remote_helpers import (
    INSTANCE_TYPE,
    REGION,
    ROLE,
    write_reference_tarball,
)
from shared_helpers import unique

from mmelocal.bench.capacity.result import CapacityResult, LoadRecord
from mmelocal.bench.endpoint.capacity import RemoteCapacityOptions, measure_endpoint_capacity
from mmelocal.bench.endpoint.remote import (
    PROBE_TARGET,
    ProbeReading,
    RemoteEndpoint,
    connect_endpoint,
)
from mmelocal.cli.main import main
from mmelocal.testing.local_aws_fixtures import point_environment_at

pytestmark = pytest.mark.triton

MIB = 1024 * 1024
BUDGET = "8GiB"


@dataclass
class Deployed:
    """An endpoint mmelocal deployed to the local AWS."""

    name: str
    bucket: str
    tarball: Path
    aws: Any


@pytest.fixture(scope="module")
def deployed(local_aws: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    import boto3

    from mmelocal.aws.session import connect
    from mmelocal.deploy.deployer import apply_plan, make_plan
    from mmelocal.deploy.plan import DeployOptions

    root = tmp_path_factory.mktemp("remote")
    name, bucket = unique("ep"), unique("mme")
    with pytest.MonkeyPatch.context() as env:
        point_environment_at(env, local_aws, root / "no-aws-files")
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
        write_reference_tarball(root / "store" / "model-0.tar.gz", scale=2.0)
        options = DeployOptions(
            store=root / "store", endpoint_name=name, s3_uri=f"s3://{bucket}/models/",
            role_arn=ROLE, instance_type=INSTANCE_TYPE, poll_s=0.1,
        )  # fmt: skip
        clients = connect()
        apply_plan(make_plan(options, clients), clients, options=options)
        try:
            yield Deployed(
                name=name,
                bucket=bucket,
                tarball=write_reference_tarball(root / "tiny.tar.gz", scale=3.0),
                aws=local_aws,
            )
        finally:
            from mmelocal.deploy.deployer import undeploy

            undeploy(clients, name, delete_artifacts=True)


def emulator_events(deployed: Deployed) -> list[dict[str, str]]:
    import urllib.request

    fleet = deployed.aws.endpoints.serving(REGION, deployed.name)
    url = f"{fleet.url}/emulator/state"
    with urllib.request.urlopen(url, timeout=30) as answer:
        events: list[dict[str, str]] = json.loads(answer.read())["events"]
    return events


@pytest.fixture(scope="module")
def endpoint(deployed: Deployed) -> RemoteEndpoint:
    return connect_endpoint(deployed.name)


def test_the_endpoint_is_described_from_its_config(
    deployed: Deployed, endpoint: RemoteEndpoint
) -> None:
    assert endpoint.info.instance_type == INSTANCE_TYPE
    assert endpoint.info.instance_count == 1
    assert endpoint.s3_url == f"s3://{deployed.bucket}/models/"
    from mmelocal.errors import UserInputError

    with pytest.raises(UserInputError, match="is not the prefix endpoint"):
        RemoteEndpoint(endpoint.clients, endpoint.info, s3_uri=f"s3://{deployed.bucket}/other/")


def test_the_probe_reads_the_triton_tree_of_the_endpoint(
    deployed: Deployed, endpoint: RemoteEndpoint, tmp_path: Path
) -> None:
    import boto3

    from mmelocal.runtime.memory import process_tree_memory

    first = endpoint.ensure_probe(tmp_path)
    head = boto3.client("s3").head_object(Bucket=deployed.bucket, Key=f"models/{PROBE_TARGET}")
    assert "mmelocal-sha256" in head["Metadata"]
    assert first.source == "host-pss" and first.kind == "host" and first.devices == ()
    assert first.server_pid is not None and first.per_process_bytes is not None
    # the probe's stub is a child of the Triton server it reports on
    assert len(first.per_process_bytes) >= 2
    independent = process_tree_memory(first.server_pid).pss_bytes
    again = endpoint.read_probe()
    low, high = sorted((first.used_bytes, again.used_bytes))
    assert low - max(16 * MIB, low // 10) <= independent <= high + max(16 * MIB, high // 10)
    # the published outputs are there too (no GPU: empty GPU lists)
    answer = json.loads(
        endpoint.invoke(
            PROBE_TARGET,
            b'{"inputs": [{"name": "INPUT__0", "shape": [1], "datatype": "BYTES", "data": ["h"]}]}',
        )
    )
    outputs = {o["name"]: o["data"] for o in answer["outputs"]}  # fmt: skip
    assert outputs["gpu_used_memory"] == [] and 0 < outputs["memory_utilization"][0] < 1


def test_capacity_copies_the_tarball_in_s3_and_loads_each_copy(
    deployed: Deployed, endpoint: RemoteEndpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import boto3

    from mmelocal.bench.results import result_from_dict
    from mmelocal.builder.payload import payload_from_model
    from mmelocal.testing.tiny_model import write_model
    from mmelocal.testing.triton import TestTritonServer

    seen: list[int] = []
    readings: list[ProbeReading] = []  # every probe reading, in order
    before: list[ProbeReading] = []  # per copy: the reading its growth is counted from
    after: list[ProbeReading] = []  # per copy: the reading its record was made from
    read_probe, copy = endpoint.read_probe, endpoint.copy

    def read() -> ProbeReading:
        readings.append(read_probe())
        return readings[-1]

    def copy_then_load(source: str, target: str) -> None:  # the loop's before_load
        before.append(readings[-1])
        copy(source, target)

    outside = contextlib.ExitStack()

    def progress(record: LoadRecord) -> None:
        seen.append(record.copies)
        after.append(readings[-1])
        if record.copies == 1:
            # a Triton of the same install outside the endpoint's tree starts between the
            # second copy's readings, as a neighbour's test run does (on the event loop's
            # thread: the server dies with the thread that started it)
            outside.enter_context(TestTritonServer()).load_model(write_model(tmp_path))

    monkeypatch.setattr(endpoint, "read_probe", read)
    monkeypatch.setattr(endpoint, "copy", copy_then_load)
    with outside:
        run = measure_endpoint_capacity(
            endpoint,
            deployed.tarball,
            payload=payload_from_model(deployed.tarball),
            options=RemoteCapacityOptions(max_copies=3, memory_budget_bytes=8 * 1024**3),
            progress=progress,
        )
    result = run.result
    assert result.count == 3 and seen == [1, 2, 3]
    assert result.stopped_reason == "reached max copies (3)"
    assert result.instance_type == INSTANCE_TYPE and result.model_format == "python"
    assert result.probe.startswith("host PSS") and deployed.name in result.probe
    folder = run.loaded[0].split("/")[0]
    assert run.loaded == tuple(f"{folder}/tiny-v{i}.tar.gz" for i in range(3))
    assert run.created == (f"{folder}/tiny.tar.gz", *run.loaded)
    s3 = boto3.client("s3")
    sha = hashlib.sha256(deployed.tarball.read_bytes()).hexdigest()
    for target in run.created:  # the upload and its server-side copies, with mmelocal's mark
        head = s3.head_object(Bucket=deployed.bucket, Key=f"models/{target}")
        assert head["ContentLength"] == deployed.tarball.stat().st_size
        assert head["Metadata"]["mmelocal-sha256"] == sha
    # every copy started its own Python stub: it grew the Triton tree by that one process,
    # whose own memory (USS: pages no other process maps) its record counts. The tree's PSS
    # and the server's USS are not asserted to grow: pages the tree shares with processes
    # outside it (the Triton started above, a neighbour's tests, any Python of the same
    # install) move them, and the server's USS fell from 28 to 5 MiB when another
    # tritonserver mapped its libraries: more than a copy's stub adds (20 MiB)
    assert len(before) == len(after) == len(result.loads) == 3
    own = []
    for record, old, new in zip(result.loads, before, after, strict=True):
        server = new.server_pid
        assert server is not None and old.server_pid == server
        assert old.per_process_bytes is not None and new.per_process_bytes is not None
        started = set(new.per_process_bytes) - set(old.per_process_bytes)
        assert set(old.per_process_bytes) <= set(new.per_process_bytes) and len(started) == 1
        stub_bytes = new.per_process_bytes[started.pop()]
        server_change = new.per_process_bytes[server] - old.per_process_bytes[server]
        assert record.marginal_bytes == stub_bytes + server_change
        assert record.used_bytes == new.used_bytes
        assert record.delta_bytes == new.used_bytes - old.used_bytes
        # the tree's PSS holds each process's own memory, the new stub's included
        assert new.used_bytes >= sum(new.per_process_bytes.values())
        own.append(stub_bytes)
    # copies of one model: their stubs own alike (within 0.3 % of each other here), a stub
    # read before its load had finished would own less
    assert min(own) > 0 and max(own) - min(own) <= min(own) // 10, own
    assert result.projection is None  # host memory: no GPU projection
    again = result_from_dict(json.loads(json.dumps(result.to_dict())))
    assert isinstance(again, CapacityResult) and again.instance_type == INSTANCE_TYPE
    assert "local AWS, CPU host memory, as ml.g4dn.xlarge" in result.summary_lines()[0]
    # the emulator loaded exactly those copies, once each (and the probe)
    loads = [e["target"] for e in emulator_events(deployed) if e["kind"] == "load"]
    assert [t for t in loads if t.startswith(folder)] == list(run.loaded)
    endpoint.delete(list(run.created))
    listed = s3.list_objects_v2(Bucket=deployed.bucket, Prefix=f"models/{folder}/")
    assert listed.get("KeyCount", 0) == 0


def test_the_objects_the_bench_places_are_recorded_for_the_endpoint(
    deployed: Deployed, endpoint: RemoteEndpoint, tmp_path: Path
) -> None:
    """The probe, an uploaded tarball and its server-side copy record the endpoint they
    were placed under (``x-amz-meta-mmelocal-endpoint``), as deploy's uploads do: the
    endpoint's next deploy prunes what is left of them and its undeploy deletes them. They
    recorded none, so another endpoint's undeploy on the prefix deleted them and this
    endpoint's deploy kept them, served, for ever."""
    import boto3

    from mmelocal.aws.session import connect
    from mmelocal.deploy.deployer import make_plan
    from mmelocal.deploy.plan import DeployOptions

    s3 = boto3.client("s3")
    s3.delete_object(Bucket=deployed.bucket, Key=f"models/{PROBE_TARGET}")  # placed afresh
    endpoint.ensure_probe(tmp_path)
    folder = f"recorded-{tmp_path.name}"
    assert endpoint.put_file(deployed.tarball, f"{folder}/a.tar.gz") == "upload"
    endpoint.copy(f"{folder}/a.tar.gz", f"{folder}/b.tar.gz")
    placed = [PROBE_TARGET, f"{folder}/a.tar.gz", f"{folder}/b.tar.gz"]
    try:
        for target in placed:
            head = s3.head_object(Bucket=deployed.bucket, Key=f"models/{target}")
            assert head["Metadata"].get("mmelocal-endpoint") == deployed.name, target
        options = DeployOptions(
            store=deployed.tarball.parent / "store", endpoint_name=deployed.name,
            s3_uri=f"s3://{deployed.bucket}/models/", role_arn=ROLE,
            instance_type=INSTANCE_TYPE,
        )  # fmt: skip
        plan = make_plan(options, connect())
        pruned = {o.key: (o.action, o.note) for o in plan.objects if not o.path}
        for target in placed:
            assert pruned[f"models/{target}"] == ("delete", "not in the store"), pruned
    finally:
        endpoint.delete(placed[1:])


def test_capacity_cli_on_an_endpoint(
    deployed: Deployed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "capacity.json"
    code = main(["capacity", str(deployed.tarball), "--endpoint", deployed.name,
                 "--memory-budget", BUDGET, "--max-copies", "2", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "measured: local AWS, CPU host memory, as ml.g4dn.xlarge" in printed
    assert "no GPU projection" in printed
    data = json.loads(out.read_text())
    assert data["kind"] == "capacity" and data["count"] == 2
    assert data["instance_type"] == INSTANCE_TYPE


def test_capacity_cli_names_a_missing_endpoint(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["capacity", str(deployed.tarball), "--endpoint", "no-such-endpoint",
                 "--memory-budget", BUDGET])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0
    assert "endpoint no-such-endpoint does not exist in us-east-1: deploy it first" in err
    assert "Traceback" not in err


def test_sweep_cli_load_tests_each_variant_as_a_target_model(
    deployed: Deployed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    out = tmp_path / "sweep.json"
    before = len(emulator_events(deployed))
    code = main(["sweep", str(deployed.tarball), "--endpoint", deployed.name,
                 "--dynamic-batching", "off,on", "--instances", "1", "--users", "2",
                 "--step-duration", "2s", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    data = json.loads(out.read_text())
    assert data["kind"] == "sweep" and data["instance_type"] == INSTANCE_TYPE
    assert deployed.name in data["machine"]
    # the local AWS serves on this CPU (its probe reads host memory): no ml.g4dn.xlarge
    # count or cost from CPU throughput, ratios only, as the local sweep on a CPU
    assert data["relative_only"] is True, data["recommendation"]
    assert all(row["instances_needed"] is None for row in data["rows"])
    assert data["recommendation"].startswith("none: no instance count for ml.g4dn.xlarge")
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows) == ["model-base", "model-db"]
    for row in rows.values():
        assert row["status"] == "ok", row
        steps = row["loadtest"]["steps"]
        assert steps and steps[-1]["requests"] > 0 and steps[-1]["failures"] == 0
        assert row["loadtest"]["mode"] == "boto3" and row["load_s"] > 0
    # each variant was loaded once from its own object, on the one endpoint, then retired
    loads = [
        e["target"]
        for e in emulator_events(deployed)[before:]
        if e["kind"] == "load" and e["target"] != "metrics.tar.gz"  # the probe, read first
    ]
    assert [t.split("/")[-1] for t in loads] == ["model-base.tar.gz", "model-db.tar.gz"]
    folder = loads[0].split("/")[0]
    listed = boto3.client("s3").list_objects_v2(Bucket=deployed.bucket, Prefix=f"models/{folder}/")
    assert listed.get("KeyCount", 0) == 0


def test_capacity_cli_refuses_two_formats_on_one_endpoint(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["capacity", str(deployed.tarball), "--endpoint", deployed.name,
                 "--format", "torchscript,onnx"])  # fmt: skip
    assert code != 0
    assert "one format per endpoint" in capsys.readouterr().err


def test_a_failed_capacity_run_leaves_nothing_in_the_prefix(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    code = main(["capacity", str(deployed.tarball), "--endpoint", deployed.name,
                 "--memory-budget", "1MiB"])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "the empty server already uses" in err and "Traceback" not in err
    listed = boto3.client("s3").list_objects_v2(
        Bucket=deployed.bucket, Prefix="models/mmelocal-capacity-"
    )
    assert listed.get("KeyCount", 0) == 0


def test_benchmark_on_a_deployed_endpoint_leaves_it_running(
    deployed: Deployed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    code = main(["benchmark", str(deployed.tarball), "--endpoint", deployed.name,
                 "--memory-budget", BUDGET, "--max-copies", "2", "--max-users", "2",
                 "--duration", "3s", "--no-sweep", "--report", str(tmp_path / "report"),
                 "--json", str(tmp_path / "results.json")])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"On endpoint {deployed.name} (running already" in printed
    assert "create the endpoint" not in printed
    bench = json.loads((tmp_path / "results.json").read_text())  # one result: an object
    assert (
        bench["kind"] == "benchmark"
        and bench["endpoint"] == deployed.name
        and bench["instance_type"] == INSTANCE_TYPE
    )
    assert bench["max_models_loaded"] == 2 and bench["loadtest"]["target_count"] == 2
    comparison = (tmp_path / "report" / "benchmark-comparison.csv").read_text().splitlines()
    assert comparison[1].startswith(f"{INSTANCE_TYPE},tiny,python,2,")
    status = boto3.client("sagemaker").describe_endpoint(EndpointName=deployed.name)
    assert status["EndpointStatus"] == "InService"


def test_benchmark_names_what_it_needs_to_deploy(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["benchmark", str(deployed.tarball), "--endpoint-name", "x"])
    err = capsys.readouterr().err
    assert code != 0 and "give --s3-uri, --role" in err and "--endpoint NAME" in err
    code = main(["benchmark", str(deployed.tarball), str(deployed.tarball),
                 "--endpoint", deployed.name])  # fmt: skip
    assert code != 0 and "give one SOURCE" in capsys.readouterr().err


def test_the_endpoint_measures_the_copy_the_local_run_measures(
    deployed: Deployed, endpoint: RemoteEndpoint
) -> None:
    """The same tarball, measured locally (the emulator) and through the endpoint's probe:
    each copy's own memory agrees within the spread the two runs show. (The endpoint's
    baseline also holds the probe's own stub, so baselines and first deltas differ.)"""
    import statistics

    from mmelocal.bench.capacity.loop import CapacityOptions, measure_capacity
    from mmelocal.builder.payload import payload_from_model

    local = measure_capacity(
        deployed.tarball, options=CapacityOptions(max_copies=3, memory_budget_bytes=8 * 1024**3)
    )
    run = measure_endpoint_capacity(
        endpoint,
        deployed.tarball,
        payload=payload_from_model(deployed.tarball),
        options=RemoteCapacityOptions(max_copies=3, memory_budget_bytes=8 * 1024**3),
    )
    endpoint.delete(list(run.created))
    remote = run.result
    assert local.count == remote.count == 3
    own = [[load.marginal_bytes or 0 for load in r.loads] for r in (local, remote)]
    spread = max(statistics.pstdev(values) for values in own)
    means = [statistics.fmean(values) for values in own]
    assert abs(means[0] - means[1]) <= 3 * spread + MIB, (own, spread)


@pytest.mark.parametrize("here", ["no NVML", "a T4", "a T4 CUDA_VISIBLE_DEVICES hides"])
def test_sweep_on_an_endpoint_that_serves_on_a_cpu_skips_tensorrt(
    deployed: Deployed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    here: str,
) -> None:
    """The local AWS serves its ml.g4dn.xlarge on this CPU (its probe reads host memory): a
    TensorRT engine cannot run there, whatever GPU this machine has, so the variants are
    skipped saying so, not built (a T4 here used to build them for it, and fail)."""
    import sys

    from shared_helpers import StandInNvml

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if here == "no NVML":
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    else:
        monkeypatch.setitem(sys.modules, "pynvml", StandInNvml({0: 0}, names=("Tesla T4",)))
    if here.endswith("hides"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = tmp_path / "sweep.json"
    code = main(["sweep", "torchvision:resnet18", "--endpoint", deployed.name,
                 "--formats", "tensorrt", "--dynamic-batching", "off", "--instances", "1",
                 "--json", str(out)])  # fmt: skip
    assert code == 1  # nothing could be measured
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["name"], row["status"]) == ("trt-base", "skipped"), row
    assert f"endpoint {deployed.name} ({INSTANCE_TYPE}) serves on a CPU" in row["reason"]
    assert "no configuration could be measured" in capsys.readouterr().err
