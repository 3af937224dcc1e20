"""Federated training on a cluster: Flower 1.42's deployment engine as Deployments and a Job.

The same processes as the stage's local launcher (pipeline.federated.processes), one per pod:

* **SuperLink** (`<job>-superlink`): a Deployment of one replica with strategy `Recreate` (two
  SuperLinks on one database must never overlap) and a ClusterIP Service on port 9091, the one
  HTTP port of its Fleet, Runtime and Control APIs. Its SQLite database is on its own
  ReadWriteOnce claim at `/state`, so a restarted pod keeps its nodes and runs. It starts the
  ServerApp (`flwr-serverapp`, Baton's `flower_server:app`) per run itself; the ServerApp reads
  the plan and writes the model under the run directory, so this pod mounts the artifacts
  claim read-write, as the data Jobs do.
* **SuperNode** (`<job>-node-<client>`): one Deployment per client, pointed at the Service,
  with ONLY that client's data at `/data` (read-only) and the spec's ConfigMap (code, not data).
  Real silos (`clients: [{name, examples}]`) get a claim of their own, `<pipeline>-data-<client>`
  (or the `claim` a silo names), holding that client's examples artifact at its root; a
  rehearsal (`clients: N`) mounts its silo out of the artifacts claim with `subPath`, where the
  run Job's stage partitions its examples input (`<run dir>/<stage>.federation/clients/client-i`).
* **The run** (`<job>-flwr-run`): a one-off Job, so one `kubectl apply -k` runs the whole
  federation in order and a failed run is retried by `backoffLimit` like any other Job. Init
  containers wait for the stage's inputs and for the SuperLink's port; the container runs the
  stage itself, as the data and release Jobs run theirs: `baton run SPEC --run-id <id> --only
  <stage> --runs-dir /artifacts/runs --superlink <Service>:9091`. With `--superlink` the stage
  starts no Flower process: it writes a rehearsal's silos to `<run dir>/<stage>.federation/
  clients/<client>` (schema.json last; the SuperNodes' init containers wait for it) and the plan
  beside them, submits with `flwr run`, follows the ServerApp's `rounds.jsonl` on the shared
  claim, publishes `model` and `transform_graph` with their lineage, and exits 1 unless the
  SuperLink reports the run `finished:completed`.

Plain data in (`JobOptions` plus a `Federation` built from the stage's config mapping), manifests
out; everything the cluster would refuse is refused here first with the spec field named.
Addresses are written as one HOST:PORT argument and every port a process binds is a declared
containerPort: that is what `baton k8s emulate` (k8s.emulator_federation) maps to 127.0.0.1 and
free ports to run these very manifests on one machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex

from baton.k8s import jobs, pods
from baton.k8s.errors import ManifestError

# the clients' config, re-exported: callers build a Federation beside the manifests of it
from baton.k8s.federation_config import FederatedClient as FederatedClient
from baton.k8s.federation_config import Federation as Federation
from baton.k8s.federation_config import dns_name as dns_name
from baton.k8s.options import JobOptions

PORT = 9091  # SuperLink: Fleet, Runtime and Control APIs on one HTTP port (flwr 1.42)
NODE_PORT = 9094  # SuperNode's ClientAppIo API, inside its pod only
DATA_DIR = "/data"
STATE_DIR = "/state"
FLWR_HOME = "/tmp/flwr"
# an external federation's files: <run dir>/<stage>.federation/{plan.json,server/,clients/<c>/}
# (pipeline.stages.federated.federation_dir; outside the stage directory, which is renamed)
FEDERATION_SUFFIX = ".federation"
PLAN_FILE = "plan.json"
SILOS_DIR = "clients"
CLIENT_LABEL = "baton.dev/federated-client"
ENV = (
    ("FLWR_TELEMETRY_ENABLED", "0"),
    ("FLWR_DISABLE_UPDATE_CHECK", "1"),
    ("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1"),
    ("FLWR_HOME", FLWR_HOME),
)
_LONGEST_PREFIX = "-node-"  # <job>-node-<client> is the longest name built from a client's


# --------------------------------------------------------------------------- names
def _fit(prefix: str, piece: str, limit: int = 63) -> str:
    """`prefix + piece` within `limit` characters; a cut piece gets a hash so names stay distinct."""
    if len(prefix) + len(piece) <= limit:
        return prefix + piece
    digest = hashlib.sha256(piece.encode()).hexdigest()[:6]
    room = limit - len(prefix) - len(digest) - 1
    if room < 1:
        raise ManifestError("name", f"{prefix!r} leaves no room for a client name within {limit} "
                            "characters; give a shorter --name")
    return f"{prefix}{piece[:room].rstrip('-')}-{digest}"


def superlink_name(opts: JobOptions) -> str:
    return f"{opts.job_name}-superlink"


def superlink_address(opts: JobOptions) -> str:
    """What a SuperNode in the cluster dials: the Service's DNS name and port."""
    return f"{superlink_name(opts)}.{opts.namespace}.svc:{PORT}"


def node_name(opts: JobOptions, client: FederatedClient) -> str:
    return _fit(f"{opts.job_name}{_LONGEST_PREFIX}", client.dns)


def data_claim(opts: JobOptions, client: FederatedClient) -> str:
    return client.claim or _fit(f"{opts.pipeline}-data-", client.dns)


def run_job_name(opts: JobOptions) -> str:
    return f"{opts.job_name}-flwr-run"


def federation_dir(opts: JobOptions, fed: Federation) -> str:
    """Where the run Job's stage writes the plan, the ServerApp its outputs, a rehearsal its silos."""
    return f"{opts.run_dir}/{fed.stage}{FEDERATION_SUFFIX}"


def plan_path(opts: JobOptions, fed: Federation) -> str:
    return f"{federation_dir(opts, fed)}/{PLAN_FILE}"


def silo_subpath(opts: JobOptions, fed: Federation, client: FederatedClient) -> str:
    """A rehearsal silo inside the artifacts claim (relative to the claim's root)."""
    return (f"runs/{opts.pipeline}/{opts.run_id}/{fed.stage}{FEDERATION_SUFFIX}/{SILOS_DIR}/"
            f"{client.name}")


# --------------------------------------------------------------------------- pod pieces
def _env(opts: JobOptions) -> list[dict]:
    return pods.env(opts) + [{"name": k, "value": v} for k, v in ENV]


def _selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "baton", "app.kubernetes.io/instance": name}


def _spec_volume(opts: JobOptions) -> tuple[list[dict], list[dict]]:
    """The spec ConfigMap (the user's modules: a transform or model the apps import), if any."""
    vols, mounts = pods.volumes(opts, read_only=True)
    return ([v for v in vols if v["name"] == "pipeline-spec"],
            [m for m in mounts if m["name"] == "pipeline-spec"])


def _flwr_home() -> tuple[dict, dict]:
    return {"name": "flwr-home", "emptyDir": {}}, {"name": "flwr-home", "mountPath": FLWR_HOME}


def _deployment(opts: JobOptions, name: str, labels: dict[str, str], annotations: dict[str, str],
                pod_spec: dict) -> dict:
    selector = _selector(name)
    labels = {**labels, **selector}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels,
                     **({"annotations": annotations} if annotations else {})},
        "spec": {
            "replicas": 1,
            # never two of one: two SuperLinks on one database, or one client's node twice
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels, "annotations": {**pods.ISTIO_OFF, **annotations}},
                "spec": {"securityContext": dict(pods.SECURITY_CONTEXT), **pod_spec},
            },
        },
    }


def _pvc(opts: JobOptions, name: str, size: str, labels: dict[str, str],
         annotations: dict[str, str] | None = None) -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    meta: dict = {"name": name, "namespace": opts.namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


# --------------------------------------------------------------------------- SuperLink
def superlink_command() -> tuple[list[str], list[str]]:
    return ["flower-superlink"], [
        "--insecure", "--host", "0.0.0.0", "--port", str(PORT),
        "--database", f"{STATE_DIR}/superlink.db", "--disable-runtime-dependency-installation",
    ]


def build_superlink(opts: JobOptions, fed: Federation) -> list[dict]:
    """The SuperLink's state claim, Deployment and Service."""
    name = superlink_name(opts)
    labels = opts.labels("superlink")
    state = f"{name}-state"
    vols, mounts = pods.volumes(opts)  # artifacts (read-write: the ServerApp's outputs) + spec
    home_vol, home_mount = _flwr_home()
    vols = [*vols, {"name": "state", "persistentVolumeClaim": {"claimName": state}}, home_vol]
    mounts = [*mounts, {"name": "state", "mountPath": STATE_DIR}, home_mount]
    command, args = superlink_command()
    container = {
        "name": "superlink",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": _env(opts),
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
    return [_pvc(opts, state, fed.state_size, labels), deployment, service]


# --------------------------------------------------------------------------- SuperNodes
def supernode_command(superlink: str, client: FederatedClient) -> tuple[list[str], list[str]]:
    return ["flower-supernode"], [
        "--insecure", "--superlink", superlink, "--host", "0.0.0.0", "--port", str(NODE_PORT),
        "--isolation", "subprocess",
        "--node-config", f"data-dir='{DATA_DIR}' client='{client.name}'",
    ]


def _data_volume(opts: JobOptions, fed: Federation, client: FederatedClient) -> tuple[dict, dict]:
    """(pod volume, container mount) of this client's data, and nothing else's."""
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
    command, args = supernode_command(superlink or superlink_address(opts), client)
    res = fed.node_resources or opts.resources
    container = {
        "name": "supernode",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": _env(opts),
        # the ClientAppIo API its ClientApp processes dial, inside the pod only (no Service);
        # declared so `baton k8s emulate` gives each node a port of its own
        "ports": [{"name": "clientappio", "containerPort": NODE_PORT, "protocol": "TCP"}],
        "resources": res.to_k8s(),
        "volumeMounts": [data_mount, *spec_mounts, home_mount],
    }
    return _deployment(opts, name, labels, annotations, {
        "initContainers": [_wait_for_data(opts, data_mount)],
        "containers": [container],
        "volumes": [data_vol, *spec_vols, home_vol],
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
        for c in fed.clients if c.claim is None
    ]


# --------------------------------------------------------------------------- the run
def run_command(opts: JobOptions, fed: Federation) -> tuple[list[str], list[str]]:
    """`baton run --only <stage> --superlink <Service>`: the stage itself, as the data and release
    Jobs run theirs (same run id and runs dir), against the SuperLink of these manifests. It
    writes a rehearsal's silos and the plan under `federation_dir`, submits, follows the run's
    rounds and publishes `model` and `transform_graph` (lineage, cache) like a local run; it
    exits 1 unless the SuperLink reports the run `finished:completed`."""
    command, args = jobs.run_command(opts, (fed.stage,))
    return command, [*args, "--superlink", superlink_address(opts)]


# HOST:PORT in one argument, as everywhere in these manifests: `baton k8s emulate` maps a
# Service's address to 127.0.0.1:<its local port> by that form
_PROBE = ("import socket,sys; h,_,p=sys.argv[1].rpartition(':'); "
          "socket.create_connection((h,int(p)),5).close()")


def _wait_for_superlink(opts: JobOptions) -> dict:
    address = superlink_address(opts)
    script = (f"until python -c {shlex.quote(_PROBE)} {address} 2>/dev/null; do "
              f"echo 'waiting for the SuperLink at {address}'; sleep 2; done")
    return {
        "name": "wait-for-superlink",
        "image": opts.image,
        "command": ["sh", "-c", script],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},  # python -c every 2 s
                      "limits": {"cpu": "100m", "memory": "128Mi"}},
    }


def build_run_job(opts: JobOptions, fed: Federation) -> dict:
    """The one-off Job that runs the stage against the SuperLink (`run_command`)."""
    vols, mounts = pods.volumes(opts)
    labels = opts.labels("federated-run")
    command, args = run_command(opts, fed)
    init = [_wait_for_superlink(opts)]
    gate = pods.gate_container(opts, fed.inputs, mounts)
    if gate:
        init.insert(0, gate)
    stage = {
        **pods.baton_container(opts, command, args),
        # a rehearsal partitions the examples here, then it only follows the run: CPU only,
        # as the data Job (the CPU limit is the quota its Beam workers follow)
        "resources": dataclasses.replace(opts.resources, gpu=0).to_k8s(),
        "volumeMounts": mounts,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": run_job_name(opts), "namespace": opts.namespace, "labels": labels,
                     "annotations": {"baton.dev/stage": fed.stage}},
        "spec": {
            "backoffLimit": opts.run_policy.backoff_limit,
            "activeDeadlineSeconds": opts.run_policy.active_deadline_seconds,
            "ttlSecondsAfterFinished": opts.run_policy.ttl_seconds_after_finished,
            "template": {
                "metadata": {"labels": labels, "annotations": dict(pods.ISTIO_OFF)},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": dict(pods.SECURITY_CONTEXT),
                    "initContainers": init,
                    "containers": [stage],
                    "volumes": vols,
                },
            },
        },
    }


def render_federation(opts: JobOptions, fed: Federation) -> list[dict]:
    """Every manifest of the federation, in apply order."""
    return [doc for docs in federation_files(opts, fed).values() for doc in docs]


def federation_files(opts: JobOptions, fed: Federation) -> dict[str, list[dict]]:
    """File name -> documents of the federation, in apply order (what `render` writes)."""
    return {
        "federated-superlink.yaml": build_superlink(opts, fed),
        "federated-supernodes.yaml": build_data_claims(opts, fed)
        + [build_supernode(opts, fed, c) for c in fed.clients],
        "federated-run-job.yaml": [build_run_job(opts, fed)],
    }
