"""Training rounds under Flower's SecAgg+: the server learns the sum of the updates, no single one.

Flower 1.42 ships SecAgg+ only for its legacy API: `SecAggPlusWorkflow` runs one round's fit
against a legacy `Strategy` in a `LegacyContext`, and the clients' `secaggplus_mod` answers in
the legacy fitres layout. Baton's other rounds run on the Message-API strategies, so here the
rounds are driven one by one (as Flower's DefaultWorkflow would): each round the workflow's
four stages (setup: public keys; share keys: encrypted secret shares between clients;
collect masked vectors: the clients train and send their quantized update plus masks that
cancel only in the sum; unmask: the shares that remove the masks of the sum) run with
`Mean`, a legacy strategy with FedAvg's semantics whose `aggregate_fit` only ever receives
the unmasked weighted mean (the workflow puts that one mean in every result). Evaluation,
checkpoints and round records are Baton's usual ones (flower_server).

What the server still sees per client: its example count (the weight), its training loss and
that it answered; not its update. Clients send the update (trained - received weights), so
clipping_range bounds how far a round moves a weight, not the weights themselves.

Imports Flower at the top, as flower_server does: only the ServerApp process loads it.

`Watched` counts what the server received: masked vectors, and any unmasked array (zero
unless a client runs without secaggplus_mod), so the round record shows it rather than
asserting it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow

from baton.errors import StageError


class Watched:
    """A Grid that counts what came back: masked vectors and unmasked arrays."""

    def __init__(self, grid: Any) -> None:
        self._grid = grid
        self.masked = 0
        self.unmasked_arrays = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> Any:
        from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        for m in replies:
            if m.has_error():
                continue
            self.unmasked_arrays += sum(len(r) for r in m.content.array_records.values())
            rec = m.content.config_records.get(RECORD_KEY_CONFIGS)
            if rec is not None and Key.MASKED_PARAMETERS in rec:
                self.masked += 1
        return replies


class Timed(SecAggPlusWorkflow):
    """SecAggPlusWorkflow with each stage's seconds, and the stage it halted at, kept."""

    def __call__(self, grid: Any, context: Any) -> None:
        from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

        state = WorkflowState()
        self.seconds: dict[str, float] = {}
        self.halted: str | None = None
        for step in (self.setup_stage, self.share_keys_stage,
                     self.collect_masked_vectors_stage, self.unmask_stage):
            name = step.__name__.removesuffix("_stage")
            t = time.perf_counter()
            ok = step(grid, context, state)
            self.seconds[name] = round(time.perf_counter() - t, 3)
            if not ok:
                self.halted = name
                break
            if name in ("setup", "share_keys"):
                # A client gone before its key shares reached the others holds no mask in
                # anyone's vector: it is out of the round, not a dropout to unmask. Flower
                # 1.42 counts it as dead at unmask and asks the others for shares of its key
                # they never received (KeyError on every client, the round lost).
                state.sampled_node_ids = set(state.active_node_ids)
        self.shares, self.threshold = state.num_shares, state.threshold

    def unmask_stage(self, grid: Any, context: Any, state: Any) -> bool:
        """Flower's unmask stage, keeping the sum of the clients' quantized weights (the first
        entry of the unmasked vector, which Flower divides out of the mean): `weight_sum`."""
        from flwr.server.workflow.secure_aggregation import secaggplus_workflow as flower

        extract = flower.factor_extract
        self.q_total: int | None = None

        def keep(parameters: Any) -> Any:
            total, rest = extract(parameters)
            self.q_total = int(total)
            return total, rest

        flower.factor_extract = keep
        try:
            return bool(super().unmask_stage(grid, context, state))
        finally:
            flower.factor_extract = extract

    def weight_sum(self) -> float | None:
        """The sum of the examples the round's clients weighed their updates by, as their
        masked vectors carried it (each client's ratio examples / max_weight, quantized)."""
        total: int | None = getattr(self, "q_total", None)
        if total is None:
            return None
        return float(total) * self.max_weight / self.quantization_range


class Mean(Strategy):
    """FedAvg (or FedProx: its proximal term is the clients') over SecAgg+'s unmasked mean.

    configure_fit samples the round's clients; aggregate_fit gets one result per client that
    took part, each carrying the same weighted mean of the updates (never a client's own),
    and returns the new global weights: received + mean, plus the Gaussian noise of
    client-side fixed-clipping DP when privacy is on (the clients clipped their updates)."""

    def __init__(self, run: Any, core: Any, weights: list[np.ndarray], number: int,
                 relative: int) -> None:
        self.run, self.core, self.global_ = run, core, weights
        self.number, self.relative = number, relative
        self.result: list[np.ndarray] | None = None
        self.workflow: Timed | None = None  # set by run_rounds: the round's unmasked totals

    def initialize_parameters(self, client_manager: Any) -> Any:
        return None

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
        from flwr.common import FitIns

        plan = self.run.plan
        available = client_manager.num_available()
        k = min(available, max(plan.settings.min_clients, round(plan.settings.fraction_fit * available)))
        proxies = client_manager.sample(k, min_num_clients=k)
        config: dict[str, Any] = {
            "local_epochs": plan.settings.local_epochs, "compression": "none", "server-round":
            self.relative, "mu": plan.settings.proximal_mu if plan.settings.algorithm == "fedprox" else 0.0}
        if plan.settings.privacy:
            config["clipping_norm"] = plan.settings.privacy.clip_norm
        sampled = [self.run.names.get(p.node_id, "?") for p in proxies]
        self.core.pending["sampled"] = sampled
        self.run.log.write({"event": "train_start", "round": self.number, "clients": sampled})
        return [(p, FitIns(parameters, dict(config))) for p in proxies]

    def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
        from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

        plan = self.run.plan
        self.core.pending["clients"] = sorted(self.run.names.get(p.node_id, "?")
                                              for p, _ in results)
        self.core.pending["failed"] = len(failures)
        if len(results) < plan.settings.min_clients:
            raise RuntimeError(
                f"round {self.number}: {len(results)} clients trained under secure aggregation "
                f"(of {len(self.core.pending.get('sampled', []))} asked) within round_timeout_s"
                f"={plan.settings.round_timeout_s:g}; min_clients is {plan.settings.min_clients}")
        for p, r in results:  # as flower_strategy's guard (the cause stays on the client here)
            if not math.isfinite(float(r.metrics.get("train_loss", 0.0))):
                raise StageError(f"federated: the training loss is not finite in round "
                                 f"{self.number} on client {self.run.names.get(p.node_id, '?')!r}"
                                 " (under secure aggregation the client's update is masked)")
        mean = parameters_to_ndarrays(results[0][1].parameters)
        assert all(r.parameters is results[0][1].parameters for _, r in results), \
            "SecAgg+ hands every result the same unmasked mean"
        new = [(g + u).astype(g.dtype) for g, u in zip(self.global_, mean, strict=True)]
        if not self._weights_declared([p.node_id for p, _ in results]):
            new = [np.array(g, copy=True) for g in self.global_]  # the round moves nothing
        if plan.settings.privacy:
            z, c = plan.settings.privacy.noise_multiplier, plan.settings.privacy.clip_norm
            n = max(1, round(plan.settings.fraction_fit * len(plan.clients)))
            rng = np.random.default_rng()
            new = [(w + rng.normal(0.0, z * c / n, w.shape)).astype(w.dtype) for w in new]
        total = sum(r.num_examples for _, r in results)
        loss = sum(r.num_examples * float(r.metrics.get("train_loss", 0.0))
                   for _, r in results) / max(total, 1)
        self.core.pending["train_loss"] = loss
        self.result = new
        return ndarrays_to_parameters(new), {"train_loss": loss}

    def _weights_declared(self, nodes: list[int]) -> bool:
        """Whether the weights summed under the masks stay within what the round's nodes
        declared at setup. One client's weight cannot be seen under SecAgg+, their sum can:
        a node that inflates its example count pushes the sum past the declared total (the
        honest ones weigh exactly what they declared), and the round is refused whole (the
        global model stays as it was, the record says why)."""
        workflow = self.workflow
        weight = workflow.weight_sum() if workflow is not None else None
        if workflow is None or weight is None:
            return True
        limits = [self.run.admission.limit(n, "train") for n in nodes]
        if any(limit is None for limit in limits):  # no setup answered: nothing to hold to
            return True
        declared = float(sum(limits))  # type: ignore[arg-type]
        # each client's ratio is rounded to 1/quantization_range of max_weight
        slack = len(nodes) * workflow.max_weight / workflow.quantization_range
        if weight <= declared + slack + 1e-9:
            return True
        self.core.pending.setdefault("admission", []).append(
            {"refused": "secure aggregation round: weights above the declared examples",
             "weight_sum": round(weight, 3), "declared": declared,
             "clients": sorted(self.run.names.get(n, "?") for n in nodes)})
        return False

    def configure_evaluate(self, server_round: int, parameters: Any,
                           client_manager: Any) -> Any:
        return []

    def aggregate_evaluate(self, server_round: int, results: Any, failures: Any) -> Any:
        return None, {}

    def evaluate(self, server_round: int, parameters: Any) -> Any:
        return None


def run_rounds(run: Any, core: Any, context: Context, weights: list[np.ndarray],
               rounds: int, first_round: int, max_weight: float,
               after_round: Callable[[int, ArrayRecord], None]) -> list[np.ndarray]:
    """`rounds` rounds from `first_round` on: SecAgg+ training, then Baton's evaluate (the
    Recording strategy's, so the record has loss and accuracy as in the other rounds)."""
    from flwr.server.client_manager import SimpleClientManager
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

    plan, grid = run.plan, run.grid
    sa = plan.settings.secagg
    assert sa is not None, "run_rounds runs under secure_aggregation only"
    manager = SimpleClientManager()
    proxies: dict[int, Any] = {}
    for relative in range(1, rounds + 1):
        number = first_round + relative - 1
        nodes = set(run._nodes())
        for gone in set(proxies) - nodes:
            manager.unregister(proxies.pop(gone))
        for node in nodes - set(proxies):
            proxies[node] = GridClientProxy(node_id=node, grid=grid, run_id=grid.run.run_id)
            manager.register(proxies[node])
        mean = Mean(run, core, weights, number, relative)
        legacy = LegacyContext(context, strategy=mean, client_manager=manager)
        legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
            {Key.CURRENT_ROUND: number, Key.START_TIME: time.time()})
        legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord(weights)
        workflow = Timed(sa.num_shares, sa.reconstruction_threshold,
                         max_weight=max_weight, clipping_range=sa.clipping_range,
                         quantization_range=sa.quantization_range,
                         timeout=plan.settings.round_timeout_s)
        watched = Watched(grid)
        mean.workflow = workflow
        workflow(watched, legacy)
        if mean.result is None:
            raise RuntimeError(
                f"round {number}: secure aggregation halted at its {workflow.halted} stage: "
                "too few clients answered (each client needs reconstruction_threshold="
                f"{workflow.threshold} of its {workflow.shares} neighbours; min_clients "
                f"{plan.settings.min_clients}) within round_timeout_s={plan.settings.round_timeout_s:g}")
        weights = mean.result
        arrays = ArrayRecord(weights)
        msgs: list[Message] = list(core.configure_evaluate(relative, arrays, ConfigRecord(),
                                                           grid))
        core.aggregate_evaluate(relative, grid.send_and_receive(msgs,
                                                                timeout=plan.settings.round_timeout_s))
        stages = workflow.seconds
        core.pending["secure_aggregation"] = {
            "masked_vectors": watched.masked, "unmasked_arrays_seen": watched.unmasked_arrays,
            "num_shares": workflow.shares, "threshold": workflow.threshold,
            "stage_seconds": stages,
            # the protocol's own stages; the masking itself is inside collect, with training
            "overhead_seconds": round(stages["setup"] + stages["share_keys"]
                                      + stages["unmask"], 3)}
        after_round(relative, arrays)
    return weights
