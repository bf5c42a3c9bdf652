"""Constants and builders the deploy tests share (imported by name, not as fixtures)."""

from __future__ import annotations

from shared_helpers import write_reference_tarball  # noqa: F401 (re-exported)

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerExecution"
#: a GPU type moto's (lagging) instance list accepts
INSTANCE_TYPE = "ml.g4dn.xlarge"
