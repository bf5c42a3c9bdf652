"""Deploy a model store to a real SageMaker multi-model endpoint, and take it down again.

One module per concept: :mod:`~mmelocal.deploy.plan` (the plan, pure data),
:mod:`~mmelocal.deploy.images` (SageMaker's Triton image per region),
:mod:`~mmelocal.deploy.upload` (the store's tarballs to S3),
:mod:`~mmelocal.deploy.artifacts` (whose objects a prefix holds, which models read them),
:mod:`~mmelocal.deploy.resources` (the API requests, validated offline against botocore's
service models), :mod:`~mmelocal.deploy.deployer` (plan, apply),
:mod:`~mmelocal.deploy.waits` (polling an endpoint until InService, or until it settles),
:mod:`~mmelocal.deploy.undeploy` (what mmelocal created for an endpoint, deleted),
:mod:`~mmelocal.deploy.temporary` (an endpoint for one ``with`` block) and
:mod:`~mmelocal.deploy.smoke` (the emulator's answer checks against a deployed endpoint).
Credentials, region, clients and S3 helpers come from :mod:`mmelocal.aws` (its former path
``mmelocal.deploy.session`` still imports); the instance type a capacity result asks for
is the bench's (:mod:`mmelocal.bench.capacity.sizing`; its former path
``mmelocal.deploy.sizing`` still imports: the bench is loaded only when that old path is,
deploy's own modules never import it).
"""

from __future__ import annotations

from mmelocal._moved import keep_old_paths

keep_old_paths(
    __name__, {"session": "mmelocal.aws.session", "sizing": "mmelocal.bench.capacity.sizing"}
)
