"""ClusterSpec and TF_CONFIG in the exact format the Kubeflow training operator injects."""

from __future__ import annotations

import json
import socket

import pytest

from baton.strategies.cluster import ClusterSpec, ClusterSpecError, TaskId, TFConfig, free_ports

OPERATOR_TF_CONFIG = (
    '{"cluster": {"chief": ["job-chief-0.ns.svc:2222"], "worker": ["job-worker-0.ns.svc:2222", '
    '"job-worker-1.ns.svc:2222"], "ps": ["job-ps-0.ns.svc:2222"]}, '
    '"task": {"type": "worker", "index": 1}, "environment": "cloud"}'
)


def test_round_trips_the_operator_format_exactly():
    cfg = TFConfig.from_json(OPERATOR_TF_CONFIG)
    assert cfg.task == TaskId("worker", 1)
    assert cfg.cluster.num_workers() == 3
    assert cfg.to_json() == OPERATOR_TF_CONFIG
    assert not cfg.is_chief


def test_chief_rule_without_a_chief_is_worker_zero():
    spec = ClusterSpec(worker=("h:1", "h:2"))
    assert spec.is_chief(TaskId("worker", 0)) and not spec.is_chief(TaskId("worker", 1))


def test_dynamic_worker_sparse_form_is_accepted():
    text = json.dumps({"cluster": {"worker": {"1": "w1:2222"}, "ps": ["p0:2222"]},
                       "task": {"type": "worker", "index": 1}})
    cfg = TFConfig.from_json(text)
    assert cfg.cluster.ps == ("p0:2222",)


def test_master_is_read_as_chief():
    cfg = TFConfig.from_json(json.dumps({"cluster": {"master": ["m:1"], "worker": ["w:1"]},
                                         "task": {"type": "master", "index": 0}}))
    assert cfg.task.type == "chief" and cfg.is_chief


@pytest.mark.parametrize("text, needle", [
    ("not json", "not valid JSON"),
    ("[]", "must be a JSON object"),
    ('{"cluster": {}}', "needs 'cluster' and 'task'"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "boss", "index": 0}}', "type='boss'"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "worker:3 is not in"),
    ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}', "'host:port'"),
    ('{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}', "at most one chief"),
    ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}', "share the address"),
    ('{"cluster": {"gpu": ["a:1"]}, "task": {"type": "worker", "index": 0}}', "unknown task type"),
])
def test_bad_tf_config_names_the_problem(text, needle):
    with pytest.raises(ClusterSpecError, match=needle.replace("(", r"\(")):
        TFConfig.from_json(text)


def test_local_cluster_uses_distinct_free_loopback_ports():
    spec = ClusterSpec.local(workers=2, ps=1, chief=True)
    addrs = [spec.address(t) for t in spec.tasks()]
    assert len(set(addrs)) == 4 and all(a.startswith("127.0.0.1:") for a in addrs)
    for a in addrs:  # each port is bindable again right now
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", int(a.rsplit(":", 1)[1])))
    assert len(set(free_ports(5))) == 5
    with pytest.raises(ClusterSpecError, match="Received: workers=0"):
        ClusterSpec.local(workers=0)


def test_free_ports_are_below_the_ephemeral_range_and_fall_back_to_port_0(monkeypatch):
    """An ephemeral port can become an outgoing connection's before the task binds it."""
    from baton.strategies import cluster

    monkeypatch.delenv(cluster.PORT_RANGE_ENV, raising=False)
    low = cluster._ephemeral_low()
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(cluster._PRIVATE_FROM <= p < low for p in ports)
    # a port in use is skipped: hold one, and force every pick onto it first
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        picks = iter([taken, taken, low - 1])
        monkeypatch.setattr(cluster, "_HANDED_OUT", {})  # low - 1 not skipped as handed out
        monkeypatch.setattr("random.SystemRandom.randint", lambda self, a, b: next(picks))
        monkeypatch.setattr(cluster, "_ephemeral_low", lambda: 65000)
        assert free_ports(1) == [low - 1]
    # no room below the range: the kernel's port-0 choice
    monkeypatch.setattr(cluster, "_ephemeral_low", lambda: cluster._PRIVATE_FROM + 10)
    (port,) = free_ports(1)
    assert 0 < port < 65536


def test_ports_handed_out_are_not_handed_out_again_while_the_range_has_room(monkeypatch):
    """Two clusters launched at once from one process (threads): the second must not take a
    port the first chose and has not bound yet (seen in CI: 'Could not start gRPC server')."""
    import threading

    from baton.strategies import cluster

    with _bound(reuse=False) as probe:
        base = probe.getsockname()[1]
    low = max(cluster._PRIVATE_FROM, min(base, 30000))
    monkeypatch.setenv(cluster.PORT_RANGE_ENV, f"{low}-{low + 63}")
    monkeypatch.setattr(cluster, "_HANDED_OUT", {})
    got: list[int] = []

    def take() -> None:
        for _ in range(4):
            got.extend(free_ports(2))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 16 and len(set(got)) == 16  # 16 of 64: room left, so none twice
    assert all(low <= p <= low + 63 for p in got)
    # once half the range has been handed out, ports come round again rather than run out
    monkeypatch.setenv(cluster.PORT_RANGE_ENV, f"{low}-{low + 3}")
    assert len(set(free_ports(3))) == 3


def _bound(reuse: bool) -> socket.socket:
    """A socket holding a kernel-chosen port, bound but not listening."""
    s = socket.socket()
    if reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


def test_a_port_bound_without_listening_is_not_free_and_two_picks_never_share_one(monkeypatch):
    """Checked without SO_REUSEADDR: with it, Linux lets a second socket that does not listen
    bind a port already bound, so a port held that way (or picked twice) passed as free."""
    from baton.strategies import cluster

    with _bound(reuse=True) as held:
        taken = held.getsockname()[1]
        monkeypatch.setenv(cluster.PORT_RANGE_ENV, f"{taken}-{taken}")
        with pytest.raises(ClusterSpecError, match=f"BATON_PORT_RANGE='{taken}-{taken}' has "
                                                   "fewer than 1 free port"):
            free_ports(1)
    with _bound(reuse=False) as a, _bound(reuse=False) as b:
        first, second = a.getsockname()[1], b.getsockname()[1]
    lo, hi = sorted((first, second))
    if hi - lo < 50:  # two ports, nearly all free: both are returned, each once
        monkeypatch.setenv(cluster.PORT_RANGE_ENV, f"{lo}-{hi}")
        ports = free_ports(2)
        assert len(set(ports)) == 2 and all(lo <= p <= hi for p in ports)


def test_baton_port_range_bounds_the_choice_and_a_bad_value_names_the_variable(monkeypatch):
    """Two launchers or emulators on one machine each get their own range (the suite gives
    each pytest-xdist worker one), so one cannot take a port the other's restarting task
    will bind again."""
    from baton.strategies import cluster

    monkeypatch.setenv(cluster.PORT_RANGE_ENV, "40100-40163")
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(40100 <= p <= 40163 for p in ports)
    assert all(40100 <= int(spec.rsplit(":", 1)[1]) <= 40163
               for spec in ClusterSpec.local(workers=2).worker)
    for bad in ("40100", "40100-", "x-40200", "40200-40100", "80-90", "40000-70000"):
        monkeypatch.setenv(cluster.PORT_RANGE_ENV, bad)
        with pytest.raises(ClusterSpecError, match=rf"BATON_PORT_RANGE must be LOW-HIGH.*"
                                                   rf"Received: '{bad}'") as err:
            free_ports(1)
        assert err.value.exit_code == 2


def test_local_cluster_needs_a_worker():
    with pytest.raises(ClusterSpecError, match="Received: workers=0"):
        ClusterSpec.local(workers=0)


def test_from_env_is_none_when_alone():
    assert TFConfig.from_env({}) is None
    assert TFConfig.from_env({"TF_CONFIG": OPERATOR_TF_CONFIG}).task.index == 1


def test_sparse_form_round_trips():
    text = json.dumps({"cluster": {"worker": {"1": "w1:2222"}, "ps": ["p0:2222"]},
                       "task": {"type": "worker", "index": 1}, "environment": "cloud"})
    assert TFConfig.from_json(text).to_json() == text
