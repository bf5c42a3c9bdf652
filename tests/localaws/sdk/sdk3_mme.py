"""A SageMaker Python SDK 3.x multi-model notebook, as a script: nothing in it knows about
the local AWS (run with the environment ``mmelocal local-aws`` prints).

Usage: python sdk3_mme.py MODEL_TARBALL REQUEST_JSON
"""

import json
import sys
import time
from pathlib import Path

from sagemaker.core.helper.session_helper import Session
from sagemaker.core.resources import Endpoint, EndpointConfig, Model
from sagemaker.core.shapes import ContainerDefinition, ProductionVariant

tarball, request = sys.argv[1], Path(sys.argv[2]).read_text()
role = "arn:aws:iam::123456789012:role/SageMakerExecution"
image = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"

sess = Session()
bucket = sess.default_bucket()
prefix = f"mme-sdk3-{int(time.time() * 1000)}"
print("uploaded", sess.upload_data(tarball, bucket=bucket, key_prefix=f"{prefix}/models"))

name = f"sdk3-mme-{int(time.time() * 1000)}"
model = Model.create(
    model_name=name,
    execution_role_arn=role,
    primary_container=ContainerDefinition(
        image=image, model_data_url=f"s3://{bucket}/{prefix}/models/", mode="MultiModel"
    ),
)
config = EndpointConfig.create(
    endpoint_config_name=name,
    production_variants=[
        ProductionVariant(
            variant_name="AllTraffic",
            model_name=name,
            instance_type="ml.g5.xlarge",
            initial_instance_count=1,
        )
    ],
)
endpoint = Endpoint.create(endpoint_name=name, endpoint_config_name=name)
endpoint.wait_for_status("InService", poll=1)

answer = endpoint.invoke(body=request, content_type="application/json", target_model="model.tar.gz")
print("outputs", json.dumps(json.loads(answer.body.read())["outputs"][0]["data"]))

endpoint.delete()
config.delete()
model.delete()
print("deleted", name)
