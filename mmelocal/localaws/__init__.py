"""A local AWS for SageMaker multi-model endpoints: moto's control plane and S3 on one port,
with a real MME emulator (Triton) behind every endpoint.

``with LocalAws() as aws:`` then point boto3 at ``aws.url`` (``AWS_ENDPOINT_URL``). The
CLI is ``mmelocal local-aws``; the pytest fixtures are ``local_aws`` and
``local_aws_env`` (:mod:`mmelocal.testing.local_aws_fixtures`).
"""

from mmelocal.localaws.server import LocalAws

__all__ = ["LocalAws"]
