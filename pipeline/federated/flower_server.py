"""Baton's Flower ServerApp: the federated run, driven from the server, without a row of data.

`flwr run` starts it (one `flwr-serverapp` process per run, under the SuperLink). The run
config's `baton-plan` names the plan file the stage wrote (plan.Plan: the transform, the model
settings, the algorithm, where outputs go): a path, or for pods that share no volume a bucket
URL, and then the outputs go to the bucket too (pipeline.federated.on_bucket). In order:

1. wait until the clients are connected (`min_clients` at least, all of them within
   `round_timeout_s`): the plan's registered nodes only, each under its registered name
   (pipeline.federated.admission; any other node is never sent a message);
2. the transform, federated: one `analyze` query per analyzer phase, merged here
   (pipeline.federated.server.federated_transform); the `transform_graph` is written, and
   every client gets its analyzer values (`setup`), and declares its train and eval examples:
   no update of its weighs more;
3. training: Flower's FedAvg, FedProx or FedAdam strategy (`strategy.start`), under Flower's
   client-side fixed-clipping DP wrapper when `privacy` is set; with `secure_aggregation`,
   round by round through Flower's SecAgg+ workflow (pipeline.federated.secagg), so only the
   sum of the updates reaches this process; each round's global weights are
   checkpointed, and the round's record (clients that trained, loss, weighted federated
   accuracy or mse, bytes up and down on the wire when the plan has relays' `wire_path`,
   epsilon) is appended to `rounds.jsonl`;
4. the model artifact (model.keras, history.json, train_info.json) in the train stage's format,
   with what the model outputs (logits or probabilities, as the clients decided at setup:
   pipeline.federated.local.agreed_outputs), so export serves probabilities as they are.

A run that starts with a checkpoint in its output directory resumes after that round (the
launcher submits a new run when the server restarted): no round is lost or repeated.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.serverapp import Grid, ServerApp

from baton.errors import StageError
from baton.pipeline.federated import codec, compression, downlink, on_bucket, wire
from baton.pipeline.federated.admission import Admission
from baton.pipeline.federated.flower_strategy import flower_strategy, strategy_core
from baton.pipeline.federated.grid import QuickGrid
from baton.pipeline.federated.plan import Plan, RoundLog
from baton.storage import location as L

__all__ = ["FederatedRun", "app", "epsilon", "flower_strategy", "strategy_core"]

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    plan = on_bucket.load_plan(str(context.run_config["baton-plan"]))  # a path or a URL
    FederatedRun(plan, grid, context).run()


class FederatedRun:
    def __init__(self, plan: Plan, grid: Grid, context: Context | None = None) -> None:
        self.admission = Admission(plan.nodes)
        # Flower's deployment Grid polls replies every 3 s; QuickGrid every 1 s, and shows
        # the strategies only the admitted nodes
        self.plan, self.context = plan, context
        self.grid = QuickGrid(grid, admit=self.admission.allowed)
        # on a bucket (pods sharing no volume) a directory of this pod, mirrored to out_dir
        self.out = on_bucket.local_out(plan)
        self.remote = L.is_remote(plan.out_dir)
        self.log = (on_bucket.MirroredRoundLog(self.out / "rounds.jsonl",
                                               f"{plan.out_dir}/rounds.jsonl")
                    if self.remote else RoundLog(self.out / "rounds.jsonl"))
        self.names: dict[int, str] = dict(self.admission.registry)  # node id -> client name
        self.initial: dict[int, str] = {}  # node id -> digest of the initial model it built

    # ------------------------------------------------------------------ messages
    def _nodes(self) -> list[int]:
        want, least = len(self.plan.clients), self.plan.settings.min_clients
        deadline = time.time() + self.plan.settings.round_timeout_s
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= want or (time.time() > deadline and len(nodes) >= least):
                return nodes
            if time.time() > deadline + self.plan.settings.round_timeout_s:
                raise RuntimeError(f"only {len(nodes)} of {want} clients connected after "
                                   f"{2 * self.plan.settings.round_timeout_s:.0f} s; min_clients is "
                                   f"{least}")
            time.sleep(0.5)

    def _query(self, op: str, payload: dict[str, Any], group: str) -> list[dict[str, Any]]:
        """Send a query to every connected client; the replies that came back in time."""
        nodes = self._nodes()
        blob = codec.dumps({"op": op, **payload})
        msgs = [self.grid.create_message(RecordDict({"baton": ConfigRecord({"blob": blob})}),
                                         "query", node, group) for node in nodes]
        replies = list(self.grid.send_and_receive(msgs, timeout=self.plan.settings.round_timeout_s))
        out = []
        for m in replies:
            node = m.metadata.src_node_id
            if m.has_error() or not self.admission.allowed([node]):
                continue
            reply = codec.loads(codec.field(m.content["baton"]))
            if not self.admission.claims(node, str(reply.get("client"))):
                continue
            self.names[node] = self.admission.name(node, str(reply.get("client")))
            reply["client"] = self.names[node]
            if reply.get("error"):  # the client refused the model, or its outputs changed
                raise StageError(f"federated {op}: client {reply['client']!r}: {reply['error']}")
            if op == "setup":
                self.admission.declare(node, int(reply["train"]), int(reply["eval"]))
            out.append({**reply, "node": node} if op == "setup" else reply)
        events = self.admission.take_events()
        if events:
            self.log.write({"event": "admission", "op": op, "events": events})
        if len(out) < self.plan.settings.min_clients:
            raise RuntimeError(f"{op}: {len(out)} of {len(nodes)} clients answered within "
                               f"round_timeout_s={self.plan.settings.round_timeout_s:g}; min_clients is "
                               f"{self.plan.settings.min_clients}")
        return out

    # ------------------------------------------------------------------ the run
    def run(self) -> None:
        from baton.pipeline.federated.local import FnSpec, agreed_outputs

        fn = FnSpec(**self.plan.fn)
        state = self._resume()
        if state is None:
            transform = self._transform(fn)
            resolved, label = transform.resolved, transform.label
            start_round, weights = 1, None
        else:
            resolved, label, start_round, weights = state
        setup = {"fn": fn.to_dict(), "resolved": resolved, "label": label,
                 "settings": self.plan.settings.for_clients().to_dict(),
                 "search_dir": self.plan.search_dir}
        replies = self._query("setup", {"setup": setup,
                                        "downlink": self.plan.settings.compression != "none"}, "setup")
        self.log.write({"event": "setup", "clients": {r["client"]: {"train": r["train"],
                        "eval": r["eval"]} for r in replies}})
        self.initial = {r["node"]: r["initial"] for r in replies if r.get("initial")}
        # logits or probabilities, as each client decided on its model and eval rows
        self.outputs = agreed_outputs({r["client"]: r["outputs"] for r in replies})
        self.log.write({"event": "outputs", **self.outputs.to_dict()})
        self.rows = {r["node"]: int(r["train"]) for r in replies}
        self._train(fn, resolved, label, start_round, weights)
        if self.remote:  # the outputs, for the stage that follows the run from elsewhere
            on_bucket.upload_tree(self.out, self.plan.out_dir)
            shutil.rmtree(self.out, ignore_errors=True)  # this pod's copy

    def _transform(self, fn: Any) -> Any:
        from baton.pipeline.federated.server import federated_transform

        number = [0]

        def ask(request: Any) -> list[dict[str, Any]]:
            number[0] += 1
            return self._query("analyze", {"fn": fn.to_dict(), **request},
                               f"analyze-{number[0]}")

        t = federated_transform(fn, ask)
        save_transform(t, self.out / "transform_graph.partial", fn)
        (self.out / "transform_graph.partial").rename(self.out / "transform_graph")
        (self.out / "state.json").write_bytes(codec.dumps(
            {"resolved": t.resolved, "label": t.label, "round": 0}))
        self.log.write({"event": "transform", "phases": t.phases,
                        "analyzers": len(t.resolved), "rows": t.rows})
        return t

    def _resume(self) -> tuple[Any, Any, int, Any] | None:
        path = self.out / "state.json"
        if not path.is_file() or not (self.out / "transform_graph").is_dir():
            return None
        state = codec.loads(path.read_bytes())
        weights = None
        if state["round"]:
            weights = codec.loads((self.out / "checkpoint.json").read_bytes())
        self.log.write({"event": "resume", "after_round": state["round"]})
        return state["resolved"], state["label"], int(state["round"]) + 1, weights

    def _train(self, fn: Any, resolved: Any, label: Any, start_round: int,
               weights: list[Any] | None) -> None:
        from baton.graphs import model_fn
        from baton.graphs.feature_spec import FeatureSpec

        plan = self.plan
        spec = FeatureSpec.load(self.out / "transform_graph")
        s = plan.settings
        model = model_fn.build(s.model, spec, dict(s.model_params), s.seed, plan.search_dir)
        if weights is not None:
            model.set_weights(weights)
        problems = compression.check(model.get_weights(), plan.settings.compression,
                                     [w.path for w in model.weights])
        if problems:
            raise RuntimeError("; ".join(problems))
        rounds_left = plan.settings.rounds - start_round + 1
        strategy = flower_strategy(plan, self, start_round)
        strategy_core(strategy).dtypes = [w.dtype for w in model.get_weights()]
        copies = strategy_core(strategy).copies
        if copies is not None:  # clients that built the very model the server starts from
            w0 = model.get_weights()
            of = downlink.digest(w0)
            for node, initial in self.initial.items():
                if initial == of:
                    copies.held[node] = downlink.Copy(w0, of, of)
            self.log.write({"event": "downlink_initial", "server": of, "clients": {
                self.names.get(n, "?"): d for n, d in self.initial.items()}})
        started = time.time()
        self._round_start: dict[str, Any] = {"time": started,
                                             "wire": wire.read(Path(plan.wire_path))
                                             if plan.wire_path else {}}

        def after_round(server_round: int, arrays: ArrayRecord) -> None:
            if server_round == 0:
                return None
            number = server_round + start_round - 1
            w = arrays.to_numpy_ndarrays()
            (self.out / "checkpoint.json.tmp").write_bytes(codec.dumps(w))
            (self.out / "checkpoint.json.tmp").replace(self.out / "checkpoint.json")
            state = codec.loads((self.out / "state.json").read_bytes())
            state["round"] = number
            (self.out / "state.json.tmp").write_bytes(codec.dumps(state))
            (self.out / "state.json.tmp").replace(self.out / "state.json")
            self._close_round(number, strategy)
            return None

        if rounds_left > 0 and plan.settings.secagg:
            from baton.pipeline.federated import secagg

            assert self.context is not None, "secure aggregation runs in the ServerApp"
            # SecAgg+ scales each update by its examples / max_weight: the largest client's
            # count keeps every scale <= 1 (no overflow) and the quantization as fine as it gets
            model.set_weights(secagg.run_rounds(
                self, strategy_core(strategy), self.context, model.get_weights(), rounds_left,
                start_round, float(max(self.rows.values(), default=1)), after_round))
        elif rounds_left > 0:
            result = strategy.start(
                grid=self.grid, initial_arrays=ArrayRecord(model.get_weights()),
                num_rounds=rounds_left, timeout=plan.settings.round_timeout_s,
                train_config=ConfigRecord({"local_epochs": plan.settings.local_epochs,
                                           "mu": plan.settings.proximal_mu if plan.settings.algorithm == "fedprox"
                                           else 0.0, "compression": plan.settings.compression}),
                evaluate_config=ConfigRecord(), evaluate_fn=after_round)
            model.set_weights(result.arrays.to_numpy_ndarrays())
        if self.outputs.from_rows:  # probabilities by the initial rows: still so once trained
            self._query("confirm", {"weights": model.get_weights()}, "confirm")
        if plan.settings.edge != "off":
            self._edge(model, spec)
        save_model(model, self.out / "model", plan, self.log.read(), time.time() - started,
                   self.outputs)

    def _edge(self, model: Any, spec: Any) -> None:
        """The global model as the edge stage's TFLite variant, sent to every client, which
        measures it on its own eval rows beside the cloud (Keras) model."""
        import tensorflow as tf

        from baton.graphs import signatures as S
        from baton.pipeline.release import tflite

        export = self.out / "edge" / "1"
        transform = tf.saved_model.load(str(self.out / "transform_graph"))
        S.save(S.build_module(transform, model, spec, outputs=self.outputs.kind), export, spec)
        flat = tflite.convert(export, self.plan.settings.edge)
        (self.out / "edge" / "model.tflite").write_bytes(flat)
        replies = self._query("edge", {"tflite": flat, "weights": model.get_weights()}, "edge")
        self.log.write({"event": "edge", "variant": self.plan.settings.edge, "size_bytes": len(flat),
                        "clients": {r["client"]: {k: v for k, v in r.items() if k != "client"}
                                    for r in replies}})

    # ------------------------------------------------------------------ records
    def _close_round(self, number: int, strategy: Any) -> None:
        now = wire.read(Path(self.plan.wire_path)) if self.plan.wire_path else {}
        rec = dict(getattr(strategy_core(strategy), "pending", {}))
        rec.update({"event": "round", "round": number,
                    "seconds": round(time.time() - self._round_start["time"], 3)})
        if self.plan.wire_path:  # "": no relays (an external SuperLink), bytes not measured
            before = self._round_start["wire"]
            rec["bytes_up"] = sum(v["up"] - before.get(k, {}).get("up", 0) for k, v in now.items())
            rec["bytes_down"] = sum(v["down"] - before.get(k, {}).get("down", 0)
                                    for k, v in now.items())
        if self.plan.settings.privacy:
            rec["epsilon"] = epsilon(self.plan, number)
        self.log.write(rec)
        self._round_start = {"time": time.time(), "wire": now}
        strategy_core(strategy).pending = {}


def epsilon(plan: Plan, rounds: int) -> float:
    """Client-level (epsilon, delta)-DP spent after `rounds` rounds of the Gaussian mechanism
    with noise multiplier z, each client sampled with probability fraction_fit (Google's
    dp-accounting RDP accountant; Poisson sampling is an approximation of Flower's fixed-size
    sampling, exact when every client takes part)."""
    from dp_accounting import dp_event, rdp

    assert plan.settings.privacy is not None, "epsilon is spent under privacy only"
    z = plan.settings.privacy.noise_multiplier
    if z <= 0:
        return float("inf")
    event: Any = dp_event.GaussianDpEvent(z)
    if plan.settings.fraction_fit < 1:
        event = dp_event.PoissonSampledDpEvent(plan.settings.fraction_fit, event)
    acc = rdp.RdpAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(event, rounds))
    return float(acc.get_epsilon(plan.settings.privacy.delta))


def save_transform(t: Any, directory: Path, fn: Any) -> None:
    from baton.pipeline.dataplane.transform.analysis import (
        VERSION,
        raw_entries,
        save_transform_graph,
    )

    analysis = {"version": VERSION, "raw_features": raw_entries(t.raw), "features": [],
                "label": t.label, "phases": t.phases, "analyzers": len(t.resolved),
                "federated": True}
    save_transform_graph(directory, t.built, t.spec, analysis, fn.source(), t.resolved, t.raw)


def save_model(model: Any, directory: Path, plan: Plan, records: list[dict[str, Any]],
               seconds: float, outputs: Any) -> None:
    """The train stage's model artifact: model.keras, history.json, train_info.json (with what
    the model outputs, `outputs`: graphs.model_outputs.Outputs, which export and evaluate read:
    pipeline.release.data.output_kind)."""
    from baton.graphs.user_refs import modules_of

    tmp = directory.with_name(directory.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save(tmp / "model.keras")
    rounds = [r for r in records if r.get("event") == "round"]
    history = [{"epoch": r["round"], **{k: r[k] for k in ("train_loss", "loss", "accuracy",
                                                          "mse") if k in r}} for r in rounds]
    (tmp / "history.json").write_text(json.dumps(history, indent=1) + "\n")
    s = plan.settings
    info = {"strategy": f"federated/{s.algorithm}", "model": s.model,
            "rounds": len(rounds), "clients": plan.clients, "seconds": round(seconds, 3),
            "compression": s.compression,
            "privacy": dataclasses.asdict(s.privacy) if s.privacy else None,
            "secure_aggregation": dataclasses.asdict(s.secagg) if s.secagg else None,
            # the user's model, loss and optimizer modules: evaluate, export and edge import
            # them again to load its custom layers (release.data.load_model)
            "user_modules": modules_of([s.model, s.loss, s.optimizer]),
            "code_dir": plan.search_dir}
    info["outputs"] = outputs.to_dict()
    (tmp / "train_info.json").write_text(json.dumps(info, indent=1) + "\n")
    tmp.rename(directory)

