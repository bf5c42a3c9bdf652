"""The SageMaker multi-model endpoint platform, emulated in front of real Triton servers.

What SageMaker does between the client and the Triton container, done locally::

    client (boto3 / tritonclient)
      │  POST /endpoints/{name}/invocations, /v2/models/{target}/infer
      ▼
    http_server.py           the one HTTP server (httptools), pipelining bounded,
                             one deadline check per connection
    invocation.py            the one path of every invocation, warm or cold
    routes.py                every other route: ping, metrics, state, KServe v2 reads
    answers.py               boto3-exact answers, the error table, v2 binary translation
    emulator.py              Emulator: the facade the HTTP layer drives
    emulator_config.py       EmulatorConfig: what one emulated endpoint runs
    router.py                model affinity, most free memory for cold models, hot replicas
    instance.py              one Triton: composes the parts below; single-flight loads, invoke
    model_state.py           its loaded set (LoadedSet, ModelEntry) and options
    loading.py               Loader: fetch, make room, POST /models
    eviction.py + lru.py     Evictor: least recently used eviction (pure policy in lru.py)
    footprints.py            a model's part of the memory: at its load, later, at its unload
    trim.py                  Trimmer: the watchdog's trim of memory grown over the limit
    sagemaker_control.py + upstream.py
                             the one client to Triton: loads, unloads, invokes, v2 reads
    gauge.py + probes.py     memory: NVML on a GPU, PSS of the Triton tree on a CPU
    cache.py + store.py      artifacts: local folder or S3 -> safe extraction -> disk budget
    recovery.py              the watchdog: restart a dead Triton, load its models again
    metrics.py + events.py   CloudWatch-named metrics, the load/unload/eviction log
    server.py                run it: foreground (``mmelocal serve``) or on a thread

Triton is driven through its SageMaker front end exactly as SageMaker does
(``POST /models``, ``DELETE /models/KEY``, ``POST /models/KEY/invoke`` with
``X-Amzn-SageMaker-Target-Model``).
"""
