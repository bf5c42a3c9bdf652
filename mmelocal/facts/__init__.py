"""The platform's facts, one home each: SageMaker's limits, timeouts, header names, statuses
and error table, the memory threshold, retry policies, card memory, CloudWatch names,
autoscaling numbers and SageMaker's Triton images. Modules here import nothing from
mmelocal but ``errors``, ``units`` and each other.

- :mod:`~mmelocal.facts.sagemaker`: the InvokeEndpoint body cap, the endpoint-name and
  TargetModel rules, the platform's times and mmelocal's own waits and hot-model rate
  (named apart), the memory threshold, header names;
- :mod:`~mmelocal.facts.invoke_errors`: which failure reaches the caller with which status,
  error type and fields (``docs/errors.md`` is tested equal to it);
- :mod:`~mmelocal.facts.aws`: the retry and timeout policies of every AWS client, and the
  one factory that makes them;
- :mod:`~mmelocal.facts.cards` and ``gpus.yaml``: card memory and the published runs'
  readings, one data file;
- :mod:`~mmelocal.facts.runtime_api`: production variants (the target-variant header, the
  service's messages, weights, the default name) and the endpoint log group and stream names;
- :mod:`~mmelocal.facts.traffic`: the GPU instance types a multi-model endpoint takes;
- :mod:`~mmelocal.facts.cloudwatch`, :mod:`~mmelocal.facts.autoscaling`: CloudWatch names
  and Application Auto Scaling's numbers.
- :mod:`~mmelocal.facts.triton_images`: SageMaker's Triton images, which account serves
  which release in which region, the default release and the image names.
"""
