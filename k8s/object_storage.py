"""Kubernetes without a shared volume: the run directory and the models on a bucket.

With `baton k8s --runs-dir s3://bucket/prefix/runs` (or `gs://...`) no ReadWriteMany claim is
written and no pod mounts one: every Baton pod reads and writes the bucket (the data Job's
stages, the training replicas' inputs, backups and model, the release Job, the model server),
committing by manifest as a local run does (docs/artifacts.md). Models go to the sibling
`<prefix>/models/<pipeline>`. Pods get credentials the way each cloud's standard chain looks
for them (docs/kubernetes.md, per cloud):

- a Secret whose keys are environment variables (`--credentials-secret NAME`): envFrom on
  every container (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, an S3-compatible store's
  AWS_ENDPOINT_URL; for GCS a key file is better given through workload identity);
- a Kubernetes service account (`--service-account NAME`) bound to a cloud identity: IRSA on
  EKS (`--service-account-annotation eks.amazonaws.com/role-arn=arn:aws:iam::...:role/...`),
  Workload Identity on GKE (`iam.gke.io/gcp-service-account=NAME@PROJECT.iam.gserviceaccount.com`);
  with annotations the ServiceAccount itself is written too.

`apply` edits the built documents in one place (every pod template: service account, envFrom,
no artifacts volume), so the builders of each workload stay as they are. A model server reading
`s3://` runs Baton's image (`baton serve` takes TF Serving's flags): TensorFlow Serving's S3
support left TensorFlow with 2.6; for `gs://` the official image reads the bucket itself.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from baton.k8s.errors import ManifestError

_URL = re.compile(r"^(s3|gs)://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
ARTIFACTS = "artifacts"  # the shared volume's name in pods.volumes


@dataclasses.dataclass(frozen=True)
class ObjectStorage:
    """Where a cluster run keeps its artifacts when there is no shared volume.

    Attributes:
        runs_url: the runs directory on a bucket (`s3://bucket/prefix/runs`, `gs://...`).
        secret: a Secret whose keys become every Baton container's environment (envFrom).
        service_account: the pods' Kubernetes service account (IRSA, Workload Identity).
        annotations: the service account's annotations; given, the ServiceAccount is written.
    """

    runs_url: str
    secret: str | None = None
    service_account: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not _URL.match(self.runs_url):
            raise ManifestError("runs_dir", "must be a bucket URL, s3://BUCKET/PREFIX or "
                                f"gs://BUCKET/PREFIX. Received: {self.runs_url!r}")
        for field in ("secret", "service_account"):
            value = getattr(self, field)
            if value is not None and (not _NAME.match(value) or len(value) > 253):
                raise ManifestError(field, f"must be a DNS-1123 name. Received: {value!r}")
        if self.annotations and self.service_account is None:
            raise ManifestError("service_account", "service account annotations need "
                                "--service-account NAME. Received: none")

    @property
    def scheme(self) -> str:
        return self.runs_url.split("://", 1)[0]

    def models_url(self, pipeline: str) -> str:
        """`<prefix>/models/<pipeline>` beside the runs directory."""
        url = self.runs_url.rstrip("/")
        has_key = "/" in url.split("://", 1)[1]
        return f"{url.rsplit('/', 1)[0] if has_key else url}/models/{pipeline}"


def service_account(opts: Any) -> dict | None:
    """The ServiceAccount carrying the cloud identity, when annotations are given."""
    st = opts.storage
    if st is None or not st.annotations:
        return None
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": st.service_account, "namespace": opts.namespace,
                         "labels": opts.labels("storage"), "annotations": dict(st.annotations)}}


def apply(files: dict[str, list[dict]], opts: Any) -> None:
    """Give every pod template in `files` the bucket's credentials and no shared volume."""
    st = opts.storage
    if st is None:
        return
    for docs in files.values():
        for doc in docs:
            for pod in pod_specs(doc):
                _pod(pod, st, opts)
            if doc.get("kind") == "InferenceService":  # KServe downloads from the bucket
                predictor = doc["spec"]["predictor"]
                predictor["model"]["storageUri"] = opts.models_dir
                if st.service_account:
                    predictor["serviceAccountName"] = st.service_account


def _pod(pod: dict, st: ObjectStorage, opts: Any) -> None:
    pod["volumes"] = [v for v in pod.get("volumes") or [] if v.get("name") != ARTIFACTS]
    if not pod["volumes"]:
        del pod["volumes"]
    if st.service_account:
        pod["serviceAccountName"] = st.service_account
    for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m["name"] != ARTIFACTS]
        if not c["volumeMounts"]:
            del c["volumeMounts"]
        if st.secret:
            c.setdefault("envFrom", []).append({"secretRef": {"name": st.secret}})
        if c.get("command") == ["tensorflow_model_server"] and st.scheme == "s3":
            c["image"], c["command"] = opts.image, ["baton", "serve"]


def pod_specs(doc: Any) -> Iterator[dict]:
    """Every pod spec in a document, at any depth (a Job's, a Deployment's, each TFJob or
    JobSet replica's): a mapping that holds a `containers` list."""
    if isinstance(doc, dict):
        if isinstance(doc.get("containers"), list):
            yield doc
            return
        for value in doc.values():
            yield from pod_specs(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from pod_specs(value)
