"""Facts the traffic commands use: which GPU instance types a multi-model endpoint takes.

Source: "Supported algorithms, frameworks, and instances for multi-model endpoints", GPU
section (https://docs.aws.amazon.com/sagemaker/latest/dg/multi-model-support.html), read
2026-11-25: every listed type has one GPU (p2 K80 12 GB, p3 V100 16 GB, g5 A10G 24 GB,
g4dn T4 16 GB). Newer families (g6, g6e, p4d, p5) are not in that list; add them here when
the page does.
"""

from __future__ import annotations

#: the GPU instance types the documentation lists for MME, in its order
MME_GPU_INSTANCE_TYPES: tuple[str, ...] = (
    "ml.p2.xlarge",
    "ml.p3.2xlarge",
    "ml.g5.xlarge",
    "ml.g5.2xlarge",
    "ml.g5.4xlarge",
    "ml.g5.8xlarge",
    "ml.g5.16xlarge",
    "ml.g4dn.xlarge",
    "ml.g4dn.2xlarge",
    "ml.g4dn.4xlarge",
    "ml.g4dn.8xlarge",
    "ml.g4dn.16xlarge",
)
MME_GPU_DOC_URL = "https://docs.aws.amazon.com/sagemaker/latest/dg/multi-model-support.html"

__all__ = ["MME_GPU_DOC_URL", "MME_GPU_INSTANCE_TYPES"]
