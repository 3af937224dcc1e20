"""The SuperLink on a cluster: its state claim, Deployment (one replica, Recreate) and Service.

Baton's launcher (pipeline.federated.superlink) runs Flower's SuperLink with TLS, only
registered SuperNodes, the Control API behind its token, and ServerApps taken by a SuperExec
holding the secret; its database is on its own claim (an emptyDir on a bucket run).
"""

from __future__ import annotations

from baton.k8s import pods
from baton.k8s.federation_config import Federation
from baton.k8s.federation_names import (
    CREDENTIALS_DIR,
    LAUNCHER,
    PORT,
    STATE_DIR,
    superlink_name,
    superlink_secret_name,
)
from baton.k8s.federation_pods import (
    _credentials_volume,
    _deployment,
    _env,
    _flwr_home,
    _pvc,
    _selector,
)
from baton.k8s.options import JobOptions


def superlink_command() -> tuple[list[str], list[str]]:
    """Baton's SuperLink launcher (pipeline.federated.superlink) with Flower's own flags: TLS,
    only registered SuperNodes, ServerApps taken by a SuperExec holding the secret; the
    Control API token comes from BATON_CONTROL_TOKEN_FILE. It binds 0.0.0.0 (the Service's
    port) with TLS and authentication on every API."""
    d = CREDENTIALS_DIR
    return [*LAUNCHER, "baton.pipeline.federated.superlink"], [
        "--ssl-ca-certfile", f"{d}/ca.crt", "--ssl-certfile", f"{d}/tls.crt",
        "--ssl-keyfile", f"{d}/tls.key", "--enable-supernode-auth",
        "--isolation", "process", "--superexec-auth-secret-file", f"{d}/superexec.secret",
        "--host", "0.0.0.0", "--port", str(PORT),
        "--database", f"{STATE_DIR}/superlink.db", "--disable-runtime-dependency-installation",
    ]


def build_superlink(opts: JobOptions, fed: Federation) -> list[dict]:
    """The SuperLink's state claim, Deployment and Service."""
    name = superlink_name(opts)
    labels = opts.labels("superlink")
    state = f"{name}-state"
    vols, mounts = pods.volumes(opts)  # artifacts (read-write: the ServerApp's outputs) + spec
    home_vol, home_mount = _flwr_home()
    cred_vol, cred_mount = _credentials_volume(superlink_secret_name(opts))
    # on a bucket no claim at all: the database lives as long as the pod (a restarted SuperLink
    # forgets its nodes and runs; the run Job, retried by backoffLimit, registers and submits again)
    state_vol = {"name": "state", **({"emptyDir": {"sizeLimit": fed.state_size}} if opts.storage
                                    else {"persistentVolumeClaim": {"claimName": state}})}
    vols = [*vols, state_vol, home_vol, cred_vol]
    mounts = [*mounts, {"name": "state", "mountPath": STATE_DIR}, home_mount, cred_mount]
    command, args = superlink_command()
    container = {
        "name": "superlink",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": [*_env(opts), {"name": "BATON_CONTROL_TOKEN_FILE",
                              "value": f"{CREDENTIALS_DIR}/control.token"}],
        "ports": [{"name": "flower", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "initialDelaySeconds": 5,
                           "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": PORT}, "initialDelaySeconds": 30,
                          "periodSeconds": 20, "failureThreshold": 3},
        "resources": opts.resources.to_k8s(),
        "volumeMounts": mounts,
    }
    deployment = _deployment(opts, name, labels, {"baton.dev/stage": fed.stage},
                             {"containers": [container], "volumes": vols})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(name),
            "ports": [{"name": "flower", "port": PORT, "targetPort": "flower", "protocol": "TCP"}],
        },
    }
    return [*([] if opts.storage else [_pvc(opts, state, fed.state_size, labels)]), deployment,
            service]


