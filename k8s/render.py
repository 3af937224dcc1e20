"""Build every manifest of a run and write them as a kustomize directory.

One file per object kind (the ConfigMaps of serving share one file, the NetworkPolicies
another), plus `kustomization.yaml` listing them in apply order, so `kubectl apply -k DIR`
deploys the whole pipeline and overlays can patch any piece: the Namespace (restricted Pod
Security) and NetworkPolicies first, storage and the spec, the pipeline (a JobSet; a
ClusterTrainingRuntime and its TrainJob; or the data Job, TFJob and release Job), serving. The
KServe InferenceService is an alternative to the Deployment + Service and is written beside
them (`alternatives/`) but not listed. A federated stage adds the Flower federation
(`k8s.federated`: SuperLink, one SuperNode per client, the run Job) after the data Job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from baton.k8s import (
    federated,
    jobs,
    jobset,
    network,
    object_storage,
    pods,
    security,
    serving,
    tfjob,
    trainjob,
)
from baton.k8s.errors import ManifestError
from baton.k8s.options import JOBSET, TFJOB, TRAINJOB, JobOptions

KUSTOMIZATION = "kustomization.yaml"


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the embedded pipeline spec stays readable), and no
    `&id001` anchors where builders share a dict: manifests are read by people."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump(docs: list[dict]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def build_all(opts: JobOptions, federation: federated.Federation | None = None) -> dict[str, list[dict]]:
    """File name -> documents, in apply order. Absent pieces (no data stages, no train stage, no
    federated stage...) are omitted. Every pod template is hardened (k8s.security).

    `--target jobset` and `trainjob` hold the whole pipeline in one object, its steps ordered by
    JobSet's dependsOn; `tfjob`, and any spec with a federated stage, write the data and release
    steps as Jobs beside it, ordered by their inputs on the volume or the bucket (init
    containers). With a bucket runs directory (k8s.object_storage) no claim is written.
    """
    if federation is not None and opts.tfjob and opts.target != TFJOB:
        raise ManifestError(
            "target", f"a spec with a federated stage and a train stage cannot be one "
            f"{opts.target}: the release step needs the outputs of both, and the federation "
            "runs as Deployments and a Job beside the training; use --target tfjob, whose "
            "steps wait for their inputs on the volume. Received: --target " + opts.target)
    files: dict[str, list[dict]] = {
        "namespace.yaml": [network.build_namespace(opts)],
        "network-policies.yaml": network.build_policies(opts, federated=federation is not None),
    }
    if not opts.storage:
        files["pvc.yaml"] = [pods.pvc(opts)]
    account = object_storage.service_account(opts)
    if account:
        files["service-account.yaml"] = [account]
    spec_cm = pods.spec_configmap(opts)
    if spec_cm:
        files["pipeline-spec.yaml"] = [spec_cm]
    if federation is None and opts.target == JOBSET:
        files["jobset.yaml"] = [jobset.build_jobset(opts)]
    elif federation is None and opts.target == TRAINJOB:
        files["clustertrainingruntime.yaml"] = [trainjob.build_runtime(opts)]
        files["trainjob.yaml"] = [trainjob.build_trainjob(opts)]
    else:
        data = jobs.build_data_job(opts)
        if data:
            files["data-job.yaml"] = [data]
        if federation is not None:
            files.update(federated.federation_files(opts, federation))
        if opts.tfjob:
            files["tfjob.yaml"] = [tfjob.build_tfjob(opts)]
        release = jobs.build_release_job(opts)
        if release:
            files["release-job.yaml"] = [release]
    files["serving-configmaps.yaml"] = serving.build_configmaps(opts)
    files["serving-deployment.yaml"] = [serving.build_deployment(opts)]
    files["serving-service.yaml"] = [serving.build_service(opts)]
    object_storage.apply(files, opts)  # a bucket: no shared volume, the pods' credentials
    for docs in files.values():
        for doc in docs:
            security.harden(doc)
    return files


def kustomization(opts: JobOptions, resources: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": opts.namespace,
        "resources": resources,
    }


def write_manifests(opts: JobOptions, out: str | Path, validate: bool = True,
                    federation: federated.Federation | None = None) -> list[Path]:
    """Write the manifests of `opts` (and of the `federation`, if any) into `out`; returns the
    written paths.

    With `validate`, every document is checked first (CRD schema, webhook rules, Kubernetes
    schemas) and nothing is written when any check fails.
    """
    files = build_all(opts, federation)
    alternatives = {"alternatives/inferenceservice.yaml": [serving.build_inference_service(opts)]}
    object_storage.apply(alternatives, opts)
    kust = kustomization(opts, list(files))
    if validate:  # the directory as `baton k8s validate DIR` sees it, kustomization included
        from baton.k8s.validate import check

        check([doc for docs in files.values() for doc in docs] + [kust])
    root = Path(out)
    written = []
    for name, docs in {**files, **alternatives}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(docs))
        written.append(path)
    path = root / KUSTOMIZATION
    path.write_text(dump([kust]))
    written.append(path)
    return written
