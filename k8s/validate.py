"""Validate manifests as the cluster would: schema, admission webhooks, Kubernetes' own schemas,
the restricted Pod Security Standard, and what a whole directory needs.

`validate_file` reports every violation with its JSON path, so a hand-edited manifest is fixed in
one pass. Custom resources (TFJob, JobSet, TrainJob, ClusterTrainingRuntime) are checked against
their real CRDs shipped in `k8s/schemas/` (`k8s.crd`) and their admission webhooks' rules
(`k8s.webhook`, `k8s.jobset_webhook`, `k8s.trainer_webhook`), Jobs and JobSets' job templates
against Kubernetes' Job rules and Baton's TF_CONFIG inputs (`k8s.job_rules`); built-in kinds
against Kubernetes' schemas (`k8s.kube_schemas`); every pod template against the restricted Pod
Security Standard and Baton's rules (`k8s.security`); a KServe InferenceService only for the
fields Baton relies on (no schema for it ships in any package we use).

`validate_documents` adds what needs several documents: a TrainJob against the runtime it names
(and the JobSet Trainer would make of the two); for a directory (a kustomization among them),
that every pod is selected by a NetworkPolicy and that a Namespace enforces the restricted
standard.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from baton.k8s import job_rules, kube_schemas, security
from baton.k8s.crd import CRDS
from baton.k8s.errors import ValidationFailed, Violation
from baton.k8s.schema_errors import violations_from_errors

SKIP_KINDS = {("kustomize.config.k8s.io/v1beta1", "Kustomization")}


def _check_custom(doc: dict[str, Any], api: str, kind: str) -> list[Violation]:
    import jsonschema

    from baton.k8s import jobset_webhook, trainer_webhook, webhook
    from baton.k8s.crd import schema_for

    found = violations_from_errors(jsonschema.Draft202012Validator(schema_for(api, kind)).iter_errors(doc))
    spec: dict[str, Any] = doc["spec"] if isinstance(doc.get("spec"), dict) else {}
    if kind == "TFJob":
        return found + webhook.check_tfjob(doc)
    if kind == "TrainJob":
        return found + trainer_webhook.check_trainjob(doc)
    if kind == "JobSet":
        found += jobset_webhook.check(doc) + job_rules.check_topology(spec)
        base, rjobs = "spec", spec.get("replicatedJobs")
    else:  # ClusterTrainingRuntime: its pods' topology is checked with the TrainJob (numNodes)
        found += trainer_webhook.check_runtime(doc)
        base = "spec.template.spec"
        rjobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")
    for i, rj in enumerate(rjobs if isinstance(rjobs, list) else []):
        if isinstance(rj, dict) and isinstance(rj.get("template"), dict):
            found += job_rules.check_job_spec(rj["template"].get("spec"),
                                              f"{base}.replicatedJobs[{i}].template.spec")
    return found


def _check_inference_service(doc: dict[str, Any]) -> list[Violation]:
    out = []
    predictor = (doc.get("spec") or {}).get("predictor") if isinstance(doc.get("spec"), dict) else None
    if not isinstance(predictor, dict) or not predictor:
        out.append(Violation("spec.predictor", f"an InferenceService needs a predictor. Received: {predictor!r}"))
    model = predictor.get("model") if isinstance(predictor, dict) else None
    if isinstance(model, dict) and not model.get("storageUri"):
        out.append(Violation("spec.predictor.model.storageUri", "required field is missing"))
    return out


def _check_kind(doc: dict[str, Any], api: Any, kind: Any) -> list[Violation]:
    if (api, kind) in CRDS:
        return _check_custom(doc, api, kind)
    for (capi, ckind) in CRDS:
        if kind == ckind:
            return [Violation("apiVersion", f"{kind} must be {capi}. Received: {api!r}")]
    if (api, kind) == ("serving.kserve.io/v1beta1", "InferenceService"):
        return _check_inference_service(doc)
    if kube_schemas.supports(api, kind):
        found = kube_schemas.check(doc)
        if kind == "Job":
            found += job_rules.check_job_spec(doc.get("spec"), "spec")
        return found
    return [Violation("kind", f"no schema known for apiVersion={api!r} kind={kind!r}")]


def validate_doc(doc: Any) -> list[Violation]:
    """Every violation of one manifest document."""
    if not isinstance(doc, dict):
        return [Violation("", f"a manifest must be a mapping. Received: {type(doc).__name__}")]
    api, kind = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    out: list[Violation] = []
    if (not isinstance(name, str) or not name) and (api, kind) not in SKIP_KINDS:
        out.append(Violation("metadata.name", f"required field is missing. Received: {name!r}"))
    if (api, kind) in SKIP_KINDS:
        return out
    return out + _check_kind(doc, api, kind) + security.check(doc)


def check_set(docs: list[Any]) -> list[tuple[int, Violation]]:
    """(index of the document, violation) for the rules that need several documents."""
    from baton.k8s import trainer_controller, trainer_webhook

    out: list[tuple[int, Violation]] = []
    for i, doc in enumerate(docs):
        if isinstance(doc, dict) and doc.get("kind") == "TrainJob":
            runtime = trainer_controller.find_runtime(doc, docs[:i])
            out += [(i, v) for v in trainer_webhook.check_pair(doc, runtime)]
    if any(isinstance(d, dict) and (d.get("apiVersion"), d.get("kind")) in SKIP_KINDS for d in docs):
        out += _check_directory(docs)
    return out


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    if not isinstance(selector, dict):
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value, op, values = labels.get(expr.get("key")), expr.get("operator"), expr.get("values") or []
        if (op == "In" and value not in values) or (op == "NotIn" and value in values) or (
                op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
            return False
    return True


def _check_directory(docs: list[Any]) -> list[tuple[int, Violation]]:
    """A directory applied with `kubectl apply -k`: every pod under a NetworkPolicy, and a
    Namespace enforcing the restricted Pod Security Standard."""
    out: list[tuple[int, Violation]] = []
    policies = [d for d in docs if isinstance(d, dict) and d.get("kind") == "NetworkPolicy"]
    for i, doc in enumerate(docs):
        for path, template in security.pod_templates(doc):
            labels = (template.get("metadata") or {}).get("labels") or {}
            if not any(_selects((p.get("spec") or {}).get("podSelector"), labels) for p in policies):
                out.append((i, Violation(f"{path}.metadata.labels", "no NetworkPolicy of this "
                                         "directory selects these pods: every port they open is "
                                         f"reachable from the whole cluster. Received: {labels}",
                                         "security")))
    if not any(isinstance(d, dict) and d.get("kind") == "Namespace" for d in docs):
        first = next((i for i, d in enumerate(docs) if isinstance(d, dict)), 0)
        out.append((first, Violation("kind", "no Namespace in this directory: nothing enforces the "
                                     "restricted Pod Security Standard (write one labelled "
                                     "pod-security.kubernetes.io/enforce: restricted)", "security")))
    return out


def load_documents(path: str | Path) -> list[tuple[str, Any]]:
    """(source label, document) for each YAML document of a file, or of every file in a dir."""
    import yaml

    p = Path(path)
    files = sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml")) if p.is_dir() else [p]
    out = []
    for f in files:
        try:
            docs = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        except yaml.YAMLError as exc:
            out.append((str(f), exc))
            continue
        for i, doc in enumerate(docs):
            out.append((f"{f}" + (f"[{i}]" if len(docs) > 1 else ""), doc))
    return out


def validate_file(path: str | Path) -> list[Violation]:
    """Every violation in a manifest file (multi-document YAML) or directory of them."""
    if not Path(path).exists():
        return [Violation("", "no such file or directory", "baton", str(path))]
    return validate_documents(load_documents(path))


def validate_documents(pairs: Iterable[tuple[str, Any]]) -> list[Violation]:
    """Every violation of (source label, document) pairs, as `load_documents` returns them."""
    import yaml

    out = []
    pairs = list(pairs)
    for src, doc in pairs:
        if isinstance(doc, yaml.YAMLError):
            out.append(Violation("", f"not valid YAML: {' '.join(str(doc).split())}", "schema", src))
            continue
        out += [Violation(v.path, v.message, v.rule, _label(src, doc)) for v in validate_doc(doc)]
    docs = [d for _, d in pairs]
    out += [Violation(v.path, v.message, v.rule, _label(pairs[i][0], docs[i]))
            for i, v in check_set(docs)]
    return out


def _label(src: str, doc: Any) -> str:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return f"{src} ({kind})" if kind else src


def check(docs: Iterable[Any]) -> None:
    """Raise ValidationFailed with every violation of `docs` (used before writing manifests)."""
    docs = list(docs)

    def label(doc: Any) -> str:
        return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}" if isinstance(doc, dict) else ""

    found = [Violation(v.path, v.message, v.rule, label(d)) for d in docs for v in validate_doc(d)]
    found += [Violation(v.path, v.message, v.rule, label(docs[i])) for i, v in check_set(docs)]
    if found:
        raise ValidationFailed(found)
