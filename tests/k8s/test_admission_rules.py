"""JobSet's and Kubeflow Trainer's admission rules (k8s.jobset_webhook, k8s.trainer_webhook) on
their maintainers' own cases.

JobSet cases are ported from `TestValidateCreate` of kubernetes-sigs/jobset v0.12.0
(pkg/webhooks/jobset_webhook_test.go, Apache-2.0, The Kubernetes Authors): the same objects,
checked as upstream's test checks them (ValidateCreate alone, `defaults=False`), each expected
error found by its words. Trainer cases from kubeflow/trainer v2.3.0 (pkg/webhooks/
trainingruntime_webhook_test.go `TestValidateReplicatedJobs`, trainjob_webhook_test.go
`TestValidateCreate`; Apache-2.0, The Kubeflow Authors).
"""

from __future__ import annotations

import copy

import pytest

from baton.k8s import jobset_webhook, trainer_webhook

MAX = 2**31 - 1


def _rj(name: str = "rj", replicas: int = 1, indexed: bool = True, completions: int | None = 1,
        parallelism: int | None = 1, group: str = "default", **extra) -> dict:
    job: dict = {"template": {"spec": {"containers": [{"name": "c", "image": "bash:5"}]}}}
    if indexed:
        job["completionMode"] = "Indexed"
    if completions is not None:
        job["completions"] = completions
    if parallelism is not None:
        job["parallelism"] = parallelism
    return {"name": name, "groupName": group, "replicas": replicas, "template": {"spec": job}, **extra}


def _js(*rjobs: dict, name: str = "js", **spec) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": list(rjobs), "successPolicy": {"operator": "All"}, **spec}}


def _fp(*rules: dict, **extra) -> dict:
    return {"failurePolicy": {"rules": list(rules), **extra}}


JOBSET_CASES = [
    ("number of pods exceeds the limit",
     _js(_rj("test-jobset-replicated-job-0", MAX, False, None, MAX)),
     ["the product of replicas and parallelism must not exceed 2147483647 for replicatedJob "
      "'test-jobset-replicated-job-0'"]),
    ("number of pods within the limit", _js(_rj("test-jobset-replicated-job-0", 1, False, None, None)), []),
    ("success policy has non matching replicated job",
     _js(_rj(), successPolicy={"operator": "All", "targetReplicatedJobs": ["does not exist"]}),
     ["invalid replicatedJob name 'does not exist' does not appear in .spec.ReplicatedJobs"]),
    ("network has invalid dns name",
     _js(_rj(), network={"enableDNSHostnames": True, "subdomain": "a" * 64}),
     ["must be no more than 63 characters"]),
    ("jobset name with invalid character", _js(_rj("username.llama65b", indexed=False, completions=None)),
     ["must consist of lower case alphanumeric characters or '-'"]),
    ("group name is not DNS 1035 compliant", _js(_rj(group="a" * 64)), ["must be no more than 63 characters"]),
    ("jobset name will result in job name being too long",
     _js(_rj(replicas=101, indexed=False, completions=None), name="a" * 62),
     ["job names generated for this JobSet will exceed 63 characters"]),
    ("jobset name will result in a pod name being too long", _js(_rj(), name="a" * 56),
     ["pod names generated for this JobSet will exceed 63 characters"]),
    ("jobset controller name is not a domain-prefixed path", _js(_rj(), managedBy="notDomainPrefixedPath"),
     ["must be a domain-prefixed path"]),
    ("jobset controller name is too long", _js(_rj(), managedBy="foo.com/" + "a" * 63),
     ["must be a domain-prefixed path (such as 'acme.io/foo') of at most 63 characters"]),
    ("jobset controller name is set and valid", _js(_rj(), managedBy="kueue.x-k8s.io/multikueue"), []),
    ("failure policy rule name is valid", _js(_rj(), **_fp({"name": "superAwesomeFailurePolicyRule"})), []),
    ("jobset failure policy has an invalid on job failure reason",
     _js(_rj(), **_fp({"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["fakeReason"]},
                      maxRestarts=1)),
     ["invalid job failure reason 'fakeReason'"]),
    ("jobset failure policy has an invalid replicated job",
     _js(_rj(), **_fp({"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["fakeReplicatedJob"]})),
     ["invalid replicatedJob name 'fakeReplicatedJob' in failure policy does not appear in .spec.ReplicatedJobs"]),
    ("jobset failure policy rule name is 0 characters long a.k.a unset", _js(_rj(), **_fp({"name": ""})),
     ["the rule name must be at least 1 characters long and at most 128", "1-128 characters"]),
    ("jobset failure policy rule name is greater than 128 characters long",
     _js(_rj(), **_fp({"name": "a" * 129})), ["1-128 characters"]),
    ("there are two failure policy rules with the same name",
     _js(_rj(), **_fp({"name": "repeatedRuleName"}, {"name": "repeatedRuleName"})),
     ["rule names are not unique"]),
    ("failure policy rule name does not start with an alphabetic character",
     _js(_rj(), **_fp({"name": "1ruleToRuleThemAll"})), ["start with an alphabetic character"]),
    ("failure policy rule name does not end with an alphanumeric nor '_'",
     _js(_rj(), **_fp({"name": "ruleToRuleThemAll,"})), ["end with an alphanumeric character or '_'"]),
    ("coordinator replicated job does not exist",
     _js(_rj("replicatedjob-a", 2, completions=2, parallelism=2), _rj("replicatedjob-b", 2, completions=2, parallelism=2),
         coordinator={"replicatedJob": "fake-rjob", "jobIndex": 0, "podIndex": 0}),
     ["coordinator replicatedJob fake-rjob does not exist"]),
    ("coordinator replicated job missing completions",
     _js(_rj("replicatedjob-a", 2, completions=None, parallelism=2),
         coordinator={"replicatedJob": "replicatedjob-a", "jobIndex": 0, "podIndex": 0}),
     ["job for coordinator pod must be indexed completion mode, and completions number must be set"]),
    ("coordinator job index invalid",
     _js(_rj("replicatedjob-a", 2, completions=2, parallelism=2),
         coordinator={"replicatedJob": "replicatedjob-a", "jobIndex": 2, "podIndex": 0}),
     ["coordinator job index 2 is invalid for replicatedJob replicatedjob-a"]),
    ("coordinator pod index invalid",
     _js(_rj("replicatedjob-a", 2, completions=2, parallelism=2),
         coordinator={"replicatedJob": "replicatedjob-a", "jobIndex": 0, "podIndex": 2}),
     ["coordinator pod index 2 is invalid for replicatedJob replicatedjob-a"]),
    ("coordinator label value is too long due to long JobSet name",
     _js(_rj("rj"), coordinator={"replicatedJob": "rj", "jobIndex": 0, "podIndex": 0}, name="a" * 30),
     ["spec will lead to invalid label value"]),
    ("jobset failure policy rule has RestartJob action and RestartJob feature gate is disabled",
     _js(_rj(), **_fp({"name": "r", "action": "RestartJob"})),
     ["RestartJob and RestartJobAndIgnoreMaxRestarts", "RestartJob feature gate is disabled"]),
    ("DependsOn is valid since job-2 depends on job-1 and job-3 depends on job-1",
     _js(_rj("job-1"), _rj("job-2", dependsOn=[{"name": "job-1", "status": "Ready"}]),
         _rj("job-3", dependsOn=[{"name": "job-1", "status": "Complete"}])), []),
    ("DependsOn is valid since job-3 depends on job-1 and job-2",
     _js(_rj("job-1"), _rj("job-2", dependsOn=[{"name": "job-1", "status": "Ready"}]),
         _rj("job-3", dependsOn=[{"name": "job-1", "status": "Ready"}, {"name": "job-2", "status": "Ready"}])), []),
    ("DependsOn is invalid since job-2 depends on job-3",
     _js(_rj("job-1"), _rj("job-2", dependsOn=[{"name": "job-3", "status": "Ready"}]), _rj("job-3")),
     ["replicatedJob: job-2 cannot depend on replicatedJob: job-3"]),
    ("job-2 depends on invalid ReplicatedJob",
     _js(_rj("job-1"), _rj("job-2", dependsOn=[{"name": "invalid", "status": "Ready"}])),
     ["replicatedJob: job-2 cannot depend on replicatedJob: invalid"]),
    ("dependsOn should not fail if there are no replicated jobs", _js(), []),
    ("dependsOn cannot be set for first replicated job",
     _js(_rj("job-1", dependsOn=[{"name": "job-2", "status": "Ready"}]), _rj("job-2")),
     ["DependsOn can't be set for the first ReplicatedJob"]),
    ("InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled",
     _js(_rj(), **_fp(restartStrategy="InPlaceRestart")),
     ["InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"]),
]


@pytest.mark.parametrize("name,js,want", JOBSET_CASES, ids=[c[0] for c in JOBSET_CASES])
def test_jobset_validate_create_cases(name, js, want):
    got = [v.message for v in jobset_webhook.check(js, defaults=False)
           if v.rule != "baton"]  # Baton's own rules are not upstream's
    if not want:
        assert got == [], got
        return
    assert got, f"{name}: nothing found"
    assert any(any(w in m for m in got) for w in want), (name, got)


def test_defaults_run_first_as_the_api_server_does():
    """The mutating webhook names an unnamed rule (`failurePolicyRule0`) and makes Jobs Indexed
    before validation: an empty rule name is then fine, a long name's pods are checked."""
    js = _js(_rj(indexed=False), **_fp({"name": ""}))
    assert jobset_webhook.check(js) == []
    defaulted = jobset_webhook.default(js)
    assert defaulted["spec"]["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"
    rj = defaulted["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert rj["completionMode"] == "Indexed" and rj["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert defaulted["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert [v.path for v in jobset_webhook.check(_js(_rj(indexed=False), name="a" * 56))] == [
        "spec.replicatedJobs[0].name"]


def test_cel_startup_policy_in_order_excludes_depends_on():
    js = _js(_rj("a"), _rj("b", dependsOn=[{"name": "a", "status": "Ready"}]),
             startupPolicy={"startupPolicyOrder": "InOrder"})
    assert any("StartupPolicy and DependsOn APIs are mutually exclusive" in v.message
               for v in jobset_webhook.check(js))


# --------------------------------------------------------------------------- Trainer
ANCESTOR = trainer_webhook.ANCESTOR_LABEL


def _runtime(rjobs: list[dict], **spec) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "rt"}, "spec": {"template": {"spec": {"replicatedJobs": rjobs}}, **spec}}


def _rrj(name: str, container: str, replicas: int = 1, ancestor: str | None = None) -> dict:
    rj = _rj(name, replicas)
    rj["template"]["spec"]["template"]["spec"]["containers"] = [{"name": container, "image": "i:1"}]
    if ancestor:
        rj["template"]["metadata"] = {"labels": {ANCESTOR: ancestor}}
    return rj


def _wrapper_rjobs(replicas: int = 1, launcher: bool = False, user_ancestor: bool = False,
                   containers: str | None = None) -> list[dict]:
    """Trainer's MakeJobSetWrapper: dataset-initializer, model-initializer, [launcher,] node."""
    names = ["dataset-initializer", "model-initializer"] + (["launcher"] if launcher else []) + ["node"]
    out = []
    for n in names:
        ancestor = None if n == "launcher" else ("user-specified" if user_ancestor else
                                                 {"node": "trainer"}.get(n, n))
        out.append(_rrj(n, containers or n, 1 if n == "launcher" else replicas, ancestor))
    return out


@pytest.mark.parametrize("rjobs,paths", [
    (_wrapper_rjobs(launcher=True), []),  # valid replicatedJobs
    (_wrapper_rjobs(replicas=2, user_ancestor=True), []),  # unknown user-specified ancestor
    (_wrapper_rjobs(replicas=2, launcher=True),  # invalid replicas: 0, 1, 3
     [f"spec.template.spec.replicatedJobs[{i}].replicas" for i in (0, 1, 3)]),
    (_wrapper_rjobs(containers="test"),  # missing required container
     [f"spec.template.spec.replicatedJobs[{i}].template.spec.template.spec.containers" for i in (0, 1, 2)]),
], ids=["valid", "user-specified-ancestor", "invalid-replicas", "missing-container"])
def test_trainer_validate_replicated_jobs_cases(rjobs, paths):
    assert [v.path for v in trainer_webhook.check_runtime(_runtime(rjobs))] == paths


def _trainjob(**spec) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "valid-job-name", "namespace": "ns"},
            "spec": {"runtimeRef": {"name": "rt", "apiGroup": "trainer.kubeflow.org",
                                    "kind": "ClusterTrainingRuntime"}, **spec}}


def test_trainjob_rules():
    assert trainer_webhook.check_trainjob(_trainjob()) == []
    bad = copy.deepcopy(_trainjob(managedBy="someone/else", trainer={"numNodes": 0}))
    bad["metadata"]["name"] = "1-not-rfc-1035"
    bad["spec"]["runtimeRef"]["kind"] = "TrainingOperator"
    found = {v.path: v.message for v in trainer_webhook.check_trainjob(bad)}
    assert "RFC 1035" in found["metadata.name"]
    assert "ManagedBy must be trainer.kubeflow.org/trainjob-controller" in found["spec.managedBy"]
    assert found["spec.runtimeRef"].startswith("unsupported runtime: TrainingOperator")
    assert found["spec.trainer.numNodes"] == "must be at least 1. Received: 0"


@pytest.mark.parametrize("key,rjobs,message", [
    ("dataset", _wrapper_rjobs()[1:], "must have dataset-initializer job when trainJob is configured with input datasetConfig"),
    ("dataset", [_rrj("dataset-initializer", "test", ancestor="dataset-initializer")],
     "must have container with name - dataset-initializer in the dataset-initializer job"),
    ("model", [_rrj("dataset-initializer", "dataset-initializer")],
     "must have model-initializer job when trainJob is configured with input modelConfig"),
    ("dataset", [_rrj("dataset-initializer", "dataset-initializer")],
     "must have volumeMount with name - initializer in container dataset-initializer of the dataset-initializer job"),
])
def test_trainjob_initializers_need_the_runtimes_jobs(key, rjobs, message):
    tj = _trainjob(initializer={key: {"storageUri": "hf://x"}})
    found = [v.message for v in trainer_webhook.check_pair(tj, _runtime(rjobs)) if v.path == "spec.runtimeRef"]
    assert message in found


def test_a_trainjob_without_its_runtime_is_refused():
    [v] = trainer_webhook.check_pair(_trainjob(), None)
    assert v.path == "spec.runtimeRef" and "must be created before the TrainJob is created" in v.message


@pytest.mark.parametrize("restarts,refused", [(-1, True), (0, False), (3, False)])
def test_a_negative_max_restarts_is_refused_by_baton(restarts, refused):
    """Neither the CRD nor JobSet's webhook checks it, and the controller fails the JobSet once
    its restarts reach the limit: -1 would silently mean "never restart", not "unlimited"."""
    found = [v for v in jobset_webhook.check(_js(_rj(), **_fp(maxRestarts=restarts)))
             if v.path == "spec.failurePolicy.maxRestarts"]
    assert bool(found) == refused, found
    if refused:
        assert found[0].rule == "baton" and "Received: -1" in found[0].message
        assert "does not mean unlimited" in found[0].message
