"""Baton's Flower ClientApp: runs in each SuperNode, on that node's data directory only.

The SuperNode's `--node-config` names the node's data (`data-dir`, an examples artifact) and
its name (`client`). Messages from the server:

- query `analyze`: this node's partial analyzer accumulators for the transform's next phase
  (pipeline.federated.local.analyze), plus its examples' schema (columns, not rows);
- query `setup`: the transform's analyzer values and the training settings; stored in the
  run's `context.state` (the SuperNode keeps it between messages), so every later message
  rebuilds the same local transform and model; with a compressed downlink, the digest of the
  initial model the node built (seeded) comes back too;
- train: the global weights in, `local_epochs` of training, the updated weights out. With
  `compression` set, `compression_mod` sends the update compressed instead (error feedback in
  `context.state`); with privacy on, Flower's `fixedclipping_mod` clips it first;
- train under `secure_aggregation` (Flower's SecAgg+, four train messages a round):
  `secagg_mod` runs Flower's secaggplus_mod; in its third stage the train handler runs and
  the update leaves the node masked, summed with the others' before the server can read it;
- evaluate: loss and accuracy (or mse) of the global weights on the node's eval rows;
- query `edge`: the same for the TFLite edge model the server converted (on-device check);
- query `confirm`: after training, whether the final weights still output probabilities when
  that was decided from the rows (graphs.model_outputs.confirm).

The setup reply carries what the model outputs, logits or probabilities, as decided on this
node's model and eval batch (pipeline.federated.local); a model refused there (a sigmoid over
several classes) is answered with the error, which the server raises. A train reply whose loss
or weights are not finite carries the first cause found (`NONFINITE`): the server stops the run
naming the round and the client.

With `compression` set, the global weights of train and evaluate messages come down as a
delta against the node's copy of the last global model (pipeline.federated.downlink):
`downlink_mod` rebuilds the weights before the handler sees them, keeps the copy in
`context.state` and answers with its digest. The SuperNode keeps the run's context between
messages (the ClientApp host pushes it back with each reply; `flwr.supernode`'s runtime
handlers store it per run), so the copy lasts as long as the SuperNode and the run; a restarted
SuperNode or a new run starts without one, and the server's first message to it carries the
full weights.

One long-lived process runs every message of a SuperNode (pipeline.federated.clientapp_host),
so `_LOCAL` keeps the client's data, transformed splits and built model from message to
message; the node's name is the ServerApp's registry's, whatever `client` says here
(pipeline.federated.admission).

Everything that leaves the node goes through pipeline.federated.codec (no pickle) or Flower's
own ArrayRecord/MetricRecord.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from typing import Any, cast

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from baton.pipeline.federated import codec, compression, downlink
from baton.pipeline.federated.message_keys import DOWNLINK, LATE_S, NONFINITE

app = ClientApp()
# (setup digest, data dir) -> Local, data dir -> ClientData: built once per ClientApp host
# process, which answers every message of its SuperNode (clientapp_host), and per simulation
# actor, which answers several virtual nodes
_LOCAL: dict[str, Any] = {}
STATE = "baton"
COPY = "baton-copy"  # context.state: the node's copy of the global model (an ArrayRecord)


def _arrays(msg: Message) -> list[np.ndarray]:
    return cast(ArrayRecord, msg.content["arrays"]).to_numpy_ndarrays()


def _config(msg: Message) -> Any:
    """The message's ConfigRecord (the strategy's train/evaluate config), as a mapping."""
    return cast(Any, msg.content.get("config", ConfigRecord()))


def _data(context: Context) -> Any:
    from baton.pipeline.federated.local import ClientData

    key = "data:" + str(context.node_config["data-dir"])
    if key not in _LOCAL:
        _LOCAL[key] = ClientData(str(context.node_config["data-dir"]))
    return _LOCAL[key]


def _name(context: Context) -> str:
    return str(context.node_config.get("client", context.node_id))


def _local(context: Context) -> Any:
    from baton.pipeline.federated.local import FnSpec, Local
    from baton.strategies.federated_settings import FederatedSettings

    if STATE not in context.state or "setup" not in context.state[STATE]:
        raise RuntimeError("this node has no transform setup yet: the server sends it before "
                           "training")
    raw = codec.field(context.state[STATE], "setup")
    # the setup is the same for every client: the key names the client's data too, or a
    # process serving several nodes (a simulation's actor) trains them all on the first's
    key = hashlib.sha256(raw).hexdigest() + ":" + str(context.node_config["data-dir"])
    if key not in _LOCAL:
        setup = codec.loads(raw)
        _LOCAL[key] = Local(FnSpec(**setup["fn"]), setup["resolved"], setup["label"],
                            _data(context), FederatedSettings.from_dict(setup["settings"]),
                            setup["search_dir"])
    return _LOCAL[key]


def _reply(msg: Message, **payload: Any) -> Message:
    return Message(content=RecordDict({"baton": ConfigRecord({"blob": codec.dumps(payload)})}),
                   reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    from baton.pipeline.federated.local import FnSpec, analyze

    request = codec.loads(codec.field(msg.content["baton"]))
    op = request["op"]
    data = _data(context)
    if op == "analyze":
        out = analyze(FnSpec(**request["fn"]), request["resolved"], data, request["with_label"])
        return _reply(msg, client=_name(context), schema=data.schema.to_dict(), **out)
    if op == "setup":
        from baton.errors import StageError

        context.state[STATE] = ConfigRecord({"setup": codec.dumps(request["setup"])})
        try:
            local = _local(context)
        except StageError as exc:  # the model refused (graphs.model_outputs.decide)
            return _reply(msg, client=_name(context), error=str(exc))
        initial = None
        if request.get("downlink"):
            # the model as built from the shared settings and seed: the copy this node holds
            # before any message; the server sends a reference instead of it when its own
            # initial weights have the same digest
            weights = local.model.get_weights()
            context.state[COPY] = ArrayRecord(weights)
            initial = downlink.digest(weights)
        return _reply(msg, client=_name(context), train=local.examples("train"),
                      eval=local.examples("eval"), initial=initial,
                      outputs=dataclasses.asdict(local.outputs))
    if op == "confirm":
        error = _local(context).confirm([np.asarray(w) for w in request["weights"]])
        return _reply(msg, client=_name(context), **({"error": error} if error else {}))
    if op == "edge":
        cloud = _local(context).evaluate([np.asarray(w) for w in request["weights"]])
        edge = _edge(context, request["tflite"])
        return _reply(msg, client=_name(context), examples=edge.pop("examples"),
                      **{f"edge_{k}": v for k, v in edge.items()},
                      **{f"cloud_{k}": v for k, v in cloud.items() if k in ("accuracy", "mse")})
    raise ValueError(f"unknown query {op!r}")


def _edge(context: Context, model: bytes) -> dict[str, float]:
    """The TFLite model's accuracy (or mse) on this node's eval rows, on the node itself."""
    from baton.pipeline.release import tflite

    local = _local(context)
    split = "eval" if local.examples("eval") else "train"
    feats, y = local.splits[split]
    out = tflite.predict(tflite.runner(model), feats)
    if local.task == "regression":
        return {"mse": float(np.mean((np.reshape(out["predictions"], -1) - y) ** 2)),
                "examples": float(len(y))}
    return {"accuracy": float(np.mean(np.argmax(out["probabilities"], axis=1) == y)),
            "examples": float(len(y))}


def compression_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Send the update (trained - received weights) compressed, with error feedback."""
    reply = call_next(msg, context)
    method = str(_config(msg).get("compression", "none"))
    if method == "none" or reply.has_error():
        return reply
    received, trained = _arrays(msg), _arrays(reply)
    update = [t - r for t, r in zip(trained, received, strict=True)]
    residual = None
    if STATE in context.state and "residual" in context.state[STATE]:
        residual = [np.asarray(a) for a in codec.loads(codec.field(context.state[STATE], "residual"))]
    sent, residual = compression.encode(update, method, residual)
    state = cast(Any, context.state[STATE] if STATE in context.state else ConfigRecord())
    state["residual"] = codec.dumps(residual)
    context.state[STATE] = state
    reply.content["arrays"] = ArrayRecord({k: Array(v) for k, v in sent.items()})
    return reply


def downlink_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Rebuild the global weights from a compressed downlink message (full, delta or a
    reference to the copy held), keep them as this node's copy, answer with its digest."""
    cfg = _config(msg)
    if "downlink" not in cfg:
        return call_next(msg, context)
    copy = cast(ArrayRecord, context.state[COPY]).to_numpy_ndarrays() \
        if COPY in context.state else None
    arrays = {k: v.numpy() for k, v in cast(ArrayRecord, msg.content["arrays"]).items()}
    try:
        weights = downlink.receive(cfg, arrays, copy)
    except downlink.Stale as exc:
        return Message(content=RecordDict({DOWNLINK: ConfigRecord({"stale": str(exc)})}),
                       reply_to=msg)
    msg.content["arrays"] = ArrayRecord(weights)
    reply = call_next(msg, context)
    if not reply.has_error():
        context.state[COPY] = ArrayRecord(weights)
        reply.content[DOWNLINK] = ConfigRecord({"copy": downlink.digest(weights)})
    return reply


def dp_clipping_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Flower's fixedclipping_mod when the server's DP wrapper asks for clipping (it sends
    `clipping_norm`); otherwise nothing (the plain mod fails a message without it)."""
    from flwr.clientapp.mod import fixedclipping_mod

    if "clipping_norm" in _config(msg):
        return fixedclipping_mod(msg, context, call_next)
    return call_next(msg, context)


def secagg_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Flower's secaggplus_mod for the train messages of a secure-aggregation round (they
    carry its `secagg` record); any other train message passes by.

    SecAgg+ speaks Flower's legacy layout (fitins in, fitres out): inside it, the message is
    turned into the layout the other mods and the train handler read, and the reply into a
    fitres whose parameters are the update (trained - received weights; clipped first by
    dp_clipping_mod when privacy is on). secaggplus_mod quantizes it, adds the masks and
    clears the arrays: only the masked vector leaves the node."""
    from flwr.client.mod import secaggplus_mod
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

    if RECORD_KEY_CONFIGS not in msg.content.config_records:
        return call_next(msg, context)

    def legacy(inner: Message, ctx: Context) -> Message:
        from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
        from flwr.common import parameters_to_ndarrays as to_arrays
        from flwr.compat.common import recorddict_compat as compat

        fitins = compat.recorddict_to_fitins(inner.content, keep_input=True)
        received = to_arrays(fitins.parameters)
        inner.content = RecordDict({"arrays": ArrayRecord(received),
                                    "config": ConfigRecord(dict(fitins.config))})
        reply = call_next(inner, ctx)
        if reply.has_error():
            return reply
        update = [t - r for t, r in zip(_arrays(reply), received, strict=True)]
        metrics = cast(Any, reply.content["metrics"])
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(update),
                     int(metrics["num-examples"]), {"train_loss": float(metrics["train_loss"])})
        return Message(content=compat.fitres_to_recorddict(res, keep_input=False), reply_to=inner)

    return cast(Message, secaggplus_mod(msg, context, legacy))


@app.train(mods=[secagg_mod, downlink_mod, compression_mod, dp_clipping_mod])
def train(msg: Message, context: Context) -> Message:
    local = _local(context)
    cfg = _config(msg)
    new, _, loss = local.train(_arrays(msg), int(cfg["local_epochs"]), float(cfg.get("mu", 0.0)),
                               int(cfg.get("server-round", 0)))
    metrics = MetricRecord({"num-examples": local.examples("train"), "train_loss": loss})
    content = RecordDict({"arrays": ArrayRecord(new), "metrics": metrics})
    if local.nonfinite is not None:
        content[NONFINITE] = ConfigRecord({"cause": local.nonfinite})
    late = float(cfg.get(LATE_S, 0.0))  # a rehearsed slow client (plan.late_clients)
    if late > 0:
        time.sleep(late)  # alive and heartbeating, just late: the reply outlives its message
    return Message(content=content, reply_to=msg)


@app.evaluate(mods=[downlink_mod])
def evaluate(msg: Message, context: Context) -> Message:
    local = _local(context)
    out = local.evaluate(_arrays(msg))
    examples = int(out.pop("examples"))
    metrics = MetricRecord({"num-examples": examples, **out})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)

