"""What one federated client does with its own data, and nothing else sees: Flower-free.

Every function here runs inside a client's process (a Flower SuperNode's ClientApp) on the
examples directory of that client alone:

- `analyze`: the transform's analyzer phase on the client's train rows: the mergeable partial
  accumulators (moments, token counts, quantile sketches) and, in the first phase, the label's
  class counts. These leave the client; rows never do.
- `Local.train`: the global weights in, `local_epochs` of training on the transformed rows, the
  updated weights out (FedProx adds mu/2 * ||w - w_global||^2 to the loss).
- `Local.evaluate`: loss and accuracy (mse for regression) of given weights on the eval rows.

What a classifier outputs, logits or probabilities already (a softmax at its end), is decided
as the train stage decides it (graphs.model_outputs, on the built model and its output on the
first eval batch): the loss is built with `from_logits` accordingly, and the decision goes back
to the server in the setup reply, which records it for export and serving
(pipeline.federated.flower_server). A non-finite training loss (or weight) is traced to its
first cause here (graphs.nonfinite.first_cause); the server stops the run on it.

The transform a client applies is built from the same function and the same analyzer values
as the server's `transform_graph` (graphs.tft.module), so the features it trains on are the
features the released model serves on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from baton.errors import StageError
from baton.graphs import compiled, model_outputs
from baton.strategies.federated_settings import FederatedSettings


@dataclasses.dataclass(frozen=True)
class FnSpec:
    """How a client rebuilds the transform's function: the column plan or the user's ref."""

    columns: Mapping[str, Mapping[str, Any]] | None = None
    preprocessing_fn: str | None = None
    search_dir: str | None = None

    def source(self) -> Any:
        if self.preprocessing_fn is not None:
            from baton.pipeline.dataplane.transform.fn_source import UserFn

            return UserFn(self.preprocessing_fn, self.search_dir)
        from baton.graphs.column_kinds import ColumnsFn

        return ColumnsFn(dict(self.columns or {}))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def raw_features(fn_spec: FnSpec, schema: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of the raw feature columns the function reads (the serving inputs)."""
    cols = [c for c in schema.features
            if fn_spec.columns is None or c.name in fn_spec.columns]
    return [(c.name, "float32" if c.is_numeric else "string", tuple(c.shape)) for c in cols]


class ClientData:
    """The client's examples directory, read once into raw columns (the raw contract)."""

    def __init__(self, examples: str | Path) -> None:
        from baton.pipeline.dataplane.records.schema_file import ExamplesSchema

        self.dir = Path(examples)
        if not (self.dir / "schema.json").is_file():
            raise StageError(f"client data {self.dir}: no examples artifact here "
                             "(expected schema.json and train/ shards)")
        self.schema = ExamplesSchema.load(self.dir)
        self._raw: dict[str, dict[str, np.ndarray]] = {}

    def raw(self, split: str) -> dict[str, np.ndarray]:
        if split not in self._raw:
            from baton.pipeline.dataplane.records.reader import raw_columns, read_batches
            from baton.pipeline.dataplane.records.schema_file import shard_files

            cols = list(self.schema.columns)
            parts = [raw_columns(b, cols) for f in shard_files(self.dir, split)
                     for b in read_batches(f, cols)]
            self._raw[split] = {c.name: np.concatenate([p[c.name] for p in parts])
                                if parts else np.zeros(0) for c in cols}
        return self._raw[split]

    def rows(self, split: str) -> int:
        return int(self.schema.splits.get(split, 0))


def analyze(fn_spec: FnSpec, resolved: Mapping[int, list[Any]], data: ClientData,
            with_label: bool) -> dict[str, Any]:
    """This client's partial accumulators for the next analyzer phase (none left: empty)."""
    from baton.graphs.tft import engine as tft_engine

    schema = data.schema
    label = schema.column(schema.label)
    raw_all = [*raw_features(fn_spec, schema),
               (label.name, "float32" if label.is_numeric else "string", ())]
    phases = tft_engine.Phases(fn_spec.source().load(), tft_engine.raw_specs(raw_all))
    phases.resolved = dict(resolved)
    phase = phases.next()
    train = data.raw("train")
    out: dict[str, Any] = {"partials": {}, "kinds": {}, "rows": data.rows("train")}
    if phase is not None:
        out["partials"] = phase.accumulate({n: train[n] for n, _, _ in raw_all})
        out["kinds"] = {k: r.kind for k, r in phase.analyzers.items()}
    if with_label:
        out["label"] = label_summary(train[label.name], label.is_numeric)
    return out


def label_summary(y: np.ndarray, numeric: bool) -> dict[str, Any]:
    """Class counts (missing left out), or (n, mean, m2) of a regression target."""
    if numeric:
        v = y[np.isfinite(y)].astype(np.float64)
        mean = float(v.mean()) if len(v) else 0.0
        return {"n": len(v), "mean": mean, "m2": float(((v - mean) ** 2).sum())}
    out: dict[bytes, int] = {}
    for t in y.tolist():
        if t:
            out[t] = out.get(t, 0) + 1
    return {"counts": out}


def merge_labels(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    if any("counts" in s for s in summaries):
        out: dict[bytes, int] = {}
        for s in summaries:
            for v, c in s.get("counts", {}).items():
                out[v] = out.get(v, 0) + c
        return {"counts": out}
    n, mean, m2 = 0, 0.0, 0.0
    for s in summaries:
        nb = s["n"]
        if not nb:
            continue
        delta = s["mean"] - mean
        tot = n + nb
        mean += delta * nb / tot
        m2 += s["m2"] + delta ** 2 * n * nb / tot
        n = tot
    return {"n": n, "mean": mean, "m2": m2}


def label_entry(merged: Mapping[str, Any], name: str, dtype: str, task: str) -> dict[str, Any]:
    """analysis.json's label entry from the merged summaries (as the transform stage writes)."""
    if task == "classification":
        counts = merged.get("counts", {})
        if not counts:
            raise StageError(f"federated: no client has train rows with label {name!r}")
        vocab = sorted(v.decode("utf-8", "replace") for v in counts)
        return {"name": name, "dtype": dtype, "task": task, "vocabulary": vocab,
                "counts": [counts[v.encode("utf-8")] for v in vocab]}
    if not merged.get("n"):
        raise StageError(f"federated: no client has train rows with label {name!r}")
    return {"name": name, "dtype": dtype, "task": task, "vocabulary": [],
            "mean": merged["mean"], "var": merged["m2"] / merged["n"]}


def agreed_outputs(decisions: Mapping[str, Mapping[str, Any]]) -> model_outputs.Outputs:
    """The run's decision (graphs.model_outputs.Outputs) from each client's, by client name:
    every client builds the same model from the same seed, so they agree unless the decision
    came from rows that sum to 1 on one client's eval batch and not on another's (a model that
    only sometimes ends in a distribution): StageError naming who decided what."""
    kinds: dict[str, list[str]] = {}
    for client, d in sorted(decisions.items()):
        kinds.setdefault(str(d["kind"]), []).append(client)
    if len(kinds) > 1:
        said = "; ".join(f"{kind} for {', '.join(map(repr, who))}" for kind, who in kinds.items())
        raise StageError("federated: the clients disagree on what the model outputs (logits or "
                         f"probabilities, decided on each one's eval rows): {said}. End the "
                         "model in a softmax (probabilities) or in a layer with no activation "
                         "(logits)")
    if not decisions:
        return model_outputs.Outputs()
    first = decisions[min(decisions)]
    return model_outputs.Outputs(first["kind"], first["reason"], bool(first.get("from_rows")))


class Local:
    """One client's transformed data and model, built once per process and reused by rounds."""

    def __init__(self, fn_spec: FnSpec, resolved: Mapping[int, list[Any]],
                 label: Mapping[str, Any], data: ClientData, settings: FederatedSettings,
                 search_dir: str | None = None) -> None:
        """`settings`: the federated stage's Config as the server sent it (its model, batch
        size, optimizer, loss and seed are read here); `search_dir`: where the user's modules
        are imported from (the spec's directory)."""
        from baton.graphs import model_fn
        from baton.graphs.tft import module as tft_module

        self.settings = settings
        self.search_dir = search_dir
        self.task = label["task"]
        raw = raw_features(fn_spec, data.schema)
        self.built = tft_module.build_module(fn_spec.source().load(), raw, label, resolved)
        self.spec = tft_module.feature_spec(self.built, raw, label)
        self.splits = {s: self._transform(data.raw(s), raw, label["name"])
                       for s in ("train", "eval") if data.rows(s)}
        if "train" not in self.splits:
            raise StageError(f"client data {data.dir}: no train rows")
        self.model = model_fn.build(settings.model, self.spec, dict(settings.model_params),
                                    settings.seed, search_dir)
        self.num_classes = len(label.get("vocabulary", ())) or 1
        self.nonfinite: str | None = None  # the first cause of the last round's NaN, if any
        self.name = model_fn.describe(settings.model)  # how errors name the model function
        self.outputs = model_outputs.decide(self.model, self.task, self.num_classes,
                                            self._sample(), self.name)
        # what the model function's compile() set: its loss and optimizer train the model where
        # the stage sets none, as in the train stage (graphs.compiled)
        self.compile_args = compiled.read(self.model, self.name)
        own_loss = self.compile_args.loss if self.compile_args is not None else None
        if own_loss is not None and not settings.loss:
            compiled.check_from_logits(own_loss, self.outputs.probabilities,
                                       self.outputs.reason, self.name)

    def _batches(self, split: str) -> Any:
        """`split` (train when it has no rows) in order, as `(features, labels)` batches."""
        import tensorflow as tf

        feats, y = self.splits[split if split in self.splits else "train"]
        return tf.data.Dataset.from_tensor_slices((feats, y)).batch(self.settings.batch_size)

    def _sample(self) -> Any:
        """The model's output on the first eval batch (graphs.model_outputs.sample)."""
        return model_outputs.sample(self.model, self._batches("eval"))

    def confirm(self, weights: list[np.ndarray]) -> str | None:
        """After training: None when the decision still holds for `weights`, else why not
        (graphs.model_outputs.confirm's message)."""
        if not self.outputs.from_rows:
            return None
        self.model.set_weights(weights)
        try:
            model_outputs.confirm(self.model, self.outputs, self._sample(), self.name)
        except StageError as exc:
            return str(exc)
        return None

    def _transform(self, raw: Mapping[str, np.ndarray], features: Sequence[tuple[str, str, Any]],
                   label: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        module = self.built.module
        feats = {k: v.numpy() for k, v in module.transform_features(
            {n: raw[n] for n, _, _ in features}).items()}
        y = module.transform_label(raw[label]).numpy()
        keep = (y >= 0) if y.dtype.kind == "i" else ~np.isnan(y)
        return {k: v[keep] for k, v in feats.items()}, y[keep]

    def examples(self, split: str) -> int:
        return len(self.splits[split][1]) if split in self.splits else 0

    def _loss(self) -> Any:
        import tensorflow as tf

        from baton.graphs.objectives import make_loss

        own = self.compile_args.loss if self.compile_args is not None else None
        loss = self.settings.loss or own
        fn = make_loss(loss, self.task, self.num_classes, self.search_dir,
                       from_logits=not self.outputs.probabilities)
        if fn is not None:
            return fn
        if self.task == "regression":
            return lambda y, p: tf.square(tf.reshape(p, [-1]) - tf.cast(y, tf.float32))
        return lambda y, p: tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(y, tf.int64), logits=tf.cast(p, tf.float32))

    def train(self, weights: list[np.ndarray], epochs: int, mu: float = 0.0,
              round_number: int = 0) -> tuple[list[np.ndarray], int, float]:
        """(updated weights, examples trained on, mean train loss of the last epoch). The
        optimizer starts fresh each round, as a FedAvg client's does. A non-finite loss or
        weight leaves its first cause in `nonfinite` (None when all is finite)."""
        import math

        import tensorflow as tf

        from baton.graphs import nonfinite

        if not hasattr(self, "_epoch"):
            self._compile()
        self.model.set_weights(weights)
        for a, v in zip(self._anchor, self.model.trainable_variables, strict=True):
            a.assign(v)
        self._mu.assign(mu)
        for v, init in zip(self._opt.variables, self._opt_init, strict=True):
            v.assign(init)  # moments and step count as built; the learning rate kept
        feats, y = self.splits["train"]
        ds = tf.data.Dataset.from_tensor_slices((feats, y)).shuffle(
            len(y), seed=self.settings.seed + round_number, reshuffle_each_iteration=True
        ).batch(self.settings.batch_size)
        last = 0.0
        for _ in range(epochs):
            last = float(self._epoch(ds))
        self.nonfinite = None
        if not math.isfinite(last) or not nonfinite.weights_finite(self.model):
            self.nonfinite = nonfinite.first_cause(self._batches("train"), self.model,
                                                   self._loss(), "train") or (
                f"the training loss is {last}, its weights, outputs and per-row losses finite "
                "after the epoch")
        return self.model.get_weights(), len(y) * epochs, last

    def _compile(self) -> None:
        import tensorflow as tf

        from baton.graphs.objectives import make_optimizer

        model = self.model
        variables = model.trainable_variables
        self._anchor = [tf.Variable(v, trainable=False) for v in variables]
        self._mu = tf.Variable(0.0, trainable=False)
        own = self.compile_args.optimizer if self.compile_args is not None else None
        if self.settings.optimizer or own is None:
            self._opt = make_optimizer(self.settings.optimizer or "adam",
                                       self.settings.learning_rate, self.search_dir)
        else:
            self._opt = own  # the compile()'s, its own learning rate; reset every round below
        self._opt.build(variables)
        self._opt_init = [v.numpy() for v in self._opt.variables]
        loss_fn, anchor, mu, opt = self._loss(), self._anchor, self._mu, self._opt

        @tf.function
        def epoch(ds: Any) -> Any:
            total, steps = tf.constant(0.0), tf.constant(0.0)
            for x, y in ds:
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
                    prox = tf.add_n([tf.reduce_sum(tf.square(v - a))
                                     for v, a in zip(variables, anchor, strict=True)])
                    objective = loss + (mu / 2) * prox  # FedProx; mu = 0 is FedAvg
                grads = tape.gradient(objective, variables)
                opt.apply_gradients(zip(grads, variables, strict=True))
                total += loss
                steps += 1.0
            return total / tf.maximum(steps, 1.0)

        self._epoch = epoch

    def evaluate(self, weights: list[np.ndarray], split: str = "eval") -> dict[str, float]:
        """loss, accuracy (or mse) and the example count on `split` (train if it has no rows)."""
        import tensorflow as tf

        if split not in self.splits:
            split = "train"
        self.model.set_weights(weights)
        feats, y = self.splits[split]
        out = self.model.predict_on_batch({k: tf.constant(v) for k, v in feats.items()}) \
            if len(y) else np.zeros((0, self.num_classes))
        loss = float(np.mean(self._loss()(tf.constant(y), tf.constant(out)).numpy())) \
            if len(y) else 0.0
        result = {"loss": loss, "examples": float(len(y))}
        if self.task == "regression":
            result["mse"] = float(np.mean((np.reshape(out, -1) - y) ** 2)) if len(y) else 0.0
        else:  # the argmax of logits or probabilities alike
            result["accuracy"] = float(np.mean(np.argmax(out, axis=1) == y)) if len(y) else 0.0
        return result
