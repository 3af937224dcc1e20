"""Build every manifest of a run and write them as a kustomize directory.

One file per object (two ConfigMaps share one file), plus `kustomization.yaml` listing them in
apply order, so `kubectl apply -k DIR` deploys the whole pipeline and overlays can patch any
piece. The KServe InferenceService is an alternative to the Deployment + Service and is written
beside them (`alternatives/`) but not listed. A federated stage adds the Flower federation
(`k8s.federated`: SuperLink, one SuperNode per client, the run Job) after the data Job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from baton.k8s import federated, jobs, pods, serving, tfjob
from baton.k8s.options import JobOptions

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
    federated stage...) are omitted."""
    files: dict[str, list[dict]] = {"pvc.yaml": [pods.pvc(opts)]}
    spec_cm = pods.spec_configmap(opts)
    if spec_cm:
        files["pipeline-spec.yaml"] = [spec_cm]
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
    if validate:
        from baton.k8s.validate import check

        check([doc for docs in files.values() for doc in docs])
    root = Path(out)
    written = []
    for name, docs in {**files, **alternatives}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(docs))
        if any(d.get("kind") == "Secret" for d in docs):  # private keys: the owner's only
            path.chmod(0o600)
        written.append(path)
    path = root / KUSTOMIZATION
    path.write_text(dump([kustomization(opts, list(files))]))
    written.append(path)
    return written
