"""SageMaker's Triton Inference Server images (the "DLC" that serves GPU MMEs), per region.

The account ids are the ``registries`` of ``sagemaker-tritonserver`` in the SageMaker Python
SDK's ``src/sagemaker/image_uri_config/sagemaker-tritonserver.json``
(github.com/aws/sagemaker-python-sdk; the same table for 23.12, 24.01, 24.03, 24.05 and 24.09).
A region or version missing here is not refused by SageMaker: pass ``--image URI``.
"""

from __future__ import annotations

from mmelocal.errors import DeployError

REPOSITORY = "sagemaker-tritonserver"
DEFAULT_TRITON_VERSION = "24.09"
TRITON_VERSIONS = ("23.12", "24.01", "24.03", "24.05", "24.09")

#: region -> ECR account that hosts the SageMaker Triton images there
TRITON_REGISTRIES: dict[str, str] = {
    "af-south-1": "626614931356",
    "il-central-1": "780543022126",
    "ap-east-1": "871362719292",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-north-1": "763104351884",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "eu-south-1": "692866216735",
    "me-south-1": "217643126080",
    "sa-east-1": "763104351884",
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
}


def triton_image_uri(region: str, version: str = DEFAULT_TRITON_VERSION) -> str:
    """The SageMaker Triton image URI for ``region`` (e.g. ``763104351884.dkr.ecr.us-east-1.
    amazonaws.com/sagemaker-tritonserver:24.09-py3``)."""
    account = TRITON_REGISTRIES.get(region)
    if account is None:
        raise DeployError(
            f"no SageMaker Triton image known for region {region!r} (known: "
            f"{', '.join(sorted(TRITON_REGISTRIES))}): pass --image URI"
        )
    if version not in TRITON_VERSIONS:
        raise DeployError(
            f"Triton version {version!r} is not in the image table (known: "
            f"{', '.join(TRITON_VERSIONS)}): pick one of those or pass --image URI"
        )
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{REPOSITORY}:{version}-py3"


__all__ = ["DEFAULT_TRITON_VERSION", "TRITON_REGISTRIES", "TRITON_VERSIONS", "triton_image_uri"]
