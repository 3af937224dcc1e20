"""TF1 SavedModels served the way TF Serving serves them: a Session over the MetaGraph.

`tf.saved_model.load` restores a TF1 SavedModel by pruning one function per signature out
of the MetaGraph (`wrap_function`), and that pruning checks what TF Serving never checks:
upstream's own `saved_model_half_plus_three` fails there with "Shapes must be equal rank"
(a `[-1, 1]` output declared for a tensor whose shape inference says scalar), and a graph
of reference variables (`saved_model_counter`, `float_ref` assigns) cannot be pruned at
all. TF Serving's loader does neither: it imports the whole MetaGraph into a Session
(`LoadSavedModel`: restore op, then the main op or legacy init op, with the assets
mapped) and runs each signature by its tensor names (`Session::Run(feeds, fetches)`).

This module does exactly that with TensorFlow's own Python API for it,
`tf.compat.v1.saved_model.loader.load` in a `tf.compat.v1.Session`: the same graph, the
same restore and init ops, the same tensors fed and fetched, so the answers are those of
TF Serving. Each signature gets one `Session.make_callable` (feeds and fetches bound once:
about half the per-call cost of `Session.run`). A Session's run is thread-safe, so the
batcher's worker threads call it concurrently as they call a restored function.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from baton.serving.servable import Signature, as_array, run_errors, spec_of, writes_state


class SessionSignature(Signature):
    """A signature run by tensor names in a Session (see the module docstring)."""

    def __post_init__(self) -> None:
        self._fast = None  # no restored function: the session call is the only path
        self.stateful = getattr(self.fn, "stateful", True)

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with run_errors():
            return self.fn(feeds)


class _Runner:
    """One signature's bound Session callable: numpy in, numpy out, by signature keys."""

    def __init__(self, session, sig_def, graph_def):
        self.session = session
        self.input_keys = sorted(sig_def.inputs)
        self.output_keys = sorted(sig_def.outputs)
        self.stateful = writes_state(reachable_ops(
            graph_def, [sig_def.outputs[k].name for k in self.output_keys]))
        self.call = _bind(session, [sig_def.inputs[k].name for k in self.input_keys],
                          [sig_def.outputs[k].name for k in self.output_keys])

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if feeds.keys() != set(self.input_keys):
            missing = sorted(set(self.input_keys) - feeds.keys())
            extra = sorted(feeds.keys() - set(self.input_keys))
            raise ValueError(f"signature inputs are {self.input_keys}: missing {missing}, "
                             f"unexpected {extra}")
        values = self.call(*[feeds[k] for k in self.input_keys])
        return {k: as_array(v) for k, v in zip(self.output_keys, values, strict=True)}


def reachable_ops(graph_def, fetches: list[str]) -> set[str]:
    """Op types the fetched tensors depend on (data and control inputs, and the bodies
    of library functions those ops call)."""
    nodes = {n.name: n for n in graph_def.node}
    functions = {f.signature.name: f for f in graph_def.library.function}
    seen: set[str] = set()
    todo = [name.split(":")[0] for name in fetches]
    ops: set[str] = set()
    while todo:
        name = todo.pop().lstrip("^").split(":")[0]
        node = nodes.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        ops.add(node.op)
        todo.extend(node.input)
    for op in list(ops):  # a function called by a reached op: its ops count too
        f = functions.get(op)
        if f is not None:
            ops.update(n.op for n in f.node_def)
    return ops


def _bind(session, feeds: list[str], fetches: list[str]):
    """`session`'s callable for these tensor names, as Session::MakeCallable binds them.

    `Session.make_callable` with feeds goes through `Session.run`, whose Python feed
    handling checks each value against the placeholder's static shape; Session::Run in
    C++ (TF Serving's) does not, and TF1 graphs rely on it (half_plus_two declares
    `x` as [-1, 1]; upstream's tests feed it [1]). `_make_callable_from_options` is the
    C++ callable itself (TF_SessionMakeCallable); without it, `run` is used.
    """
    from tensorflow.core.protobuf import config_pb2

    make = getattr(session, "_make_callable_from_options", None)
    if make is None:  # pragma: no cover - a TensorFlow without it
        graph = session.graph
        feed_ts = [graph.get_tensor_by_name(n) for n in feeds]
        fetch_ts = [graph.get_tensor_by_name(n) for n in fetches]
        return lambda *args: session.run(fetch_ts, dict(zip(feed_ts, args, strict=True)))
    for name in feeds + fetches:
        session.graph.get_tensor_by_name(name)  # a signature naming no tensor fails here
    return make(config_pb2.CallableOptions(feed=feeds, fetch=fetches))


class SessionModel:
    """The Session and graph a TF1 version runs in. An unloaded version's Session is
    closed by its finalizer once the last in-flight call drops it (the server collects
    garbage after every unload; bench/serving/reload_soak.py measures the memory);
    `close` frees it at once."""

    def __init__(self, session, graph):
        self.session = session
        self.graph = graph
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.session.close()


def session_config():
    """A ConfigProto with the process' thread settings (--tensorflow_*_parallelism)."""
    import tensorflow as tf

    return tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=tf.config.threading.get_intra_op_parallelism_threads(),
        inter_op_parallelism_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        allow_soft_placement=True)


def load_session_signatures(export_dir: str, tags: tuple[str, ...], signature_defs
                            ) -> tuple[SessionModel, dict[str, Signature]]:
    """Imports the tagged MetaGraph into a new Session and binds every signature.

    Raises what TensorFlow raises for a model it cannot restore; a signature naming a
    tensor that is not in the graph fails the load (TF Serving fails it at its first
    request: failing early keeps the previous version serving).
    """
    import tensorflow as tf

    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=session_config())
    try:
        with graph.as_default():
            tf.compat.v1.saved_model.loader.load(session, list(tags), export_dir)
        sigs: dict[str, Signature] = {}
        graph_def = graph.as_graph_def()
        for name, sd in signature_defs.items():
            inputs = {k: spec_of(k, v) for k, v in sd.inputs.items()}
            outputs = {k: spec_of(k, v) for k, v in sd.outputs.items()}
            runner: Any = _Runner(session, sd, graph_def)
            sigs[name] = SessionSignature(name=name, method_name=sd.method_name,
                                          inputs=inputs, outputs=outputs, fn=runner)
        graph.finalize()  # nothing is added per request: a finalized graph says so
    except BaseException:
        session.close()
        raise
    return SessionModel(session, graph), sigs
