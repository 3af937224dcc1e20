"""JobSet's admission webhook (kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go):
its defaults and the rules the CRD schema cannot express, in Python.

`default` is the mutating half (`Default`): success policy `All`, startup policy `AnyOrder`,
Indexed completion, pod restart policy `OnFailure` where unset, DNS host names on and
not-ready addresses published, failure-policy rule names `failurePolicyRule<i>`. `check` is the
validating half (`ValidateCreate`) on the defaulted object, as the API server runs them, plus
the one CEL rule of the CRD a new object can break; each violation names its field:

* `dependsOn` is not allowed on the first replicated job, and may only name earlier ones;
* `network.subdomain`: a DNS-1123 subdomain and a DNS-1035 label of at most 63 characters;
* `managedBy`: a domain-prefixed path of at most 63 characters;
* per replicated job: `replicas x parallelism` within int32; `groupName` a DNS-1035 label; the
  longest Job name `<jobset>-<rjob>-<replicas-1>` a DNS-1035 label; for an Indexed Job with
  `completions`, the longest pod name `<jobset>-<rjob>-<replicas-1>-<completions-1>` plus the
  Job controller's 5-character suffix a DNS-1035 label;
* `successPolicy.targetReplicatedJobs` and failure-policy `targetReplicatedJobs` name
  replicated jobs that exist; rule names are 1-128 characters of `^[A-Za-z]([A-Za-z0-9_,:]*
  [A-Za-z0-9_])?$`, unique; `onJobFailureReasons` are Job failure reasons Kubernetes knows;
  `RestartJob*` actions and the `InPlaceRestart` strategy need feature gates that are off by
  default (refused, as a stock installation does);
* `coordinator`: an existing replicated job, job and pod index, on an Indexed Job;
* CEL: `startupPolicy: InOrder` and `dependsOn` exclude each other.

Replicated job names must also be unique (the CRD's list-map key, the API server's rule).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from baton.k8s.errors import Violation

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
DOMAIN_PREFIXED_PATH = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/\S+$")
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy")
GATED_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
MAX_INT32 = 2**31 - 1


def default(js: dict[str, Any]) -> dict[str, Any]:
    """A copy of `js` with the webhook's defaults filled in (what the controller then sees)."""
    js = copy.deepcopy(js)
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rj in spec.get("replicatedJobs") or []:
        if not isinstance(rj, dict):
            continue
        rj.setdefault("replicas", 1)  # the CRD's default
        rj.setdefault("groupName", "default")
        job = rj.setdefault("template", {}).setdefault("spec", {})
        job.setdefault("completionMode", "Indexed")
        pod = job.setdefault("template", {}).setdefault("spec", {})
        if not pod.get("restartPolicy"):
            pod["restartPolicy"] = "OnFailure"
    net = spec.setdefault("network", {})
    net.setdefault("enableDNSHostnames", True)
    net.setdefault("publishNotReadyAddresses", True)
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        if isinstance(rule, dict) and not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"
    return js


def _label(text: str, max_len: int = 63) -> str | None:
    """Why `text` is not a DNS-1035 label (None when it is)."""
    if len(text) > max_len:
        return f"must be no more than {max_len} characters (is {len(text)})"
    if not DNS1035.match(text):
        return ("must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character")
    return None


def check(doc: dict[str, Any], defaults: bool = True) -> list[Violation]:
    """Every webhook (and CEL) rule the JobSet `doc` breaks, after defaulting as the API server
    does (`defaults=False` checks the object as given, as upstream's ValidateCreate tests do)."""
    js = default(doc) if defaults else {**doc, "spec": doc.get("spec") or {}}
    out: list[Violation] = []

    def bad(path: str, message: str) -> None:
        out.append(Violation(path, message, "webhook"))

    name = str((js.get("metadata") or {}).get("name") or "")
    spec = js["spec"]
    rjobs = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, dict)]
    if not rjobs:
        out.append(Violation("spec.replicatedJobs", "a JobSet without replicated jobs runs "
                             "nothing. Received: []", "baton"))
    if rjobs and rjobs[0].get("dependsOn"):
        bad("spec.replicatedJobs[0].dependsOn", "DependsOn can't be set for the first ReplicatedJob")
    if (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder" and any(
            r.get("dependsOn") for r in rjobs):
        out.append(Violation("spec", "StartupPolicy and DependsOn APIs are mutually exclusive "
                             "(startupPolicyOrder: InOrder)", "schema"))
    sub = (spec.get("network") or {}).get("subdomain")
    if sub:
        problem = _label(sub) or (None if DNS1123_SUBDOMAIN.match(sub) else "not a DNS-1123 subdomain")
        if problem:
            bad("spec.network.subdomain", f"{problem}. Received: {sub!r}")
    managed = spec.get("managedBy")
    if managed is not None and (not DOMAIN_PREFIXED_PATH.match(str(managed)) or len(str(managed)) > 63):
        bad("spec.managedBy", "must be a domain-prefixed path (such as 'acme.io/foo') of at most "
            f"63 characters. Received: {managed!r}")
    seen: list[str] = []
    for i, rj in enumerate(rjobs):
        out += _check_rjob(name, rj, i, seen)
        seen.append(str(rj.get("name")))
    targets = (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []
    for t in targets:
        if t not in seen:
            bad("spec.successPolicy.targetReplicatedJobs", f"invalid replicatedJob name {t!r} "
                f"does not appear in .spec.ReplicatedJobs {seen}")
    out += _check_failure_policy(spec.get("failurePolicy"), seen)
    coord = spec.get("coordinator")
    if isinstance(coord, dict):
        out += _check_coordinator(coord, rjobs) + _check_coordinator_label(js)
    return out


def _check_rjob(jobset: str, rj: dict[str, Any], i: int, earlier: list[str]) -> list[Violation]:
    out: list[Violation] = []
    path = f"spec.replicatedJobs[{i}]"
    rname = str(rj.get("name"))
    if rname in earlier:
        out.append(Violation(f"{path}.name", f"duplicate replicated job name {rname!r} (names "
                             "are the list's key)", "schema"))
    job = (rj.get("template") or {}).get("spec") or {}
    replicas = int(rj.get("replicas", 1))
    parallelism = int(job.get("parallelism", 1) if job.get("parallelism") is not None else 1)
    if parallelism * replicas > MAX_INT32:
        out.append(Violation(path, f"the product of replicas and parallelism must not exceed "
                             f"{MAX_INT32} for replicatedJob {rname!r}", "webhook"))
    problem = _label(str(rj.get("groupName", "default")))
    if problem:
        out.append(Violation(f"{path}.groupName", f"{problem}. Received: {rj.get('groupName')!r}",
                             "webhook"))
    longest_job = f"{jobset}-{rname}-{replicas - 1}"
    problem = _label(longest_job)
    if problem:
        out.append(Violation(f"{path}.name", f"JobSet name is too long, job names generated for "
                             f"this JobSet will exceed 63 characters ({problem}). Received: "
                             f"{longest_job!r}", "webhook"))
    completions = job.get("completions")
    if job.get("completionMode") == "Indexed" and completions is not None:
        pod = f"{jobset}-{rname}-{replicas - 1}-{int(completions) - 1}-abcde"
        problem = _label(pod)
        if problem:
            out.append(Violation(f"{path}.name", f"JobSet name is too long, pod names generated "
                                 f"for this JobSet will exceed 63 characters ({problem}). "
                                 f"Received: {pod!r}", "webhook"))
    for dep in rj.get("dependsOn") or []:
        dname = dep.get("name") if isinstance(dep, dict) else dep
        if dname not in earlier:
            out.append(Violation(f"{path}.dependsOn", f"replicatedJob: {rname} cannot depend on "
                                 f"replicatedJob: {dname} (only on one listed before it)", "webhook"))
    return out


def _check_failure_policy(policy: Any, rjobs: list[str]) -> list[Violation]:
    out: list[Violation] = []
    if not isinstance(policy, dict):
        return out
    restarts = policy.get("maxRestarts")
    if isinstance(restarts, int) and not isinstance(restarts, bool) and restarts < 0:
        # neither the CRD nor the webhook checks it; the controller fails the JobSet once
        # its restarts reach the limit, so a negative one means "never restart", not "always"
        out.append(Violation("spec.failurePolicy.maxRestarts", "must be >= 0 (JobSet fails at "
                             "the first failure when its restarts reach this count, so a "
                             "negative one does not mean unlimited; 0 means no restart). "
                             f"Received: {restarts}", "baton"))
    if policy.get("restartStrategy") == "InPlaceRestart":
        out.append(Violation("spec.failurePolicy.restartStrategy", "InPlaceRestart restart "
                             "strategy cannot be set when InPlaceRestart feature gate is "
                             "disabled (its default)", "webhook"))
    names: dict[str, int] = {}
    for i, rule in enumerate(policy.get("rules") or []):
        if not isinstance(rule, dict):
            continue
        path = f"spec.failurePolicy.rules[{i}]"
        name = str(rule.get("name", ""))
        if not 1 <= len(name) <= 128 or not RULE_NAME.match(name):
            out.append(Violation(f"{path}.name", "a failure policy rule name must be 1-128 "
                                 "characters, start with an alphabetic character, optionally "
                                 "followed by alphanumerics or '_,:', and end with an "
                                 f"alphanumeric character or '_'. Received: {name!r}", "webhook"))
        if name in names:
            out.append(Violation(f"{path}.name", f"rule names are not unique: rules "
                                 f"{names[name]} and {i} are both {name!r}", "webhook"))
        names.setdefault(name, i)
        if rule.get("action") in GATED_ACTIONS:
            out.append(Violation(f"{path}.action", f"{rule['action']} is not allowed when the "
                                 "RestartJob feature gate is disabled (its default)", "webhook"))
        for t in rule.get("targetReplicatedJobs") or []:
            if t not in rjobs:
                out.append(Violation(f"{path}.targetReplicatedJobs", f"invalid replicatedJob "
                                     f"name {t!r} in failure policy does not appear in "
                                     f".spec.ReplicatedJobs {rjobs}", "webhook"))
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS:
                out.append(Violation(f"{path}.onJobFailureReasons", f"invalid job failure "
                                     f"reason {reason!r}; known: {', '.join(JOB_FAILURE_REASONS)}",
                                     "webhook"))
    return out


def _check_coordinator(coord: dict[str, Any], rjobs: list[dict[str, Any]]) -> list[Violation]:
    rj = next((r for r in rjobs if r.get("name") == coord.get("replicatedJob")), None)
    path = "spec.coordinator"
    if rj is None:
        return [Violation(f"{path}.replicatedJob", f"coordinator replicatedJob "
                          f"{coord.get('replicatedJob')} does not exist", "webhook")]
    job = (rj.get("template") or {}).get("spec") or {}
    if not 0 <= int(coord.get("jobIndex", 0)) < int(rj.get("replicas", 1)):
        return [Violation(f"{path}.jobIndex", f"coordinator job index {coord.get('jobIndex')} "
                          f"is invalid for replicatedJob {rj.get('name')}", "webhook")]
    if job.get("completionMode") != "Indexed" or job.get("completions") is None:
        return [Violation(path, "job for coordinator pod must be indexed completion mode, and "
                          "completions number must be set", "webhook")]
    if not 0 <= int(coord.get("podIndex", 0)) < int(job["completions"]):
        return [Violation(f"{path}.podIndex", f"coordinator pod index {coord.get('podIndex')} "
                          f"is invalid for replicatedJob {rj.get('name')}", "webhook")]
    return []


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _check_coordinator_label(js: dict[str, Any]) -> list[Violation]:
    """The coordinator endpoint `<jobset>-<rjob>-<job>-<pod>.<subdomain>` becomes a label
    value (jobset.sigs.k8s.io/coordinator): at most 63 characters of a label value's alphabet."""
    coord = (js.get("spec") or {}).get("coordinator")
    if not isinstance(coord, dict):
        return []
    name = str((js.get("metadata") or {}).get("name") or "")
    sub = ((js.get("spec") or {}).get("network") or {}).get("subdomain") or name
    value = (f"{name}-{coord.get('replicatedJob')}-{coord.get('jobIndex', 0)}-"
             f"{coord.get('podIndex', 0)}.{sub}")
    if len(value) <= 63 and LABEL_VALUE.match(value):
        return []
    return [Violation("spec.coordinator", f"spec will lead to invalid label value {value!r} for "
                      "coordinator label \"jobset.sigs.k8s.io/coordinator\" (long JobSet / "
                      "ReplicatedJob / SubDomain name?)", "webhook")]
