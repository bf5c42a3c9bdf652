"""A running Triton: launchers, readiness, clients, Python-backend model copies, ``check``.

==================  ==========================================================================
``server_config``   :class:`~mmelocal.runtime.server_config.ServerConfig`: tritonserver options
``launcher``        the :class:`~mmelocal.runtime.launcher.TritonLauncher` protocol, ``Endpoints``
``install``         find tritonserver, assemble its Python backend, its environment
``local``           :class:`~mmelocal.runtime.local.LocalLauncher`: the pip binary as a child
``docker``          :class:`~mmelocal.runtime.docker.DockerLauncher`: a Triton image
``docker_engine``   the Docker engine: client, images, labels, clean-up
``docker_gpus``     which GPUs the Docker launcher's container gets (asked as ``docker_host`` asks)
``external``        :class:`~mmelocal.runtime.external.ExternalLauncher`: a running server
``detached``        servers that outlive their command (``mmelocal triton start``)
``readiness``       :func:`~mmelocal.runtime.readiness.wait_until_ready`, health probes
``shutdown``        :func:`~mmelocal.runtime.shutdown.unload_before_stop`: a quick clean stop
``client``          :class:`~mmelocal.runtime.client.TritonClient`: numpy in, numpy out
``client_errors``   how tritonclient failures become mmelocal errors (dead server, timeout)
``sagemaker``       Triton's MME routes: the contract, ``TARGET_MODEL_HEADER``, ``load_body``
``python_copies``   Python-backend copies of TorchScript / ONNX / TensorRT models
``samples``         sample requests from a config, output checks
``memory``          PSS/USS/RSS of the server's process tree, GPU memory via NVML
``check``           :func:`~mmelocal.runtime.check.check_path` (``mmelocal check``)
==================  ==========================================================================

Nothing is imported here: import the module you need.
"""
