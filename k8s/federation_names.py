"""The names, ports and paths of a federation's Kubernetes objects (k8s.federated's pieces).

Every object of the federation is named from the job name and the client's DNS-safe name
(within the 63 characters of a label; a cut name gets a hash), and every port a process binds
is declared here: the manifests (k8s.federated and its modules), `baton k8s emulate` and
`baton k8s`'s summary read them from here. Plain strings: no manifests are built here.
"""

from __future__ import annotations

import hashlib

from baton.k8s.errors import ManifestError
from baton.k8s.federation_config import FederatedClient, Federation
from baton.k8s.options import JobOptions
from baton.strategies.federation_files import PLAN_FILE, SILOS_DIR, federation_dir

PORT = 9091  # SuperLink: Fleet, Runtime and Control APIs on one HTTPS port (flwr 1.42)
NODE_PORT = 9094  # SuperNode's ClientAppIo API: 127.0.0.1 inside its pod only
DATA_DIR = "/data"
STATE_DIR = "/state"
FLWR_HOME = "/tmp/flwr"
CREDENTIALS_DIR = "/var/run/baton/flower"  # each pod's Secret (k8s.federated.build_secrets)
SECRET_MODE = 0o440  # owner root, group the pod's fsGroup (pods.SECURITY_CONTEXT): readable
LAUNCHER = ("python", "-m")  # Baton's launchers of Flower's daemons (pipeline.federated)
CLIENT_LABEL = "baton.dev/federated-client"
ENV = (
    ("FLWR_TELEMETRY_ENABLED", "0"),
    ("FLWR_DISABLE_UPDATE_CHECK", "1"),
    ("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1"),
    ("FLWR_HOME", FLWR_HOME),
)
_LONGEST_PREFIX = "-node-"  # <job>-node-<client> is the longest name built from a client's



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


def plan_path(opts: JobOptions, fed: Federation) -> str:
    """Where the run Job's stage writes the plan (the ServerApp its outputs beside it)."""
    return f"{federation_dir(opts.run_dir, fed.stage)}/{PLAN_FILE}"


def silo_subpath(opts: JobOptions, fed: Federation, client: FederatedClient) -> str:
    """A rehearsal silo inside the artifacts claim (relative to the claim's root)."""
    return (f"{federation_dir(f'runs/{opts.pipeline}/{opts.run_id}', fed.stage)}/{SILOS_DIR}/"
            f"{client.name}")


def superlink_secret_name(opts: JobOptions) -> str:
    return f"{superlink_name(opts)}-credentials"


def node_secret_name(opts: JobOptions, client: FederatedClient) -> str:
    return f"{node_name(opts, client)}-credentials"


def run_secret_name(opts: JobOptions) -> str:
    return f"{run_job_name(opts)}-credentials"


