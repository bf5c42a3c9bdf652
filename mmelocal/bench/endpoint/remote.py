"""A deployed multi-model endpoint as a bench target: its probe, its objects, its invocations.

The published MME GPU benchmarking procedure (aws-samples/sagemaker-mme-gpu-benchmarking)
runs against a live endpoint: a small Python-backend model in the same container reports
memory (``metrics.tar.gz``, the ``server_metrics`` model), copies of the user's tarball are
made in S3 (``{model}-v{i}.tar.gz``) and invoked through ``InvokeEndpoint`` with
``TargetModel``. :class:`RemoteEndpoint` holds what those steps need: the runtime client,
the endpoint's S3 prefix (from DescribeEndpoint -> endpoint config -> model) and its
instance type. Every client is plain boto3, so ``AWS_ENDPOINT_URL`` and the
service-specific variables (``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``...) point it elsewhere.

mmelocal's probe (``model_repo_templates/server_metrics``) reads NVML where the container
has nvidia-ml-py, else ``nvidia-smi``, else host memory (the Triton tree's PSS).
"""

from __future__ import annotations

import gzip
import json
import logging
import tarfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmelocal.aws.endpoint import EndpointInfo, describe_mme
from mmelocal.aws.s3 import SHA256_METADATA, split_s3_uri
from mmelocal.aws.session import AwsClients, aws_error, error_code
from mmelocal.errors import BenchError, UserInputError
from mmelocal.facts import sagemaker as sagemaker_facts
from mmelocal.facts.invoke_errors import MODEL_NOT_READY
from mmelocal.units import MiB

if TYPE_CHECKING:
    from mmelocal.bench.loadtest.result import LoadTestResult
    from mmelocal.bench.loadtest.shape import LoadShape
    from mmelocal.bench.loadtest.workers import LoadGenerators

logger = logging.getLogger(__name__)

#: the probe's TargetModel, model name and request, as the published procedure names them
PROBE_TARGET = "metrics.tar.gz"
PROBE_MODEL_NAME = "metrics"
PROBE_TEMPLATE = "server_metrics"
PROBE_PAYLOAD = json.dumps(
    {"inputs": [{"name": "INPUT__0", "shape": [1], "datatype": "BYTES", "data": ["h"]}]}
).encode()
#: the largest object one CopyObject request copies (S3's limit)
COPY_OBJECT_LIMIT_BYTES = 5 * 1024**3
#: how long a cold load may answer ModelNotReadyException before we give up (the service's)
LOAD_LIMIT_S = sagemaker_facts.LOAD_LIMIT_S


def probe_template() -> Path:
    """The probe model folder shipped with mmelocal (``config.pbtxt`` + ``1/model.py``)."""
    from mmelocal.builder.presets import templates_dir

    return templates_dir() / PROBE_TEMPLATE


def write_probe_tarball(dest: Path | str) -> Path:
    """``metrics.tar.gz``: the probe folder at the archive's top, named ``metrics``."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = probe_template()

    def same_every_time(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    # the same bytes on every run (no time stamps), so an unchanged probe is not re-uploaded
    with gzip.GzipFile(dest, "wb", mtime=0) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                arcname = f"{PROBE_MODEL_NAME}/{path.relative_to(source).as_posix()}"
                tar.add(path, arcname=arcname, filter=same_every_time)
    return dest


@dataclass(frozen=True, kw_only=True)
class ProbeReading:
    """One answer of the probe: ``used_bytes`` of ``total_bytes`` from ``source``
    (``nvml``, ``nvidia-smi`` or ``host-pss``), summed over the instance's GPUs.

    ``server_pid`` and ``per_process_bytes`` split a load's growth into the copy's own
    memory and the shared runtime (:mod:`mmelocal.bench.capacity.footprint`); None where the probe
    could not match processes (a GPU container in its own PID namespace)."""

    used_bytes: int
    total_bytes: int
    source: str
    devices: tuple[Mapping[str, Any], ...] = ()
    server_pid: int | None = None
    per_process_bytes: Mapping[int, int] | None = None
    problems: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """``"gpu"`` or ``"host"``."""
        return "host" if self.source == "host-pss" else "gpu"

    def describe(self) -> str:
        """``nvml: 1 x NVIDIA A10G`` or ``host-pss`` (for the result's ``probe`` field)."""
        if not self.devices:
            return self.source
        from collections import Counter

        names = Counter(str(device.get("name", "GPU")) for device in self.devices)
        return f"{self.source}: " + ", ".join(f"{n} x {name}" for name, n in names.items())


def parse_probe_answer(body: bytes) -> ProbeReading:
    """The probe's KServe v2 JSON answer as a :class:`ProbeReading`.

    The published ``server_metrics`` model (same TargetModel, no ``mmelocal`` output) is
    read too, from its MiB figures: an endpoint that still has it loaded keeps serving it
    even after mmelocal's probe replaced the object (SageMaker has no unload call)."""
    try:
        outputs = {o["name"]: o for o in json.loads(body)["outputs"]}
        if "mmelocal" not in outputs:
            return _published_reading(outputs)
        data = json.loads(outputs["mmelocal"]["data"][0])
        per_process = data.get("per_process_bytes")
        return ProbeReading(
            used_bytes=int(data["used_bytes"]),
            total_bytes=int(data["total_bytes"]),
            source=str(data["source"]),
            devices=tuple(data.get("devices") or ()),
            server_pid=data.get("server_pid"),
            per_process_bytes=None
            if per_process is None
            else {int(pid): int(used) for pid, used in per_process.items()},
            problems=tuple(data.get("problems") or ()),
        )
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchError(
            f"{PROBE_TARGET} answered something that is not mmelocal's probe ({exc}): "
            f"{body[:200]!r}; delete that object from the endpoint's prefix and run again"
        ) from exc


def _published_reading(outputs: Mapping[str, Any]) -> ProbeReading:
    used = [float(v) for v in outputs["gpu_used_memory"]["data"]]
    total = [float(v) for v in outputs["gpu_total_memory"]["data"]]
    if not total:
        raise ValueError("the published probe reported no GPU")
    return ProbeReading(
        used_bytes=round(sum(used) * MiB),
        total_bytes=round(sum(total) * MiB),
        source="nvidia-smi",
        devices=tuple({"name": "GPU"} for _ in total),
        problems=("the published server_metrics model answered (MiB figures)",),
    )


class RemoteEndpoint:
    """A deployed MME seen by the bench: invoke targets, read the probe, place objects."""

    def __init__(
        self,
        clients: AwsClients,
        info: EndpointInfo,
        *,
        s3_uri: str | None = None,
        load_limit_s: float = LOAD_LIMIT_S,
    ) -> None:
        url = s3_uri or info.model_data_url
        if not url:
            raise UserInputError(
                f"endpoint {info.name} names no ModelDataUrl: pass --s3-uri s3://bucket/prefix/"
            )
        bucket, prefix = split_s3_uri(url)
        if info.model_data_url and split_s3_uri(info.model_data_url) != (bucket, prefix):
            raise UserInputError(
                f"--s3-uri {url} is not the prefix endpoint {info.name} serves "
                f"({info.model_data_url}): leave --s3-uri out or pass that prefix"
            )
        self.clients, self.info = clients, info
        self.bucket, self.prefix = bucket, prefix
        self.load_limit_s = load_limit_s

    @property
    def s3_url(self) -> str:
        """``s3://bucket/prefix/``: where TargetModel names are resolved."""
        return f"s3://{self.bucket}/{self.prefix}"

    def check_ready(self) -> None:
        """The endpoint is InService with one instance (the probe reads one instance)."""
        info = self.info
        if info.status != "InService":
            raise UserInputError(
                f"endpoint {info.name} is {info.status or 'in an unknown state'}: wait until "
                "it is InService (mmelocal deploy waits for it)"
            )
        if info.instance_count != 1:
            raise UserInputError(
                f"endpoint {info.name} runs {info.instance_count} instances; the probe reads "
                "one, and copies would spread over all: deploy it with --instance-count 1 "
                "--max-instances 1 for the benchmark"
            )

    def loadtest(
        self,
        targets: Sequence[str],
        payload: bytes,
        *,
        shape: LoadShape,
        label: str,
        say: Callable[[str], None],
        content_type: str = "application/json",
        generators: LoadGenerators | None = None,
    ) -> LoadTestResult:
        """The boto3 load test over ``targets`` (TargetModels of this endpoint); progress
        lines go to ``say``; ``generators``: the Locust workers (default: one per core)."""
        from mmelocal.bench.loadtest.runner import LoadTestConfig, run_loadtest
        from mmelocal.bench.loadtest.workers import LoadGenerators

        config = LoadTestConfig(
            endpoint=self.info.name,
            mode="boto3",
            region=self.clients.region,
            targets=tuple(targets),
            payload=payload,
            content_type=content_type,
            shape=shape,
            generators=generators or LoadGenerators(),
        )
        return run_loadtest(config, label=label, progress=lambda p: say(loadtest_status(p)))

    def invoke(self, target: str, body: bytes, content_type: str = "application/json") -> bytes:
        """InvokeEndpoint with ``TargetModel``; a cold load that answers
        ModelNotReadyException is asked again until it is ready (up to ``load_limit_s``)."""
        deadline = time.monotonic() + self.load_limit_s
        pause = threading.Event()
        while True:
            try:
                answer = self.clients.runtime.invoke_endpoint(
                    EndpointName=self.info.name,
                    TargetModel=target,
                    Body=body,
                    ContentType=content_type,
                )
                data: bytes = answer["Body"].read()
                return data
            except Exception as exc:
                if error_code(exc) == MODEL_NOT_READY and time.monotonic() < deadline:
                    pause.wait(2.0)
                    continue
                raise BenchError(
                    f"InvokeEndpoint of {target} on {self.info.name} failed: "
                    f"{_client_error_text(exc)}"
                ) from exc

    def read_probe(self) -> ProbeReading:
        """One fresh reading of the probe (it is loaded by the first call)."""
        return parse_probe_answer(self.invoke(PROBE_TARGET, PROBE_PAYLOAD))

    def key(self, target: str) -> str:
        """The S3 key of a TargetModel."""
        return self.prefix + target

    def put_file(self, path: Path, target: str) -> str:
        """:meth:`put_files` of one file: ``"upload"`` or ``"skip"``."""
        return self.put_files([(path, target)])[0]

    def put_files(self, files: Sequence[tuple[Path, str]]) -> list[str]:
        """Upload each ``(path, target)`` unless S3 holds its bytes under that key already
        (deploy's rule: the same size and ETag, else the SHA-256 mmelocal recorded: one
        HeadObject per file, on the bounded pool of
        :func:`~mmelocal.aws.parallel.map_bounded`), then upload the others as deploy does
        (:func:`~mmelocal.aws.objects.apply_objects`: the checksum and this endpoint
        recorded, so that its next deploy prunes them and its undeploy deletes them;
        mmelocal's part size). ``"upload"`` or ``"skip"`` per file, in order.

        An object with other bytes at a key is replaced only when mmelocal placed it for
        this endpoint (an earlier bench's probe, say); any other (the user's own model
        under that name, another endpoint's) is what the endpoint serves under that
        TargetModel: nothing is uploaded and ObjectConflictError names those keys."""
        from mmelocal.aws.objects import ObjectStep, apply_objects, head_holds, head_object
        from mmelocal.aws.parallel import map_bounded
        from mmelocal.aws.s3 import ENDPOINT_METADATA, file_digests
        from mmelocal.errors import ObjectConflictError

        s3, bucket = self.clients.s3, self.bucket
        digests = file_digests(path for path, _ in files)
        keys = [self.key(target) for _, target in files]
        heads = map_bounded(lambda key: head_object(s3, bucket, key), keys)
        steps, foreign = [], []
        for (path, _), key, head in zip(files, keys, heads, strict=True):
            size, digest = path.stat().st_size, digests[path]
            action = "skip" if head_holds(head, size, digest) else "upload"
            placed_for = None if head is None else head.get("Metadata", {}).get(ENDPOINT_METADATA)
            if action == "upload" and head is not None and placed_for != self.info.name:
                foreign.append(key)
            steps.append(
                ObjectStep(
                    key=key, path=str(path), size_bytes=size, sha256=digest.sha256, action=action
                )
            )
        if foreign:
            raise ObjectConflictError(
                f"the bench would replace objects under s3://{bucket}/ that mmelocal did not "
                f"place for endpoint {self.info.name}: {', '.join(sorted(foreign))}. Endpoint "
                f"{self.info.name} serves each under its name as a TargetModel: move or "
                "delete them yourself if they may go, or bench an endpoint whose prefix does "
                "not hold them",
                keys=foreign,
            )
        apply_objects(s3, bucket, steps, endpoint_name=self.info.name)
        return [step.action for step in steps]

    def copy(self, source_target: str, target: str) -> None:
        """A server-side copy: one CopyObject up to S3's 5 GiB limit for it, else the
        transfer manager's UploadPartCopy; the bytes stay in S3. The copy keeps mmelocal's
        SHA-256 and records this endpoint (deploy's
        :func:`~mmelocal.aws.objects.object_metadata`), so the endpoint's undeploy
        ``--delete-artifacts`` finds it."""
        from mmelocal.aws.objects import object_metadata
        from mmelocal.aws.s3 import transfer_config

        s3, source = self.clients.s3, {"Bucket": self.bucket, "Key": self.key(source_target)}
        try:
            head = s3.head_object(**source)
            sha256 = head.get("Metadata", {}).get(SHA256_METADATA, "")
            metadata = object_metadata(sha256, self.info.name)
            args = {"Metadata": metadata, "MetadataDirective": "REPLACE"}
            if int(head.get("ContentLength", 0)) <= COPY_OBJECT_LIMIT_BYTES:
                s3.copy_object(CopySource=source, Bucket=self.bucket, Key=self.key(target), **args)
            else:
                s3.copy(
                    source, self.bucket, self.key(target), ExtraArgs=args, Config=transfer_config()
                )
        except Exception as exc:
            raise aws_error(exc, "CopyObject", f"s3://{self.bucket}/{self.key(target)}") from exc

    def delete(self, targets: list[str]) -> None:
        """Delete the objects of ``targets`` (the platform unloads loaded ones when it needs
        the memory; SageMaker has no unload call)."""
        from mmelocal.aws.s3 import delete_objects

        delete_objects(self.clients.s3, self.bucket, [self.key(t) for t in targets])

    def ensure_probe(self, workdir: Path) -> ProbeReading:
        """Place ``metrics.tar.gz`` in the prefix (if not there yet) and read it once."""
        action = self.put_file(write_probe_tarball(workdir / PROBE_TARGET), PROBE_TARGET)
        logger.info("probe %s: %s", self.s3_url + PROBE_TARGET, action)
        return self.read_probe()


def _client_error_text(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    original = response.get("OriginalMessage")
    text = f"{error.get('Code') or type(exc).__name__}: {error.get('Message') or exc}"
    return f"{text} ({original})" if original else text


def loadtest_status(sample: Any) -> str:
    """One status line from a live load-test sample."""
    return (
        f"load test {sample.elapsed_s:.0f}/{sample.duration_s:.0f} s: {sample.users} users, "
        f"{sample.rps:,.1f} req/s, {sample.requests:,} requests, {sample.failures:,} failed"
    )


def connect_endpoint(
    name: str, *, region: str | None = None, s3_uri: str | None = None
) -> RemoteEndpoint:
    """Clients for the region, the endpoint described and checked ready for a benchmark."""
    from mmelocal.aws.session import connect

    clients = connect(region)
    endpoint = RemoteEndpoint(clients, describe_mme(clients, name), s3_uri=s3_uri)
    endpoint.check_ready()
    return endpoint


__all__ = [
    "LOAD_LIMIT_S",
    "PROBE_MODEL_NAME",
    "PROBE_PAYLOAD",
    "PROBE_TARGET",
    "EndpointInfo",
    "ProbeReading",
    "RemoteEndpoint",
    "connect_endpoint",
    "loadtest_status",
    "parse_probe_answer",
    "probe_template",
    "write_probe_tarball",
]
