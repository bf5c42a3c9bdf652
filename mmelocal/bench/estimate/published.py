"""Published per-card MME counts: what :mod:`mmelocal.bench.estimate` is calibrated against.

Every row is a measurement someone published, not a number mmelocal made up. The counts and
curves come from the outputs stored in the notebooks of the AWS sample that the AWS ML blog
post "Achieve high performance at scale for model serving using Amazon SageMaker multi-model
endpoints with GPU" is built on (:data:`BENCHMARK_REPO`, notebooks ``cv-benchmark.ipynb``
and ``nlp_benchmark.ipynb`` at the commit named in each row). Their procedure: one MME on
the ``sagemaker-tritonserver:22.10-py3`` image; copy the tarball, invoke the copy once (one
request of batch 1), read ``nvidia-smi`` through a Python-backend model, and stop when the
next copy (at the mean footprint so far, baseline included) would cross 90 %. The count is
the copies loaded then. Each row keeps the raw readings the count came from: the card total
NVML reported, the used memory before any model, the utilisation after the first and after
the last printed copy, and how many copies were printed (so the per-copy slope is
``(last - first) / (printed - 1) x total``). The rows are data: the packaged
``mmelocal/bench/data/published.yaml``, each naming its card, whose reading (total and
baseline) lives in the one data file of card memory (:mod:`mmelocal.facts.cards`).

The one figure from the earlier AWS ML blog post "Run multiple deep learning models on GPU
with Amazon SageMaker multi-model endpoints" is kept apart (:data:`G4DN_4XLARGE_RESNET50`):
GPU memory utilisation 38.3 % "when more than 16" ResNet-50 models were loaded on one T4.

Not here, because mmelocal could not read them: the tables of the blog post itself (A10G /
ml.g5 and convnext figures); only its opening is in the reference store.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from mmelocal.facts.cards import published_reading

BENCHMARK_REPO = "https://github.com/aws-samples/sagemaker-mme-gpu-benchmarking"
BLOG_HIGH_PERFORMANCE = (
    "https://aws.amazon.com/blogs/machine-learning/achieve-high-performance-at-scale-for-"
    "model-serving-using-amazon-sagemaker-multi-model-endpoints-with-gpu/"
)
BLOG_RUN_MULTIPLE = (
    "https://aws.amazon.com/blogs/machine-learning/run-multiple-deep-learning-models-on-gpu-"
    "with-amazon-sagemaker-multi-model-endpoints/"
)


@dataclass(frozen=True, kw_only=True)
class PublishedCount:
    """One published capacity run: a model, a format, an instance type, and its readings.

    ``max_shape_batch`` is the batch the artifact is sized for: the TensorRT optimisation
    profile's ``maxShapes`` batch (CV engines 128, NLP engines 32), or the first request's
    batch (1) for PyTorch, whose caching allocator keeps only what has run.
    """

    model: str
    spec: str
    params: int
    platform: str
    precision: str
    instance_type: str
    gpu: str
    total_mib: float
    baseline_mib: float
    first_util: float
    last_util: float
    printed: int
    count: int
    max_shape_batch: int
    seq_len: int | None
    source: str

    @property
    def per_copy_mib(self) -> float:
        """The steady per-copy footprint: the slope of the published curve."""
        return (self.last_util - self.first_util) / (self.printed - 1) * self.total_mib

    @property
    def first_copy_mib(self) -> float:
        """What the first copy added over the empty server (its share of the runtime too)."""
        return self.first_util * self.total_mib - self.baseline_mib

    @property
    def runtime_once_mib(self) -> float:
        """What the first copy added beyond a later copy: the runtime loaded once."""
        return self.first_copy_mib - self.per_copy_mib


def _nb(commit: str, notebook: str) -> str:
    return f"{BENCHMARK_REPO}/blob/{commit}/{notebook} (stored outputs)"


#: the packaged data file of the published counts (``mmelocal/bench/data/``)
_PUBLISHED_FILE = "published.yaml"


def _published_counts() -> tuple[PublishedCount, ...]:
    """The rows of the data file, each with its card's reading (total, baseline,
    instance type) from the one data file of card memory."""
    from mmelocal.bench.datafile import parse_yaml

    text = resources.files("mmelocal.bench").joinpath(f"data/{_PUBLISHED_FILE}").read_text("utf-8")
    rows = parse_yaml(text, origin=f"the packaged {_PUBLISHED_FILE}")["counts"]
    return tuple(
        PublishedCount(
            **{k: v for k, v in row.items() if k not in ("gpu", "notebook", "at")},
            **published_reading(row["gpu"]).run_fields(),
            source=_nb(row["at"], row["notebook"]),
        )
        for row in rows
    )


#: The published counts (T4 = ml.g4dn.2xlarge, V100 = ml.p3.2xlarge), one row per run.
PUBLISHED: tuple[PublishedCount, ...] = _published_counts()


@dataclass(frozen=True, kw_only=True)
class PublishedUtilisation:
    """A published utilisation at a copy count (no curve): "38.3 % when more than 16"."""

    model: str
    spec: str
    instance_type: str
    gpu: str
    total_mib: float
    utilisation: float
    more_than_copies: int
    source: str


#: ml.g4dn.4xlarge (one T4), ResNet-50; which format made up the copies is not said.
G4DN_4XLARGE_RESNET50 = PublishedUtilisation(
    model="resnet50",
    spec="torchvision:resnet50",
    instance_type="ml.g4dn.4xlarge",
    gpu="T4",
    total_mib=published_reading("T4").nvml_total_mib,
    utilisation=0.383,
    more_than_copies=16,
    source=BLOG_RUN_MULTIPLE,
)


__all__ = [
    "BENCHMARK_REPO",
    "BLOG_HIGH_PERFORMANCE",
    "BLOG_RUN_MULTIPLE",
    "G4DN_4XLARGE_RESNET50",
    "PUBLISHED",
    "PublishedCount",
    "PublishedUtilisation",
]
