"""What the API server checks in a batch/v1 Job spec beyond its schema, and what Baton's pods
need of a JobSet: rules `job` and `baton` of `baton k8s validate`.

`check_job_spec` applies Kubernetes' own Job validation (pkg/apis/batch/validation) where a
generated or hand-edited manifest can break it: a `podFailurePolicy` needs the pod's
`restartPolicy: Never`; `onExitCodes` values are sorted, unique, at most 255, and `In` may not
hold 0; a Job's pods restart `Never` or `OnFailure`; an Indexed Job needs `completions`.
For a JobSet the same rules run on every replicated job's template, as the JobSet controller
creates the Jobs from it (a rejected Job is a JobSet that never starts).

`check_topology` is Baton's: every container that builds its TF_CONFIG from the JobSet
(`BATON_TF_TOPOLOGY`, strategies.jobset_cluster) must find there what the JobSet really is
(each replicated job of the topology with its replica count and parallelism, the port its
container declares, DNS host names on, the subdomain), and the downward-API variables the pod
reads. A manifest edited on one side only (a parallelism raised, a port changed) would give
pods a TF_CONFIG naming peers that do not exist: refused here with the field named; the pod
itself exits 1 with the same names when it finds an input missing.
"""

from __future__ import annotations

from typing import Any

from baton.k8s.errors import Violation
from baton.strategies import jobset_cluster


def check_job_spec(job: Any, path: str) -> list[Violation]:
    """Kubernetes' Job rules for one Job spec (`path` is its JSON path)."""
    out: list[Violation] = []
    if not isinstance(job, dict):
        return out
    pod = ((job.get("template") or {}).get("spec") or {}) if isinstance(job.get("template"), dict) else {}
    restart = pod.get("restartPolicy")
    if restart not in (None, "Never", "OnFailure"):
        out.append(Violation(f"{path}.template.spec.restartPolicy", "a Job's pods restart "
                             f"Never or OnFailure. Received: {restart!r}", "job"))
    if job.get("completionMode") == "Indexed" and job.get("completions") is None:
        out.append(Violation(f"{path}.completions", "an Indexed Job needs completions", "job"))
    policy = job.get("podFailurePolicy")
    if isinstance(policy, dict):
        if restart != "Never":
            out.append(Violation(f"{path}.template.spec.restartPolicy", "podFailurePolicy needs "
                                 f"the pod's restartPolicy Never. Received: {restart!r}", "job"))
        for i, rule in enumerate(policy.get("rules") or []):
            codes = (rule or {}).get("onExitCodes") if isinstance(rule, dict) else None
            if not isinstance(codes, dict):
                continue
            where = f"{path}.podFailurePolicy.rules[{i}].onExitCodes.values"
            values = codes.get("values") or []
            if values != sorted(set(values)):
                out.append(Violation(where, f"must be sorted and unique. Received: {values}", "job"))
            if len(values) > 255:
                out.append(Violation(where, f"at most 255 values. Received: {len(values)}", "job"))
            if codes.get("operator") == "In" and 0 in values:
                out.append(Violation(where, "the In operator may not hold 0", "job"))
    return out


def _env(container: dict) -> dict[str, Any]:
    return {str(e.get("name")): e for e in container.get("env") or [] if isinstance(e, dict)}


def check_topology(spec: Any, path: str = "spec") -> list[Violation]:
    """Baton's rule for a JobSet spec (or a runtime's JobSet template) whose pods build their
    TF_CONFIG from it; `trainer_nodes`-style overrides are applied by the caller first."""
    out: list[Violation] = []
    if not isinstance(spec, dict):
        return out
    rjobs = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    by_name = {r.get("name"): (i, r) for i, r in enumerate(rjobs)}
    network = spec.get("network") or {}
    for i, rj in enumerate(rjobs):
        pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        for j, c in enumerate(pod.get("containers") or []):
            env = _env(c)
            raw = (env.get(jobset_cluster.TOPOLOGY_ENV) or {}).get("value")
            if raw is None:
                continue
            where = f"{path}.replicatedJobs[{i}].template.spec.template.spec.containers[{j}]"
            out += [v for v in _check_one(raw, where, env, c, by_name, network, path, rj.get("name"))
                    if v not in out]  # every training container reads the same topology
    return out


def _check_one(raw: str, where: str, env: dict, container: dict, by_name: dict, network: dict,
               path: str, own: Any) -> list[Violation]:
    out: list[Violation] = []

    def bad(field: str, message: str) -> None:
        out.append(Violation(field, message, "baton"))

    try:
        topo = jobset_cluster.Topology.from_json(raw)
    except jobset_cluster.JobSetEnvError as exc:
        bad(f"{where}.env[{jobset_cluster.TOPOLOGY_ENV}]", str(exc))
        return out
    for name, source in jobset_cluster.DOWNWARD.items():
        ref = ((env.get(name) or {}).get("valueFrom") or {}).get("fieldRef") or {}
        if ref.get("fieldPath") != source:
            bad(f"{where}.env[{name}]", f"must come from the downward API, fieldRef {source}: "
                f"the pod reads its TensorFlow task from it. Received: {env.get(name)!r}")
    if network.get("enableDNSHostnames") is False:
        bad(f"{path}.network.enableDNSHostnames", "must stay true: peers reach each TensorFlow "
            "task by its host name")
    if (network.get("subdomain") or None) != topo.subdomain:
        bad(f"{path}.network.subdomain", f"is {network.get('subdomain')!r} but "
            f"{jobset_cluster.TOPOLOGY_ENV} says {topo.subdomain!r}")
    ports = [p.get("containerPort") for p in container.get("ports") or [] if isinstance(p, dict)]
    if topo.port not in ports:
        bad(f"{where}.ports", f"{jobset_cluster.TOPOLOGY_ENV} gives port {topo.port}, which "
            f"this container does not declare. Received: {ports}")
    if own not in {r.name for r in topo.replicated_jobs}:
        bad(f"{where}.env[{jobset_cluster.TOPOLOGY_ENV}]", f"names no task for this replicated "
            f"job {own!r}")
    for rj in topo.replicated_jobs:
        if rj.name not in by_name:
            bad(f"{where}.env[{jobset_cluster.TOPOLOGY_ENV}]", f"names replicated job "
                f"{rj.name!r}, which the JobSet does not have ({sorted(map(str, by_name))})")
            continue
        i, actual = by_name[rj.name]
        job = (actual.get("template") or {}).get("spec") or {}
        base = f"{path}.replicatedJobs[{i}]"
        if int(actual.get("replicas", 1)) != rj.replicas:
            bad(f"{base}.replicas", f"is {actual.get('replicas', 1)} but "
                f"{jobset_cluster.TOPOLOGY_ENV} says {rj.replicas}")
        for key in ("parallelism", "completions"):
            if job.get(key) is not None and int(job[key]) != rj.parallelism:
                bad(f"{base}.template.spec.{key}", f"is {job[key]} but "
                    f"{jobset_cluster.TOPOLOGY_ENV} says {rj.parallelism} pods per Job: the "
                    "pods' TF_CONFIG would name peers that do not exist")
    return out
