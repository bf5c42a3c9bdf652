"""SageMaker's Triton Inference Server image (the "DLC" that serves GPU MMEs) a deploy uses.

The table (which account serves which release in which region, and the default release)
is :mod:`mmelocal.facts.triton_images`; this module names its refusals for the deploy
command. A region or release missing there: pass ``--image URI``.
"""

from __future__ import annotations

from mmelocal.errors import DeployError, UserInputError
from mmelocal.facts.triton_images import (
    DEFAULT_SAGEMAKER_RELEASE,
    REPOSITORY,
    regions,
    releases,
    sagemaker_image_uri,
)

#: the release a deploy uses unless ``--triton-version`` says otherwise
DEFAULT_TRITON_VERSION = DEFAULT_SAGEMAKER_RELEASE
#: every release in the table, oldest first
TRITON_VERSIONS = releases()


def triton_image_uri(region: str, version: str = DEFAULT_TRITON_VERSION) -> str:
    """The SageMaker Triton image URI for ``region`` (e.g. ``763104351884.dkr.ecr.us-east-1.
    amazonaws.com/sagemaker-tritonserver:24.09-py3``)."""
    try:
        return sagemaker_image_uri(region, version)
    except UserInputError as exc:
        other = (
            "pass --triton-version with a release published there, or "
            if region in regions()
            else ""
        )
        raise DeployError(f"{exc}: {other}pass --image URI") from None


__all__ = ["DEFAULT_TRITON_VERSION", "REPOSITORY", "TRITON_VERSIONS", "triton_image_uri"]
