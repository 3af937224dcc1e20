"""TF_CONFIG built inside a JobSet pod (strategies.jobset_cluster), pinned for every topology.

The rules come from the controllers' own code: JobSet v0.12.0 names a pod's host
`<jobset>-<replicatedJob>-<jobIndex>-<podIndex>` (pkg/util/placement.GenPodName) under the
subdomain `<jobset>` unless `network.subdomain` says otherwise (jobset_controller.GetSubdomain);
Kubeflow Trainer v2.3.0 names a TrainJob's JobSet after the TrainJob and its endpoints
`<trainjob>-<rjob>-<replicaIdx>-<podIdx>.<subdomain>` (plugins/jobset IdentifyPodNetwork). The
endpoint cases of Trainer's `TestJobSet` (pkg/runtime/framework/plugins/jobset/jobset_test.go,
Apache-2.0, The Kubeflow Authors) are ported below.
"""

from __future__ import annotations

import json

import pytest

from baton.strategies import jobset_cluster as jc
from baton.strategies.cluster import TaskId

ROLE_ENV = {
    "BATON_JOBSET_NAME": "pj",
    "BATON_REPLICATED_JOB_REPLICAS": "1",
    "BATON_JOB_INDEX": "0",
}


def _topo(*rjobs: tuple[str, int, int, list], port: int = 2222, subdomain=None) -> jc.Topology:
    return jc.Topology(tuple(jc.ReplicatedJob(n, r, p, tuple(map(tuple, t))) for n, r, p, t in rjobs),
                       port=port, subdomain=subdomain)


def _env(topo: jc.Topology, rjob: str, completion: int, **extra: str) -> dict[str, str]:
    return {**ROLE_ENV, jc.TOPOLOGY_ENV: topo.to_json(), "BATON_REPLICATED_JOB": rjob,
            "BATON_COMPLETION_INDEX": str(completion),
            "HOSTNAME": f"pj-{rjob}-{extra.pop('job', '0')}-{completion}", **extra}


# (what baton k8s writes, a pod, the exact TF_CONFIG the training operator would have written
# for the same topology, with JobSet's names: Go's compact JSON, cluster keys sorted)
CASES = [
    pytest.param(  # --target jobset, multi_worker_mirrored --workers 3: Chief + 2 Workers
        _topo(("chief", 1, 1, [["chief", 1]]), ("worker", 1, 2, [["worker", 2]])), "worker", 1,
        '{"cluster":{"chief":["pj-chief-0-0.pj:2222"],"worker":["pj-worker-0-0.pj:2222",'
        '"pj-worker-0-1.pj:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}',
        id="jobset-mwm-chief"),
    pytest.param(  # --no-chief --workers 2
        _topo(("worker", 1, 2, [["worker", 2]])), "worker", 0,
        '{"cluster":{"worker":["pj-worker-0-0.pj:2222","pj-worker-0-1.pj:2222"]},'
        '"task":{"type":"worker","index":0},"environment":"cloud"}', id="jobset-mwm-no-chief"),
    pytest.param(  # parameter_server --workers 2 --ps 2 (ps, worker, chief in dependsOn order)
        _topo(("ps", 1, 2, [["ps", 2]]), ("worker", 1, 2, [["worker", 2]]),
              ("chief", 1, 1, [["chief", 1]])), "ps", 1,
        '{"cluster":{"chief":["pj-chief-0-0.pj:2222"],"ps":["pj-ps-0-0.pj:2222","pj-ps-0-1.pj:2222"],'
        '"worker":["pj-worker-0-0.pj:2222","pj-worker-0-1.pj:2222"]},'
        '"task":{"type":"ps","index":1},"environment":"cloud"}', id="jobset-ps"),
    pytest.param(  # --evaluator
        _topo(("chief", 1, 1, [["chief", 1]]), ("worker", 1, 1, [["worker", 1]]),
              ("evaluator", 1, 1, [["evaluator", 1]])), "evaluator", 0,
        '{"cluster":{"chief":["pj-chief-0-0.pj:2222"],"evaluator":["pj-evaluator-0-0.pj:2222"],'
        '"worker":["pj-worker-0-0.pj:2222"]},"task":{"type":"evaluator","index":0},'
        '"environment":"cloud"}', id="jobset-evaluator"),
    pytest.param(  # --target trainjob, multi_worker_mirrored --workers 3: node 0 is the chief
        _topo(("node", 1, 3, [["chief", 1], ["worker", 2]])), "node", 0,
        '{"cluster":{"chief":["pj-node-0-0.pj:2222"],"worker":["pj-node-0-1.pj:2222",'
        '"pj-node-0-2.pj:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}',
        id="trainjob-mwm-node0-chief"),
    pytest.param(
        _topo(("node", 1, 3, [["chief", 1], ["worker", 2]])), "node", 2,
        '{"cluster":{"chief":["pj-node-0-0.pj:2222"],"worker":["pj-node-0-1.pj:2222",'
        '"pj-node-0-2.pj:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}',
        id="trainjob-mwm-node2-worker1"),
    pytest.param(  # --target trainjob, parameter_server: the nodes are the workers
        _topo(("ps", 1, 1, [["ps", 1]]), ("node", 1, 2, [["worker", 2]]),
              ("chief", 1, 1, [["chief", 1]])), "node", 1,
        '{"cluster":{"chief":["pj-chief-0-0.pj:2222"],"ps":["pj-ps-0-0.pj:2222"],'
        '"worker":["pj-node-0-0.pj:2222","pj-node-0-1.pj:2222"]},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}', id="trainjob-ps"),
    pytest.param(  # a port of another name, and a subdomain set in the JobSet
        _topo(("worker", 1, 2, [["worker", 2]]), port=3333, subdomain="tf"), "worker", 1,
        '{"cluster":{"worker":["pj-worker-0-0.tf:3333","pj-worker-0-1.tf:3333"]},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}', id="subdomain-and-port"),
]


@pytest.mark.parametrize("topo,rjob,completion,expected", CASES)
def test_tf_config_of_each_topology_is_the_operators_shape_with_jobset_names(
        topo, rjob, completion, expected):
    built = jc.from_env(_env(topo, rjob, completion))
    assert built.operator_json == expected
    assert built.hostname == f"pj-{rjob}-0-{completion}"
    data = json.loads(expected)
    assert built.tf_config.task == TaskId(data["task"]["type"], data["task"]["index"])
    assert built.tf_config.cluster.as_dict() == data["cluster"]


def test_jobs_of_several_replicas_number_pods_job_first():
    """replicas 2 x parallelism 2: pods are jobIndex * parallelism + podIndex, as the JobSet
    global index orders them (`<jobset>-<rjob>-<job>-<pod>`)."""
    topo = _topo(("worker", 2, 2, [["worker", 4]]))
    assert topo.cluster("pj")["worker"] == [
        "pj-worker-0-0.pj:2222", "pj-worker-0-1.pj:2222", "pj-worker-1-0.pj:2222",
        "pj-worker-1-1.pj:2222"]
    env = _env(topo, "worker", 1, job="1", BATON_REPLICATED_JOB_REPLICAS="2", BATON_JOB_INDEX="1")
    assert jc.from_env(env).tf_config.task == TaskId("worker", 3)


@pytest.mark.parametrize("name,rjobs,subdomain,endpoints", [
    # kubeflow/trainer v2.3.0 jobset_test.go "...MPI...": launcher + 2 nodes, default subdomain
    ("trainJob", [("launcher", 1, 1), ("node", 1, 2)], None,
     ["trainJob-launcher-0-0.trainJob", "trainJob-node-0-0.trainJob", "trainJob-node-0-1.trainJob"]),
    # "subDomain in jobSetSpec is used to endpoint"
    ("trainJob", [("launcher", 1, 1), ("node", 1, 1)], "kubeflow.org",
     ["trainJob-launcher-0-0.kubeflow.org", "trainJob-node-0-0.kubeflow.org"]),
])
def test_trainers_own_endpoint_cases(name, rjobs, subdomain, endpoints):
    topo = jc.Topology(tuple(jc.ReplicatedJob(n, r, p, (("worker", r * p),)) for n, r, p in rjobs),
                       subdomain=subdomain)
    assert [a.rsplit(":", 1)[0] for a in topo.cluster(name)["worker"]] == endpoints


def test_the_emulators_address_map_replaces_every_address():
    topo = _topo(("chief", 1, 1, [["chief", 1]]), ("worker", 1, 1, [["worker", 1]]))
    mapping = {"pj-chief-0-0.pj:2222": "127.0.0.1:24001", "pj-worker-0-0.pj:2222": "127.0.0.1:24002"}
    built = jc.from_env(_env(topo, "worker", 0, BATON_ADDRESS_MAP=json.dumps(mapping)))
    assert built.tf_config.cluster.as_dict() == {"chief": ["127.0.0.1:24001"],
                                                 "worker": ["127.0.0.1:24002"]}
    assert "pj-chief-0-0.pj:2222" in built.operator_json  # the cluster's names stay known
    with pytest.raises(jc.JobSetEnvError, match="no local address for"):
        jc.from_env(_env(topo, "worker", 0, BATON_ADDRESS_MAP=json.dumps({"x:1": "127.0.0.1:1"})))


TOPO = _topo(("chief", 1, 1, [["chief", 1]]), ("worker", 1, 2, [["worker", 2]]))


@pytest.mark.parametrize("edit,needle", [
    ({"BATON_JOB_INDEX": None}, "BATON_JOB_INDEX is missing: the container must take it from "
                                "metadata.labels['jobset.sigs.k8s.io/job-index']"),
    ({"BATON_COMPLETION_INDEX": None}, "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
    ({"BATON_JOBSET_NAME": ""}, "BATON_JOBSET_NAME is missing"),
    ({"BATON_REPLICATED_JOB": None}, "BATON_REPLICATED_JOB is missing"),
    ({"BATON_COMPLETION_INDEX": "x"}, "BATON_COMPLETION_INDEX (from metadata.annotations"),
    ({"BATON_REPLICATED_JOB_REPLICAS": "3"}, "has 3 Job(s) (label jobset.sigs.k8s.io/replicatedjob-replicas) but"),
    ({"BATON_COMPLETION_INDEX": "2", "HOSTNAME": None}, "completion index 2 of replicated job 'worker', outside"),
    ({"HOSTNAME": "worker-abcde"}, "spec.network.enableDNSHostnames"),
    ({"BATON_REPLICATED_JOB": "data"}, "this pod's replicated job 'data' (label jobset.sigs.k8s.io/replicatedjob-name) holds no"),
    ({jc.TOPOLOGY_ENV: "{not json"}, f"{jc.TOPOLOGY_ENV} must be a JSON object"),
    ({jc.TOPOLOGY_ENV: json.dumps({"replicatedJobs": [{"name": "w", "replicas": 1, "parallelism": 2,
                                                       "tasks": [["worker", 3]]}]})},
     "has 2 pods (replicas 1 x parallelism 2) but its tasks count 3"),
])
def test_missing_or_contradicting_inputs_name_the_variable_and_its_source(edit, needle):
    env = _env(TOPO, "worker", 1)
    for key, value in edit.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    with pytest.raises(jc.JobSetEnvError) as err:
        jc.from_env(env)
    assert needle in str(err.value)


def test_baton_task_refuses_two_sources_and_runs_a_one_task_topology_alone(monkeypatch):
    from baton.strategies.jobset_cluster import tf_config_from_env

    env = _env(TOPO, "worker", 0)
    assert tf_config_from_env(env).task == TaskId("worker", 0)
    with pytest.raises(jc.JobSetEnvError, match="both TF_CONFIG and BATON_TF_TOPOLOGY"):
        tf_config_from_env({**env, "TF_CONFIG": '{"cluster": {}}'})
    single = _topo(("chief", 1, 1, [["chief", 1]]))
    assert tf_config_from_env(_env(single, "chief", 0)) is None  # as the operator: not distributed
    assert tf_config_from_env({}) is None
