"""Flower's client-side DP wrapper that keeps going with fewer players.

Flower 1.42's `DifferentialPrivacyClientSideFixedClipping` skips a round's aggregation (and
keeps the old model) when any reply is an error, which is what a killed or late client's
message becomes: a federation with DP would stop learning whenever a client drops. `CarryingOn`
is that wrapper, named, with one method changed.
"""

from __future__ import annotations

from typing import Any

from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping

from baton.pipeline.federated.recording import Recording


class CarryingOn(DifferentialPrivacyClientSideFixedClipping):
    """The round aggregates the clients that answered (`min_clients` still applies, in the
    wrapped Recording strategy, which also counts the failures) and the noise is scaled to
    them: std = noise_multiplier x clip_norm / answered, the Gaussian mechanism on the mean of
    `answered` clipped updates with the same noise multiplier, so the epsilon the round log
    reports (from the noise multiplier and the rounds) still holds."""

    def aggregate_train(self, server_round: int, replies: Any) -> Any:
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        if isinstance(self.strategy, Recording):  # its round record counts these failures
            self.strategy.pending["errors_before_dp"] = len(replies) - len(ok)
        sampled = self.num_sampled_clients
        self.num_sampled_clients = max(1, len(ok))  # the noise's and the check's count
        try:
            return super().aggregate_train(server_round, ok)
        finally:
            self.num_sampled_clients = sampled

    def __repr__(self) -> str:
        return f"CarryingOn({self.strategy!r})"
