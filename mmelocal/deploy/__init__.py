"""Deploy a model store to a real SageMaker multi-model endpoint, and take it down again.

One module per concept: :mod:`~mmelocal.deploy.plan` (the plan, pure data),
:mod:`~mmelocal.deploy.images` (SageMaker's Triton image per region),
:mod:`~mmelocal.deploy.session` (credentials, region, clients),
:mod:`~mmelocal.deploy.upload` (the store's tarballs to S3),
:mod:`~mmelocal.deploy.resources` (the API requests, validated offline against botocore's
service models), :mod:`~mmelocal.deploy.sizing` (the instance type a capacity result
asks for), :mod:`~mmelocal.deploy.deployer` (plan, apply, undeploy) and
:mod:`~mmelocal.deploy.smoke` (the emulator's answer checks against a deployed endpoint).
"""
