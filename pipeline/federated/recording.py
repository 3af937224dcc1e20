"""The ServerApp's bookkeeping around Flower's strategy, as a named wrapper strategy.

`Recording` holds FedAvg, FedProx or FedAdam and delegates to it, as Flower's own wrappers
(DifferentialPrivacyClientSideFixedClipping and the other DP wrappers of
flwr.serverapp.strategy) hold theirs; pipeline.federated.flower_strategy builds the chain, the
DP wrapper (pipeline.federated.carrying_on) outside this one when privacy is on.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from baton.errors import StageError
from baton.pipeline.federated import compression, downlink
from baton.pipeline.federated.message_keys import DOWNLINK, LATE_S, NONFINITE


class Recording(Strategy):
    """Flower's strategy `strategy` (FedAvg, FedProx, FedAdam) with Baton's bookkeeping.

    A wrapper strategy, as Flower's DP wrappers are (flwr.serverapp.strategy.
    dp_fixed_clipping): it holds the inner strategy and hands it each round's messages, doing
    its own part before and after: compressed updates decoded before aggregation, the global
    model sent down as a compressed delta against each client's copy
    (pipeline.federated.downlink), a rehearsed late client, messages that expire after
    `round_timeout_s`, the admission rules (only registered nodes, each update weighed at most
    by the examples its node declared at setup; pipeline.federated.admission), too few answers
    refused, a non-finite loss stopping the run, and the round's record kept in `pending`.
    `run` is the ServerApp's FederatedRun (plan, names, log, admission); round numbers count
    from `first_round` (a resumed run)."""

    def __init__(self, strategy: Strategy, run: Any, first_round: int = 1) -> None:
        super().__init__()
        self.strategy = strategy
        self.run, self.first_round = run, first_round
        self.pending: dict[str, Any] = {}
        self._global: list[Any] = []
        method = run.plan.settings.compression
        self.copies = downlink.ServerCopies(method) if method != "none" else None
        self._grid: Grid | None = None
        self._sent: dict[str, tuple[list[Any], str, dict[str, Any]]] = {}
        self.dtypes: list[Any] = []  # the model's weights' (set by the server app)
        self._asked: list[Any] = []  # this round's train messages

    def _as_model(self, arrays: ArrayRecord | None) -> ArrayRecord | None:
        """`arrays` in the model's dtypes. Flower's FedOpt family computes in float64
        (numpy 2 promotes float32 by its float64 scalars), and DP noise is float64: left
        alone, the global model went down the wire at twice its size."""
        if arrays is None or not self.dtypes:
            return arrays
        items = list(arrays.items())
        if all(a.dtype == str(d) for (_, a), d in zip(items, self.dtypes, strict=True)):
            return arrays
        return ArrayRecord({k: Array(np.asarray(a.numpy(), dtype=d))
                            for (k, a), d in zip(items, self.dtypes, strict=True)})

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: Any,
                        grid: Grid) -> Any:
        arrays = cast(ArrayRecord, self._as_model(arrays))
        self._global = arrays.to_numpy_ndarrays()
        msgs = self._expiring(self._late(self._downlink(
            list(self.strategy.configure_train(server_round, arrays, config, grid)),
            self._global, grid), server_round))
        self.pending["sampled"] = [self.run.names.get(m.metadata.dst_node_id, "?")
                                   for m in msgs]
        self._asked = msgs  # their message ids are set when the Grid pushes them
        self.run.log.write({"event": "train_start", "round": self._number(server_round),
                            "clients": self.pending["sampled"]})
        return msgs

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: Any,
                           grid: Grid) -> Any:
        arrays = cast(ArrayRecord, self._as_model(arrays))
        msgs = list(self.strategy.configure_evaluate(server_round, arrays, config, grid))
        return self._expiring(self._downlink(msgs, arrays.to_numpy_ndarrays(), grid))

    def _late(self, msgs: list[Any], server_round: int) -> list[Any]:
        """The rehearsed slow client's train message asks it to answer `seconds` late
        (`--inject-failure client:N@round:R:slow`); its own copy of the content, since
        Flower's FedAvg shares one RecordDict between a round's messages."""
        number = self._number(server_round)
        late = {d["client"]: float(d["seconds"]) for d in self.run.plan.late_clients
                if int(d["round"]) == number}
        if not late:
            return msgs
        out = []
        for m in msgs:
            name = self.run.names.get(m.metadata.dst_node_id)
            if name in late:
                content = RecordDict({k: m.content[k] for k in m.content})
                content["config"] = ConfigRecord({**dict(m.content["config"]),
                                                  LATE_S: late[name]})
                m = Message(content=content, message_type=m.metadata.message_type,
                            dst_node_id=m.metadata.dst_node_id,
                            group_id=m.metadata.group_id)
            out.append(m)
        return out

    def _expiring(self, msgs: list[Any]) -> list[Any]:
        """A round's messages live `round_timeout_s` (Flower's default TTL is 12 hours).
        The SuperLink hands a client only unexpired messages and refuses a reply to an
        expired one, so a client slower than the timeout, or back from a stall, never
        trains on a round that went on without it: it picks up the next round's message."""
        for m in msgs:
            m.metadata.ttl = float(self.run.plan.settings.round_timeout_s)
        return msgs

    # ---------------------------------------------------------------- downlink
    def _downlink(self, msgs: list[Any], weights: list[Any], grid: Grid) -> list[Any]:
        """Each message's weights as full, a delta against the client's copy, or a
        reference to it (pipeline.federated.downlink)."""
        if self.copies is None or not msgs:
            return msgs
        self._grid = grid
        of = downlink.digest(weights)
        kind = msgs[0].metadata.message_type
        config = dict(msgs[0].content["config"])
        self._sent[kind] = (weights, of, config)
        return [self._message(kind, m.metadata.dst_node_id, weights, of, config)
                for m in msgs]

    def _message(self, kind: str, node: int, weights: list[Any], of: str,
                 config: dict[str, Any]) -> Any:
        assert self.copies is not None
        entries, sent = self.copies.prepare(node, weights, of)
        counts = self.pending.setdefault("downlink", {"full": 0, "delta": 0, "copy": 0})
        counts[entries["downlink"]] += 1
        content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in sent.items()}),
                              "config": ConfigRecord({**config, **entries})})
        return Message(content=content, message_type=kind, dst_node_id=node)

    def _answers(self, replies: list[Any]) -> list[Any]:
        """Confirm each client's copy from its answer; a client whose copy was not the
        message's base gets the full weights now, within the round."""
        if self.copies is None:
            return replies
        out, stale = [], []
        for m in replies:
            node = m.metadata.src_node_id
            rec = None if m.has_error() else m.content.get(DOWNLINK)
            if rec is not None and "stale" in rec:
                self.copies.forget(node)
                stale.append(node)
                continue
            self.copies.confirm(node, None if rec is None else str(rec.get("copy")))
            if rec is not None:
                del m.content[DOWNLINK]
            out.append(m)
        if stale and self._grid is not None:
            kind = replies[0].metadata.message_type
            weights, of, config = self._sent[kind]
            self.run.log.write({"event": "downlink_stale", "kind": kind,
                                "clients": [self.run.names.get(n, "?") for n in stale]})
            again = self._expiring([self._message(kind, n, weights, of, config)
                                    for n in stale])
            for m in self._grid.send_and_receive(again,
                                                 timeout=self.run.plan.settings.round_timeout_s):
                rec = None if m.has_error() else m.content.get(DOWNLINK)
                self.copies.confirm(m.metadata.src_node_id,
                                    None if rec is None else str(rec.get("copy")))
                if rec is not None:
                    del m.content[DOWNLINK]
                out.append(m)
        return out

    def _number(self, server_round: int) -> int:
        return server_round + self.first_round - 1

    def _admitted(self, replies: list[Any], kind: str) -> list[Any]:
        """The replies of admitted nodes, each weighing at most the examples its node
        declared at setup (pipeline.federated.admission); the refusals and bounds go
        into the round's record."""
        admission = self.run.admission
        out = []
        for m in replies:
            node = m.metadata.src_node_id
            if not admission.allowed([node]):
                continue
            metrics = m.content.get("metrics")
            if metrics is not None and "num-examples" in metrics:
                weight = admission.bound(node, kind, float(metrics["num-examples"]))
                if weight <= 0:
                    continue
                metrics["num-examples"] = int(weight)
            out.append(m)
        events = admission.take_events()
        if events:
            self.pending.setdefault("admission", []).extend(events)
        return out

    def _finite(self, server_round: int, replies: list[Any], key: str, which: str) -> None:
        """A client's non-finite loss (or, in training, weights) stops the run, as the
        train stage's guard stops training (graphs.nonfinite_guard): a one-line error
        naming the round, the client and the first cause the client found."""
        for m in replies:
            metrics = m.content.get("metrics")
            cause = m.content.get(NONFINITE)
            if cause is not None:
                del m.content[NONFINITE]  # Flower's aggregation takes arrays and metrics
            value = float(metrics[key]) if metrics is not None and key in metrics else 0.0
            if math.isfinite(value) and cause is None:
                continue
            client = self.run.names.get(m.metadata.src_node_id, "?")
            what = (f"the {which} loss is not finite" if not math.isfinite(value)
                    else "the weights are not finite")
            raise StageError(
                f"federated: {what} in round {self._number(server_round)} on client "
                f"{client!r}" + (f": {cause['cause']}" if cause is not None else ""))

    def aggregate_train(self, server_round: int, replies: Any) -> Any:
        replies = self._answers(list(replies))
        answered = [m for m in replies if not m.has_error()]
        ok = self._admitted(answered, "train")
        self.pending["refused"] = len(answered) - len(ok)
        self.pending["clients"] = sorted(self.run.names.get(m.metadata.src_node_id, "?")
                                         for m in ok)
        self.pending["failed"] = (len(replies) - len(ok)
                                  + self.pending.pop("errors_before_dp", 0))
        outcomes = self._outcomes(replies, ok)
        missing = {name: why for name, why in outcomes.items() if why != "trained"}
        if missing:  # who did not count, and why (the round's record, `baton inspect`)
            self.pending["missing"] = missing
        if len(ok) < self.run.plan.settings.min_clients:
            raise RuntimeError(
                f"round {self._number(server_round)}: {len(ok)} clients trained "
                f"(of {len(self.pending.get('sampled', []))} asked) within round_timeout_s="
                f"{self.run.plan.settings.round_timeout_s:g}; min_clients is "
                f"{self.run.plan.settings.min_clients}; "
                + "; ".join(f"{name}: {why}" for name, why in outcomes.items()))
        self._finite(server_round, ok, "train_loss", "training")
        method = self.run.plan.settings.compression
        for m in ok:
            if method != "none":
                sent = {k: v.numpy() for k, v in m.content["arrays"].items()}
                update = compression.decode(sent, len(self._global))
                m.content["arrays"] = ArrayRecord(
                    [g + u for g, u in zip(self._global, update, strict=True)])
        arrays, metrics = self.strategy.aggregate_train(server_round, ok)
        arrays = self._as_model(arrays)
        if metrics is not None and "train_loss" in metrics:
            self.pending["train_loss"] = float(cast(float, metrics["train_loss"]))  # a scalar
        return arrays, metrics

    def _outcomes(self, replies: list[Any], ok: list[Any]) -> dict[str, str]:
        """What became of each client asked this round: trained, its error reply (Flower's
        code and reason: the node unavailable, the message expired, the ClientApp raised),
        refused by admission, or no reply at all (a client that never answered, or whose
        answer was lost on the way). An error the SuperLink made itself (the node went
        offline, the message expired) comes from the SuperLink's node id: it is matched to its
        client by the message it replies to."""
        to_node = {m.metadata.message_id: m.metadata.dst_node_id for m in self._asked}

        def source(m: Any) -> int:
            return int(to_node.get(m.metadata.reply_to_message_id, m.metadata.src_node_id))

        counted = {source(m) for m in ok}
        errors = {source(m): m.error for m in replies if m.has_error()}
        answered = {source(m) for m in replies}
        out = {}
        for node in (m.metadata.dst_node_id for m in self._asked):
            name = self.run.names.get(node, f"node {node}")
            if node in counted:
                out[name] = "trained"
            elif node in errors:
                err = errors[node]
                out[name] = f"error {err.code} ({str(err.reason)[:200]})"
            elif node in answered:
                out[name] = "refused (admission)"
            else:
                out[name] = "no reply"
        return out

    def aggregate_evaluate(self, server_round: int, replies: Any) -> Any:
        replies = self._admitted([m for m in self._answers(list(replies))
                                  if not m.has_error()], "evaluate")
        self._finite(server_round, replies, "loss", "eval")
        metrics = self.strategy.aggregate_evaluate(server_round, replies)
        if metrics is not None:
            for key in ("loss", "accuracy", "mse"):
                if key in metrics:
                    self.pending[key] = float(cast(float, metrics[key]))
            self.pending["evaluated"] = len(replies)
        return metrics

    def summary(self) -> None:
        """The inner strategy's summary (Flower logs it when a run starts)."""
        self.strategy.summary()

    def __repr__(self) -> str:
        return f"Recording({self.strategy!r})"
