"""The SuperNodes on a cluster: one Deployment per client, with only that client's data.

A real silo's examples are on a claim of its own (or pulled from its bucket); a rehearsal's
silo is a `subPath` of the artifacts claim where the run Job's stage partitions its examples
input (or pulled from the run on the bucket). Each node starts once its examples are complete.
"""

from __future__ import annotations

from baton.k8s.federation_config import FederatedClient, Federation
from baton.k8s.federation_names import (
    CLIENT_LABEL,
    CREDENTIALS_DIR,
    DATA_DIR,
    LAUNCHER,
    NODE_PORT,
    data_claim,
    node_name,
    node_secret_name,
    silo_subpath,
    superlink_address,
)
from baton.k8s.federation_pods import (
    _credentials_volume,
    _deployment,
    _env,
    _flwr_home,
    _pvc,
    _spec_volume,
)
from baton.k8s.options import OBJECT_STORAGE_SCHEMES, JobOptions
from baton.strategies.federation_files import SILOS_DIR, federation_dir


def supernode_command(superlink: str, client: FederatedClient) -> tuple[list[str], list[str]]:
    """Baton's SuperNode launcher (pipeline.federated.supernode): Flower's SuperNode verifying
    the SuperLink against the CA and proving its registered key, its ClientAppIo API on
    127.0.0.1 (never reachable from outside the pod), and the warm ClientApp host that alone
    may take its tasks (the SuperExec secret)."""
    d = CREDENTIALS_DIR
    return [*LAUNCHER, "baton.pipeline.federated.supernode"], [
        "--root-certificates", f"{d}/ca.crt", "--auth-supernode-private-key", f"{d}/node.key",
        "--superlink", superlink, "--host", "127.0.0.1", "--port", str(NODE_PORT),
        "--isolation", "process", "--superexec-auth-secret-file", f"{d}/superexec.secret",
        "--node-config", f"data-dir='{DATA_DIR}' client='{client.name}'",
    ]


def silo_url(opts: JobOptions, fed: Federation, client: FederatedClient) -> str | None:
    """Where this client's examples are on a bucket (None: on a volume): a rehearsal's silo under
    the run on the bucket runs directory, or a listed silo's own `examples: s3://...`."""
    if fed.rehearsal:
        return (f"{federation_dir(opts.run_dir, fed.stage)}/{SILOS_DIR}/{client.name}"
                if opts.storage else None)
    return client.examples if client.examples and is_bucket_url(client.examples) else None


def is_bucket_url(text: str) -> bool:
    return text.startswith(OBJECT_STORAGE_SCHEMES)


def _data_volume(opts: JobOptions, fed: Federation, client: FederatedClient) -> tuple[dict, dict]:
    """(pod volume, container mount) of this client's data, and nothing else's."""
    if silo_url(opts, fed, client):  # copied from the bucket by the init container (_pull_data)
        return ({"name": "data", "emptyDir": {"sizeLimit": fed.data_size}},
                {"name": "data", "mountPath": DATA_DIR, "readOnly": True})
    if fed.rehearsal:
        # the artifacts claim, narrowed to this client's silo; not readOnly at the volume, so
        # the kubelet may create the subPath before the plan step has partitioned
        return ({"name": "data", "persistentVolumeClaim": {"claimName": opts.pvc_name}},
                {"name": "data", "mountPath": DATA_DIR, "subPath": silo_subpath(opts, fed, client),
                 "readOnly": True})
    return ({"name": "data", "persistentVolumeClaim": {"claimName": data_claim(opts, client),
                                                       "readOnly": True}},
            {"name": "data", "mountPath": DATA_DIR, "readOnly": True})


def _wait_for_data(opts: JobOptions, mount: dict) -> dict:
    """Start the node once its examples artifact is complete (schema.json is written last)."""
    script = (f"until [ -e {DATA_DIR}/schema.json ]; do "
              f"echo 'waiting for the examples of this client in {DATA_DIR}'; sleep 2; done")
    return {
        "name": "wait-for-data",
        "image": opts.image,
        "command": ["sh", "-c", script],
        "volumeMounts": [mount],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                      "limits": {"cpu": "50m", "memory": "64Mi"}},  # a looping shell (checkov CKV_K8S_11)
    }


def _pull_data(opts: JobOptions, url: str, mount: dict) -> dict:
    """Copy the client's examples from the bucket into the pod once they are complete (their
    schema.json, written last, exists: baton.storage.pull), and start the node after that."""
    return {
        "name": "pull-data",
        "image": opts.image,
        "command": ["python", "-m", "baton.storage.pull", "--after", "schema.json", url, DATA_DIR],
        "volumeMounts": [{**mount, "readOnly": False}],
        # requests = limits: Python with pyarrow's S3 client, copying shards
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                      "limits": {"cpu": "250m", "memory": "512Mi"}},
    }


def build_supernode(opts: JobOptions, fed: Federation, client: FederatedClient,
                    superlink: str | None = None) -> dict:
    """The Deployment of one client's SuperNode; `superlink` defaults to the in-cluster Service
    (a client on another cluster gives the SuperLink's external address)."""
    name = node_name(opts, client)
    labels = {**opts.labels("supernode"), CLIENT_LABEL: client.dns}
    annotations = {"baton.dev/client": client.name, "baton.dev/stage": fed.stage}
    if client.examples:
        annotations["baton.dev/examples"] = client.examples
    data_vol, data_mount = _data_volume(opts, fed, client)
    spec_vols, spec_mounts = _spec_volume(opts)
    home_vol, home_mount = _flwr_home()
    cred_vol, cred_mount = _credentials_volume(node_secret_name(opts, client))
    command, args = supernode_command(superlink or superlink_address(opts), client)
    res = fed.node_resources or opts.resources
    container = {
        "name": "supernode",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": _env(opts),
        # the ClientAppIo API its ClientApp host dials, bound to 127.0.0.1 in the pod (no
        # Service); declared so `baton k8s emulate` gives each node a port of its own
        "ports": [{"name": "clientappio", "containerPort": NODE_PORT, "protocol": "TCP"}],
        "resources": res.to_k8s(),
        "volumeMounts": [data_mount, *spec_mounts, home_mount, cred_mount],
    }
    return _deployment(opts, name, labels, annotations, {
        "initContainers": [_pull_data(opts, url, data_mount)
                           if (url := silo_url(opts, fed, client))
                           else _wait_for_data(opts, data_mount)],
        "containers": [container],
        "volumes": [data_vol, *spec_vols, home_vol, cred_vol],
    })


def build_data_claims(opts: JobOptions, fed: Federation) -> list[dict]:
    """A claim per real silo (not for a rehearsal, nor for a silo naming its own `claim`): the
    data owner fills it with the client's examples artifact, or binds it to a volume that has."""
    if fed.rehearsal:
        return []
    return [
        _pvc(opts, data_claim(opts, c), fed.data_size,
             {**opts.labels("federated-data"), CLIENT_LABEL: c.dns},
             {"baton.dev/client": c.name, "baton.dev/examples": c.examples or ""})
        for c in fed.clients if c.claim is None and not silo_url(opts, fed, c)
    ]


