"""Plan a deploy of a store to a SageMaker multi-model endpoint, changing nothing.

    .venv/bin/python examples/deploy_dry_run.py STORE s3://BUCKET/PREFIX/ ROLE_ARN

The plan comes from read-only calls (the bucket's region, a HeadObject per tarball,
describes of the model, config and endpoint) and every request in it is validated
against botocore's service model. AWS is found the usual way (profile, environment,
``AWS_ENDPOINT_URL`` for a local stand-in such as ``mmelocal local-aws``, which the test
uses). Apply it with ``apply_plan(plan, clients, options=options)``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mmelocal import DeployOptions, connect_aws, make_plan, mib


def main(store: Path, s3_uri: str, role_arn: str) -> None:
    """Print what a deploy of ``store`` would do, step by step."""
    options = DeployOptions(
        store=store,
        endpoint_name="example-mme",
        s3_uri=s3_uri,
        role_arn=role_arn,
        instance_type="ml.g4dn.xlarge",
        max_instances=2,
    )
    clients = connect_aws()
    plan = make_plan(options, clients)
    for obj in plan.objects:
        print(f"s3 {obj.action}: {obj.key} ({mib(obj.size_bytes, digits=1)})")
    for step in plan.steps:
        after = " (once InService)" if step.needs_in_service else ""
        print(f"{step.service} {step.operation} {step.action}: {step.resource}{after}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
