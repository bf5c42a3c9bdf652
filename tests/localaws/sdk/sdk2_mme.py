"""A SageMaker Python SDK 2.x multi-model notebook, as a script: nothing in it knows about
the local AWS (run with the environment ``mmelocal local-aws`` prints).

Usage: python sdk2_mme.py MODEL_TARBALL REQUEST_JSON
"""

import json
import sys
import time
from pathlib import Path

import sagemaker
from sagemaker.multidatamodel import MultiDataModel
from sagemaker.predictor import Predictor
from sagemaker.serializers import JSONSerializer

tarball, request = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
role = "arn:aws:iam::123456789012:role/SageMakerExecution"
image = "763104351884.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"

sess = sagemaker.Session()
bucket = sess.default_bucket()
prefix = f"mme-sdk2-{int(time.time() * 1000)}"
model_data = sess.upload_data(tarball, bucket=bucket, key_prefix=f"{prefix}/staging")
print("uploaded", model_data)

name = f"sdk2-mme-{int(time.time() * 1000)}"
mme = MultiDataModel(
    name=name,
    model_data_prefix=f"s3://{bucket}/{prefix}/models/",
    image_uri=image,
    role=role,
    sagemaker_session=sess,
)
mme.add_model(model_data_source=model_data, model_data_path="model.tar.gz")
print("models", list(mme.list_models()))
mme.deploy(initial_instance_count=1, instance_type="ml.g5.xlarge", endpoint_name=name, wait=False)
sess.wait_for_endpoint(name, poll=1)

predictor = Predictor(endpoint_name=name, sagemaker_session=sess, serializer=JSONSerializer())
answer = json.loads(predictor.predict(request, target_model="model.tar.gz"))
print("outputs", json.dumps(answer["outputs"][0]["data"]))

predictor.delete_endpoint()
mme.delete_model()
print("deleted", name)
