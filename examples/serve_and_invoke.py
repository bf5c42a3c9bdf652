"""Serve a folder of tarballs as a SageMaker multi-model endpoint and invoke it with boto3.

    .venv/bin/python examples/serve_and_invoke.py [WORKDIR]

The emulator starts the pip ``tritonserver``; boto3's ``sagemaker-runtime`` client is
unchanged, only pointed at the emulator's URL. The first call to a model loads it (cold);
the second is served from memory (``X-Mmelocal-Model-Cache: hit``).
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from pathlib import Path

import boto3
import numpy as np

from mmelocal import EmulatorConfig, EmulatorServer, mib
from mmelocal.testing.tiny_model import expected, request_json, write_tarball


def main(workdir: Path) -> None:
    """Two models in a store, each invoked twice through boto3; answers checked."""
    store = workdir / "store"
    store.mkdir(parents=True, exist_ok=True)
    write_tarball(store / "model-1.tar.gz", scale=2.0)
    write_tarball(store / "model-2.tar.gz", scale=3.0)
    config = EmulatorConfig(
        store=str(store), cache_dir=workdir / "cache", memory_budget_bytes=2 * 1024**3
    )
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with EmulatorServer(config) as server:
        runtime = boto3.client(
            "sagemaker-runtime",
            endpoint_url=server.url,
            region_name="us-east-1",
            aws_access_key_id="any",  # signatures are not checked
            aws_secret_access_key="any",
        )
        for target, scale in (("model-1.tar.gz", 2.0), ("model-2.tar.gz", 3.0)):
            for call in ("cold", "warm"):
                answer = runtime.invoke_endpoint(
                    EndpointName="local",
                    TargetModel=target,
                    ContentType="application/json",
                    Body=json.dumps(request_json(x)),
                )
                body = json.loads(answer["Body"].read())
                out = np.asarray(body["outputs"][0]["data"], np.float32).reshape(1, 4)
                assert np.allclose(out, expected(x, scale)), (target, out)
                print(f"{target} ({call}): {out.ravel().tolist()}")
        with urllib.request.urlopen(f"{server.url}/emulator/state") as reply:
            instance = json.load(reply)["instances"][0]  # what SageMaker never shows
        print(f"loaded: {len(instance['loaded'])}, memory {mib(instance['memory_used_bytes'])}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
