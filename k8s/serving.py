"""Serving manifests: the official `tensorflow/serving` image on the pushed model directory.

The server runs as uid 10001 like every Baton pod (the image's own default is root), with a
read-only root file system and a `/tmp` emptyDir (k8s.security).

`baton serve` speaks TensorFlow Serving's flags, JSON and protos, so on a cluster we can run the
real `tensorflow_model_server` instead: it reads `/artifacts/models/<pipeline>/<version>/`
(the layout the push stage writes) and polls for new versions, so a later push rolls out
without a redeploy. Batching and Prometheus settings are ConfigMaps (text protos) so operators
tune them without rebuilding anything. KServe users get an InferenceService instead.
"""

from __future__ import annotations

import dataclasses

from baton.k8s import pods, security
from baton.k8s.options import JobOptions, pull_policy
from baton.serving.conventions import DEFAULT_GRPC_PORT as GRPC_PORT
from baton.serving.conventions import DEFAULT_PROMETHEUS_PATH as METRICS_PATH
from baton.serving.conventions import DEFAULT_REST_PORT as REST_PORT

CONFIG_DIR = "/etc/tfserving"

BATCHING_PARAMETERS = """\
max_batch_size { value: 64 }
batch_timeout_micros { value: 2000 }
max_enqueued_batches { value: 100 }
num_batch_threads { value: 4 }
"""

MONITORING_CONFIG = f"""\
prometheus_config {{
  enable: true
  path: "{METRICS_PATH}"
}}
"""


def serving_name(opts: JobOptions) -> str:
    return f"{opts.pipeline}-serving"


def build_configmaps(opts: JobOptions) -> list[dict]:
    labels = opts.labels("serving")
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{serving_name(opts)}-batching", "namespace": opts.namespace, "labels": labels},
            "data": {"batching_parameters.txt": BATCHING_PARAMETERS},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{serving_name(opts)}-monitoring", "namespace": opts.namespace, "labels": labels},
            "data": {"monitoring_config.txt": MONITORING_CONFIG},
        },
    ]


def server_args(opts: JobOptions) -> list[str]:
    return [
        f"--port={GRPC_PORT}",
        f"--rest_api_port={REST_PORT}",
        f"--model_name={opts.pipeline}",
        f"--model_base_path={opts.models_dir}",
        "--enable_batching=true",
        f"--batching_parameters_file={CONFIG_DIR}/batching/batching_parameters.txt",
        f"--monitoring_config_file={CONFIG_DIR}/monitoring/monitoring_config.txt",
        "--file_system_poll_wait_seconds=30",
    ]


def build_deployment(opts: JobOptions) -> dict:
    name = serving_name(opts)
    selector = {"app.kubernetes.io/name": "baton", "app.kubernetes.io/instance": name}
    labels = {**opts.labels("serving"), **selector}
    vols, mounts = pods.volumes(opts, read_only=True)
    vols = [v for v in vols if v["name"] == "artifacts"] + [
        {"name": "batching", "configMap": {"name": f"{name}-batching"}},
        {"name": "monitoring", "configMap": {"name": f"{name}-monitoring"}},
    ]
    mounts = [m for m in mounts if m["name"] == "artifacts"] + [
        {"name": "batching", "mountPath": f"{CONFIG_DIR}/batching", "readOnly": True},
        {"name": "monitoring", "mountPath": f"{CONFIG_DIR}/monitoring", "readOnly": True},
    ]
    container = {
        "name": "tensorflow-serving",
        "image": opts.serving_image,
        "imagePullPolicy": pull_policy(opts.serving_image),
        "command": ["tensorflow_model_server"],
        "args": server_args(opts),
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": REST_PORT, "protocol": "TCP"},
        ],
        # The model status endpoint answers 200 only once a version is AVAILABLE.
        "readinessProbe": {
            "httpGet": {"path": f"/v1/models/{opts.pipeline}", "port": REST_PORT},
            "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3,
        },
        "livenessProbe": {
            "tcpSocket": {"port": GRPC_PORT},
            "initialDelaySeconds": 30, "periodSeconds": 20, "failureThreshold": 3,
        },
        # Guaranteed QoS like every Baton pod (requests = limits): a server's CPU limit is the
        # quota its batching threads share, so a noisy neighbour cannot starve it
        "resources": dataclasses.replace(opts.resources, gpu=0).to_k8s(),
        "volumeMounts": mounts,
    }
    return security.harden({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels},
        "spec": {
            "replicas": opts.serving_replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        **pods.ISTIO_OFF,
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(REST_PORT),
                        "prometheus.io/path": METRICS_PATH,
                    },
                },
                "spec": {"securityContext": dict(pods.SECURITY_CONTEXT),
                         "containers": [container], "volumes": vols},
            },
        },
    })


def build_service(opts: JobOptions) -> dict:
    name = serving_name(opts)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": opts.labels("serving")},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": "baton", "app.kubernetes.io/instance": name},
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "http", "port": REST_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def build_inference_service(opts: JobOptions) -> dict:
    """KServe alternative (RawDeployment mode: no Knative or Istio needed)."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": opts.pipeline,
            "namespace": opts.namespace,
            "labels": opts.labels("serving"),
            "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment", **pods.ISTIO_OFF},
        },
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "tensorflow"},
                    "storageUri": f"pvc://{opts.pvc_name}/models/{opts.pipeline}",
                    "resources": {
                        "requests": {"cpu": opts.resources.cpu, "memory": opts.resources.memory},
                        "limits": {"memory": opts.resources.memory},
                    },
                }
            }
        },
    }
