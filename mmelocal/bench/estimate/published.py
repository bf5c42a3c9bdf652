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
``(last - first) / (printed - 1) x total``).

The one figure from the earlier AWS ML blog post "Run multiple deep learning models on GPU
with Amazon SageMaker multi-model endpoints" is kept apart (:data:`G4DN_4XLARGE_RESNET50`):
GPU memory utilisation 38.3 % "when more than 16" ResNet-50 models were loaded on one T4.

Not here, because mmelocal could not read them: the tables of the blog post itself (A10G /
ml.g5 and convnext figures); only its opening is in the reference store.
"""

from __future__ import annotations

from dataclasses import dataclass

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


#: the cards' totals and baselines as the runs read them (ECC on), from the one data file
_T4, _V100 = published_reading("T4"), published_reading("V100")

_CV_AT = "ebcfe11ce1739b9f016d2483471dbf247d95f979"
_VIT_P3_AT = "f8439c79e830a619bed2a388129bb9e913f4c5ea"
_VIT_G4_AT = "ff1282a6b79bf8a7e48555f34e7e6eea4c037494"

#: The published counts (T4 = ml.g4dn.2xlarge, V100 = ml.p3.2xlarge), one row per run.
PUBLISHED: tuple[PublishedCount, ...] = (
    PublishedCount(
        model="resnet50",
        spec="torchvision:resnet50",
        params=25_557_032,
        platform="pytorch_libtorch",
        precision="fp32",
        **_T4.run_fields(),
        first_util=0.0802,
        last_util=0.8700,
        printed=45,
        count=46,
        max_shape_batch=1,
        seq_len=None,
        source=_nb(_CV_AT, "cv-benchmark.ipynb"),
    ),
    PublishedCount(
        model="resnet50",
        spec="torchvision:resnet50",
        params=25_557_032,
        platform="tensorrt_plan",
        precision="fp16",
        **_T4.run_fields(),
        first_util=0.0723,
        last_util=0.8502,
        printed=22,
        count=23,
        max_shape_batch=128,
        seq_len=None,
        source=_nb(_CV_AT, "cv-benchmark.ipynb"),
    ),
    PublishedCount(
        model="bert-base-uncased",
        spec="bert-base-uncased",
        params=109_482_240,
        platform="pytorch_libtorch",
        precision="fp32",
        **_T4.run_fields(),
        first_util=0.0791,
        last_util=0.8498,
        printed=25,
        count=26,
        max_shape_batch=1,
        seq_len=128,
        source=_nb(_CV_AT, "nlp_benchmark.ipynb"),
    ),
    PublishedCount(
        model="bert-base-uncased",
        spec="bert-base-uncased",
        params=109_482_240,
        platform="tensorrt_plan",
        precision="fp16",
        **_T4.run_fields(),
        first_util=0.0506,
        last_util=0.8758,
        printed=41,
        count=42,
        max_shape_batch=32,
        seq_len=128,
        source=_nb(_CV_AT, "nlp_benchmark.ipynb"),
    ),
    PublishedCount(
        model="vit_large_patch16_224",
        spec="timm:vit_large_patch16_224",
        params=304_326_632,
        platform="pytorch_libtorch",
        precision="fp32",
        **_T4.run_fields(),
        first_util=0.1420,
        last_util=0.7797,
        printed=9,
        count=10,
        max_shape_batch=1,
        seq_len=None,
        source=_nb(_VIT_G4_AT, "cv-benchmark.ipynb"),
    ),
    PublishedCount(
        model="vit_large_patch16_224",
        spec="timm:vit_large_patch16_224",
        params=304_326_632,
        platform="pytorch_libtorch",
        precision="fp32",
        **_V100.run_fields(),
        first_util=0.1452,
        last_util=0.8161,
        printed=10,
        count=11,
        max_shape_batch=1,
        seq_len=None,
        source=_nb(_VIT_P3_AT, "cv-benchmark.ipynb"),
    ),
    PublishedCount(
        model="vit_large_patch16_224",
        spec="timm:vit_large_patch16_224",
        params=304_326_632,
        platform="tensorrt_plan",
        precision="fp16",
        **_V100.run_fields(),
        first_util=0.1300,
        last_util=0.7504,
        printed=8,
        count=9,
        max_shape_batch=128,
        seq_len=None,
        source=_nb(_VIT_P3_AT, "cv-benchmark.ipynb"),
    ),
    PublishedCount(
        model="roberta-large",
        spec="roberta-large",
        params=355_359_744,
        platform="pytorch_libtorch",
        precision="fp32",
        **_V100.run_fields(),
        first_util=0.1418,
        last_util=0.7439,
        printed=8,
        count=9,
        max_shape_batch=1,
        seq_len=128,
        source=_nb(_VIT_P3_AT, "nlp_benchmark.ipynb"),
    ),
    PublishedCount(
        model="roberta-large",
        spec="roberta-large",
        params=355_359_744,
        platform="tensorrt_plan",
        precision="fp16",
        **_V100.run_fields(),
        first_util=0.1335,
        last_util=0.7781,
        printed=8,
        count=9,
        max_shape_batch=32,
        seq_len=128,
        source=_nb(_VIT_P3_AT, "nlp_benchmark.ipynb"),
    ),
)


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
    total_mib=_T4.nvml_total_mib,
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
