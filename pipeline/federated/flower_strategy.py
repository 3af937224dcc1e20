"""The ServerApp's Flower strategy: FedAvg, FedProx or FedAdam inside Baton's wrappers.

`flower_strategy` builds Flower's strategy for the plan's algorithm and wraps it, as Flower's
own wrapper strategies are stacked: `Recording` (pipeline.federated.recording: the round
record, compressed updates and downlink, late-client rehearsal, expiring messages, admission)
and, with privacy, `CarryingOn` outside it (pipeline.federated.carrying_on: Flower's
client-side DP wrapper that keeps going with fewer players). `run` is the ServerApp's
FederatedRun (plan, names, log, admission).
"""

from __future__ import annotations

from typing import Any

from flwr.serverapp.strategy import Strategy

from baton.pipeline.federated.carrying_on import CarryingOn
from baton.pipeline.federated.plan import Plan
from baton.pipeline.federated.recording import Recording


def strategy_core(strategy: Any) -> Recording:
    """The Recording strategy in the chain (inside the DP wrapper, or the strategy itself)."""
    while not isinstance(strategy, Recording):
        strategy = strategy.strategy
    return strategy


def flower_strategy(plan: Plan, run: Any, first_round: int = 1) -> Strategy:
    """Flower's strategy for `plan.settings.algorithm` in `Recording`, in `CarryingOn` (DP)
    when privacy is on; round numbers count from `first_round` (a resumed run)."""
    from flwr.serverapp import strategy as S

    s = plan.settings
    base = {"fedavg": S.FedAvg, "fedprox": S.FedProx, "fedadam": S.FedAdam}[s.algorithm]
    common: dict[str, Any] = dict(
        fraction_train=s.fraction_fit, fraction_evaluate=1.0, min_train_nodes=s.min_clients,
        min_evaluate_nodes=s.min_clients, min_available_nodes=s.min_clients)
    if s.algorithm == "fedprox":
        common["proximal_mu"] = s.proximal_mu
    if s.algorithm == "fedadam":
        common.update(eta=s.server_learning_rate, eta_l=s.learning_rate)
    strategy: Strategy = Recording(base(**common), run=run, first_round=first_round)
    if s.privacy:
        strategy = CarryingOn(
            strategy, noise_multiplier=s.privacy.noise_multiplier,
            clipping_norm=s.privacy.clip_norm,
            num_sampled_clients=max(1, round(s.fraction_fit * len(plan.clients))))
    return strategy
