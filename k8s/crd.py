"""The CRDs' OpenAPI v3 schemas (TFJob, JobSet, TrainJob, ClusterTrainingRuntime) as JSON Schemas.

The API server validates a custom resource with the CRD's structural schema. Three of its rules
are not plain JSON Schema, so we translate them:

* unknown fields: the API server prunes them, and `kubectl apply` (field validation `Strict`,
  its default since 1.27) rejects them. A typo such as `restartPolicyy` silently doing nothing is
  exactly what validation must catch, so objects with `properties` get
  `additionalProperties: false` unless marked `x-kubernetes-preserve-unknown-fields`;
* `x-kubernetes-int-or-string`: already spelled as `anyOf: [integer, string]` in this CRD;
* `format: int32` / `int64`: integer ranges, enforced as minimum/maximum.

`x-kubernetes-validations` (CEL) rules are not JSON Schema: the few a new object can break
(JobSet's "StartupPolicy and DependsOn APIs are mutually exclusive", a TrainJob's name and
`managedBy`, a runtime's single ML policy) are checked beside the webhook rules
(`k8s.jobset_webhook`, `k8s.trainer_webhook`); the others only forbid changes on update.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).parent / "schemas" / "kubeflow.org_tfjobs.v1.9.0.yaml"
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DROP = ("description", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
         "x-kubernetes-map-type", "x-kubernetes-validations", "x-kubernetes-int-or-string",
         "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "nullable")


def load_crd(path: Path = SCHEMA_FILE) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as f:
        return yaml.load(f, Loader=loader)


def openapi_schema(crd: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"CRD {crd['metadata']['name']} has no version {version!r}")


def to_json_schema(node: Any) -> Any:
    """Translate one OpenAPI v3 (structural) schema node, recursively."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf"):
            out[key] = [to_json_schema(v) for v in value]
        elif key == "format":
            if value in _INT_RANGES:
                lo, hi = _INT_RANGES[value]
                out.setdefault("minimum", lo)
                out.setdefault("maximum", hi)
        else:
            out[key] = value
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


# (apiVersion, kind) -> (the CRD file in k8s/schemas, its version name)
CRDS = {
    ("kubeflow.org/v1", "TFJob"): ("kubeflow.org_tfjobs.v1.9.0.yaml", "v1"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("jobset.x-k8s.io_jobsets.v0.12.0.yaml", "v1alpha2"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("trainer.kubeflow.org_trainjobs.v2.3.0.yaml",
                                                    "v1alpha1"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): (
        "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.yaml", "v1alpha1"),
}


@functools.lru_cache(maxsize=8)
def schema_for(api_version: str, kind: str) -> dict[str, Any]:
    """The JSON Schema of a custom resource Baton writes (cached: each CRD is ~1 MB of YAML)."""
    file, version = CRDS[(api_version, kind)]
    schema = to_json_schema(openapi_schema(load_crd(SCHEMA_FILE.parent / file), version))
    # The API server itself requires these, whatever the CRD says.
    schema.setdefault("required", [])
    for key in ("apiVersion", "kind", "metadata", "spec"):
        if key not in schema["required"]:
            schema["required"].append(key)
    schema["properties"]["apiVersion"] = {"const": api_version}
    schema["properties"]["kind"] = {"const": kind}
    return schema


def tfjob_schema() -> dict[str, Any]:
    """The JSON Schema of a kubeflow.org/v1 TFJob."""
    return schema_for("kubeflow.org/v1", "TFJob")
