"""The published procedure on a deployed SageMaker multi-model endpoint: the endpoint as a
bench target with its memory probe (:mod:`~mmelocal.bench.endpoint.remote`), the max-models
loop (:mod:`~mmelocal.bench.endpoint.capacity`), the sweep's variants as TargetModels
(:mod:`~mmelocal.bench.endpoint.sweep`), the whole benchmark
(:mod:`~mmelocal.bench.endpoint.benchmark`) and its result
(:mod:`~mmelocal.bench.endpoint.result`)."""
