"""SageMaker's public Triton MME GPU example (ResNet-50 PyTorch + TensorRT), as a plain boto3
script with only the endpoint URL changed, and the 200-copies walk-through.

The call sequence follows aws/amazon-sagemaker-examples' Triton multi-model notebook
(upload the tarballs, ``create_model`` with ``Mode: MultiModel``, ``create_endpoint_config``
on a GPU type, ``create_endpoint``, a ``describe_endpoint`` loop, autoscaling registration,
``invoke_endpoint`` of both ``TargetModel``s, deletes), on a CPU-sized CNN.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import boto3
import numpy as np
import pytest
from botocore.exceptions import ClientError
from localaws_helpers import (
    IMAGE_SHAPE,
    INSTANCE_TYPE,
    ROLE,
    TRITON_IMAGE,
    model_and_config,
    tritonservers,
    unique,
    wait_gone,
    wait_status,
    write_cnn_tarball,
    write_trt_tarball,
)

from mmelocal.localaws import LocalAws
from mmelocal.testing.tiny_model import expected, request_json, write_tarball

pytestmark = pytest.mark.triton


def test_the_triton_mme_example_runs_unchanged(local_aws_env: LocalAws, tmp_path: Path) -> None:
    before = {p.pid for p in tritonservers()}
    sm_client = boto3.client(service_name="sagemaker")
    runtime_sm_client = boto3.client("sagemaker-runtime")
    s3 = boto3.client("s3")
    bucket = unique("sagemaker-us-east-1")
    prefix = "resnet-mme-gpu"
    s3.create_bucket(Bucket=bucket)

    forward = write_cnn_tarball(tmp_path / "resnet_pt_v0.tar.gz")
    write_trt_tarball(tmp_path / "resnet_trt_v0.tar.gz")
    for name in ("resnet_pt_v0.tar.gz", "resnet_trt_v0.tar.gz"):
        s3.upload_file(str(tmp_path / name), bucket, f"{prefix}/{name}")
    model_data_url = f"s3://{bucket}/{prefix}/"

    sm_model_name = unique("resnet-mme-gpu")
    container = {"Image": TRITON_IMAGE, "ModelDataUrl": model_data_url, "Mode": "MultiModel"}
    create_model_response = sm_client.create_model(
        ModelName=sm_model_name, ExecutionRoleArn=ROLE, PrimaryContainer=container
    )
    assert create_model_response["ModelArn"].endswith(f"model/{sm_model_name}")
    endpoint_config_name = unique("resnet-mme-gpu-config")
    sm_client.create_endpoint_config(
        EndpointConfigName=endpoint_config_name,
        ProductionVariants=[
            {
                "InstanceType": INSTANCE_TYPE,
                "InitialVariantWeight": 1,
                "InitialInstanceCount": 1,
                "ModelName": sm_model_name,
                "VariantName": "AllTraffic",
            }
        ],
    )
    config = sm_client.describe_endpoint_config(EndpointConfigName=endpoint_config_name)
    assert config["ProductionVariants"][0]["InstanceType"] == INSTANCE_TYPE
    endpoint_name = unique("resnet-mme-gpu-ep")
    sm_client.create_endpoint(EndpointName=endpoint_name, EndpointConfigName=endpoint_config_name)
    resp = sm_client.describe_endpoint(EndpointName=endpoint_name)
    assert resp["EndpointStatus"] == "Creating"
    resp = wait_status(sm_client, endpoint_name, leaving="Creating")
    assert resp["EndpointStatus"] == "InService", resp.get("FailureReason")
    assert resp["ProductionVariants"][0]["CurrentInstanceCount"] == 1

    auto_scaling_client = boto3.client("application-autoscaling")
    resource_id = f"endpoint/{endpoint_name}/variant/AllTraffic"
    auto_scaling_client.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId=resource_id,
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        MinCapacity=1,
        MaxCapacity=5,
    )
    auto_scaling_client.put_scaling_policy(
        PolicyName="GPUUtil-ScalingPolicy",
        ServiceNamespace="sagemaker",
        ResourceId=resource_id,
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration={
            "TargetValue": 60.0,
            "CustomizedMetricSpecification": {
                "MetricName": "GPUUtilization",
                "Namespace": "/aws/sagemaker/Endpoints",
                "Dimensions": [
                    {"Name": "EndpointName", "Value": endpoint_name},
                    {"Name": "VariantName", "Value": "AllTraffic"},
                ],
                "Statistic": "Average",
                "Unit": "Percent",
            },
            "ScaleInCooldown": 600,
            "ScaleOutCooldown": 200,
        },
    )
    policies = auto_scaling_client.describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=resource_id
    )["ScalingPolicies"]
    assert [p["PolicyName"] for p in policies] == ["GPUUtil-ScalingPolicy"]

    x = np.random.default_rng(0).random((1, *IMAGE_SHAPE), dtype=np.float32)
    payload = {
        "inputs": [
            {"name": "INPUT__0", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
        ]
    }
    response = runtime_sm_client.invoke_endpoint(
        EndpointName=endpoint_name,
        ContentType="application/octet-stream",
        Body=json.dumps(payload),
        TargetModel="resnet_pt_v0.tar.gz",
    )
    assert response["InvokedProductionVariant"] == "AllTraffic"
    output = json.loads(response["Body"].read().decode("utf8"))["outputs"][0]
    answer = np.array(output["data"], dtype=np.float32).reshape(output["shape"])
    np.testing.assert_allclose(answer, forward(x), rtol=1e-4, atol=1e-5)

    payload["inputs"][0]["name"] = "input"
    with pytest.raises(ClientError) as info:
        runtime_sm_client.invoke_endpoint(
            EndpointName=endpoint_name,
            ContentType="application/octet-stream",
            Body=json.dumps(payload),
            TargetModel="resnet_trt_v0.tar.gz",
        )
    message = info.value.response["Error"]["Message"]
    assert "TensorRT" in message and "GPU" in message, message

    sm_client.delete_endpoint(EndpointName=endpoint_name)
    sm_client.delete_endpoint_config(EndpointConfigName=endpoint_config_name)
    sm_client.delete_model(ModelName=sm_model_name)
    wait_gone(sm_client, endpoint_name)
    assert {p.pid for p in tritonservers()} <= before  # its Triton stopped with it


def test_two_hundred_copies_under_one_prefix(local_aws_env: LocalAws, tmp_path: Path) -> None:
    s3 = boto3.client("s3")
    sm = boto3.client("sagemaker")
    bucket, prefix = unique("mme-copies"), "copies"
    s3.create_bucket(Bucket=bucket)
    data = write_tarball(tmp_path / "model.tar.gz", scale=3.0).read_bytes()
    for index in range(200):
        s3.upload_fileobj(io.BytesIO(data), bucket, f"{prefix}/model-{index}.tar.gz")
    name = unique("copies")
    config = model_and_config(f"s3://{bucket}/{prefix}/", instance_type="ml.g4dn.xlarge")
    sm.create_endpoint(EndpointName=name, EndpointConfigName=config)
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 900}
    )
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    runtime = boto3.client("sagemaker-runtime")
    answer = runtime.invoke_endpoint(
        EndpointName=name,
        TargetModel="model-199.tar.gz",
        ContentType="application/json",
        Body=json.dumps(request_json(x)),
    )
    output = json.loads(answer["Body"].read())["outputs"][0]
    np.testing.assert_array_equal(
        np.array(output["data"], dtype=np.float32).reshape(output["shape"]), expected(x, 3.0)
    )
    assert len(s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]) == 200
    sm.delete_endpoint(EndpointName=name)
    wait_gone(sm, name)
