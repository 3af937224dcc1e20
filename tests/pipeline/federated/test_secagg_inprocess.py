"""Baton's SecAgg+ pieces against Flower's protocol in one process: the server's workflow
(secagg.Timed with the Mean strategy) and three clients' mods (flower_client.secagg_mod over
Flower's secaggplus_mod) exchange the real messages through a Grid that calls the clients
directly. The new global model must be the FedAvg of the clients' models (received + the
example-weighted mean update) up to SecAgg+'s quantization, and the server must have
received masked vectors only."""

from __future__ import annotations

import numpy as np
import pytest


class Run:
    def __init__(self, plan, tmp_path):
        from baton.pipeline.federated.admission import Admission
        from baton.pipeline.federated.plan import RoundLog

        self.plan, self.names = plan, {}
        self.log = RoundLog(tmp_path / "rounds.jsonl")
        self.admission = Admission()  # nothing declared: the weight check has nothing to hold


class Core:
    pending: dict = {}


def _clients(weights, examples):
    """node id -> a client: the train handler returns fixed trained weights; the message goes
    through the ClientApp's mods in the train handler's order."""
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

    from baton.pipeline.federated.flower_client import (
        compression_mod,
        downlink_mod,
        dp_clipping_mod,
        secagg_mod,
    )

    clients = {}
    for i, (node, rows) in enumerate(examples.items()):
        trained = [w + (i + 1) * 0.01 * np.arange(w.size, dtype=w.dtype).reshape(w.shape) / w.size
                   for w in weights]

        def train(msg, ctx, trained=trained, rows=rows):
            assert "arrays" in msg.content and msg.content["config"]["local_epochs"] == 1
            return Message(content=RecordDict({
                "arrays": ArrayRecord(trained),
                "metrics": MetricRecord({"num-examples": rows, "train_loss": 0.5})}),
                reply_to=msg)

        ctx = Context(run_id=1, node_id=node, node_config={}, state=RecordDict(),
                      run_config={})
        clients[node] = (ctx, train, trained)

    def call(msg):
        ctx, train, _ = clients[msg.metadata.dst_node_id]
        import functools

        chain = train
        for mod in (dp_clipping_mod, compression_mod, downlink_mod, secagg_mod):
            chain = functools.partial(lambda m, c, mod, inner: mod(m, c, inner),
                                      mod=mod, inner=chain)
        return chain(msg, ctx)

    return clients, call


class Grid:
    """Delivers each message to its client; `dead` (node, from which SecAgg+ step on, 0-3)
    answers with an error from then on, as the SuperLink does for a node that died."""

    def __init__(self, call, dead=None):
        self.call, self.dead, self.step = call, dead, -1

    def send_and_receive(self, messages, *, timeout=None):
        import copy

        from flwr.app import Error, Message

        self.step += 1
        out = []
        for m in messages:  # each one its own copy, as it would be on the wire (the
            m.content = copy.deepcopy(m.content)  # workflow shares one content between them)
            if self.dead and m.metadata.dst_node_id == self.dead[0] and \
                    self.step >= self.dead[1]:
                out.append(Message(Error(code=0, reason="node died"), reply_to=m))
            else:
                out.append(self.call(m))
        return out


def secagg_round(run, core, weights, nodes, call, dead=None, max_weight=134.0):
    """One SecAgg+ round of Flower's workflow (secagg.Timed) over `nodes`, the Mean strategy
    aggregating, the clients called through `call`: (workflow, mean, watched grid)."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
    from flwr.server.client_manager import SimpleClientManager
    from flwr.server.client_proxy import ClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    from baton.pipeline.federated import secagg

    class Proxy(ClientProxy):
        def __init__(self, node):
            super().__init__(str(node))
            self.node_id = node

        def get_properties(self, *a): ...
        def get_parameters(self, *a): ...
        def fit(self, *a): ...
        def evaluate(self, *a): ...
        def reconnect(self, *a): ...

    manager = SimpleClientManager()
    for node in nodes:
        manager.register(Proxy(node))
    mean = secagg.Mean(run, core, weights, 1, 1)
    ctx = LegacyContext(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                run_config={}), strategy=mean, client_manager=manager)
    ctx.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: 1,
                                                                   Key.START_TIME: 0.0})
    ctx.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord(weights)
    workflow = secagg.Timed(1.0, 0.67, max_weight=max_weight, timeout=10)
    mean.workflow = workflow
    grid = secagg.Watched(Grid(call, dead))
    workflow(grid, ctx)
    return workflow, mean, grid


@pytest.mark.parametrize(("clip", "dead"), [(None, None), (0.01, None), (None, (33, 0)),
                                            (None, (33, 1)), (None, (33, 2))])
def test_secagg_round_gives_fedavg_s_weights_and_the_server_sees_masks(tmp_path, monkeypatch,
                                                                       clip, dead):
    """With privacy (noise 0 here, so the result is exact), each client clips its update to
    clip_norm inside the SecAgg+ mod before it is masked. A client that dies at setup, at
    the key shares or before its masked vector (its masks are removed with the others'
    shares) leaves the FedAvg of the other two."""
    from flwr.supercore.task_identity import TaskIdentity

    from baton.pipeline.federated.plan import Plan
    from baton.strategies.federated_settings import FederatedSettings, Privacy, SecureAggregation

    # what a ServerApp process has set when the workflow builds its messages
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=3).astype("float32")]
    examples = {11: 134, 22: 102, 33: 42}
    clients, call = _clients(weights, examples)
    plan = Plan(clients=["a", "b", "c"], out_dir=str(tmp_path), wire_path="", fn={},
                settings=FederatedSettings(
                    clients=3, min_clients=2,
                    secure_aggregation=SecureAggregation(num_shares=1.0),
                    privacy=Privacy(clip_norm=clip, noise_multiplier=0.0) if clip else None))
    run, core = Run(plan, tmp_path), Core()
    run.names = {11: "a", 22: "b", 33: "c"}
    workflow, mean, grid = secagg_round(run, core, weights, list(examples), call, dead)

    assert workflow.halted is None and mean.result is not None
    assert (workflow.shares, workflow.threshold) == (3, 2)
    live = {n: r for n, r in examples.items() if not dead or n != dead[0]}
    assert grid.masked == len(live) and grid.unmasked_arrays == 0
    examples = live
    total = sum(examples.values())

    def update(node):
        u = [t - w for t, w in zip(clients[node][2], weights, strict=True)]
        norm = float(np.sqrt(sum(np.sum(x.astype("float64") ** 2) for x in u)))
        return [x * min(1.0, clip / norm) for x in u] if clip else u

    fedavg = [w + sum(rows * update(n)[k] for n, rows in examples.items()) / total
              for k, w in enumerate(weights)]
    if clip:  # the clipping did bite
        plain = sum(rows * clients[n][2][0] for n, rows in examples.items()) / total
        assert np.max(np.abs(fedavg[0] - plain)) > 1e-3
    for got, want in zip(mean.result, fedavg, strict=True):
        # 2**22 levels over [-8, 8]: a step of 4e-6 per client
        np.testing.assert_allclose(got, want, atol=3e-5)
        assert got.dtype == want.dtype
    assert core.pending["clients"] == ["a", "b", "c"][:len(live)]
    assert core.pending["train_loss"] == pytest.approx(0.5)
