"""One loaded SavedModel version: its signatures, metadata, warmup and the call itself.

saved_model.pb is parsed here (cheap, and it is what TF Serving's metadata API returns
verbatim); loader.py then restores the version with tf.saved_model.load (the signatures
here), or in a TF1 Session or LiteRT (session_servable.py, tflite_servable.py, which
subclass Signature). A directory that is half-copied fails a step, and the manager keeps
serving the old version: nothing is visible to clients until the load returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from baton.serving.conventions import DEFAULT_SERVING_SIGNATURE_DEF_KEY, WARMUP_FILE
from baton.serving.status import Code, ServingError, invalid
from baton.serving.tensor_proto import examples_from_input_proto, to_ndarray

log = logging.getLogger(__name__)

WARMUP_ITERATIONS = 1


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What a signature input or output accepts: numpy dtype, TF dtype name, shape."""

    name: str
    dtype: np.dtype
    tf_dtype: str  # e.g. "DT_FLOAT"
    shape: tuple[int | None, ...] | None  # None: unknown rank

    @property
    def is_string(self) -> bool:
        return self.tf_dtype == "DT_STRING"


@dataclasses.dataclass
class Signature:
    """A callable signature; `fn` takes tf tensors by input name and returns a dict."""

    name: str
    method_name: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    fn: Callable[..., Any]
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    # inputs a request may leave out, with the value that then stands in: the SignatureDef's
    # `defaults`, as TF Serving fills them in (tensorflow/cc/saved_model/util.cc GetInputValues)
    defaults: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    # what front ends derive from the specs once (e.g. rest_json's row plan)
    cache: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    # whether a call updates state (a variable, a table): such a call must run exactly
    # once per request, so a failed batch of it is not re-run piecewise (batcher)
    stateful: bool = True

    def __post_init__(self) -> None:
        try:
            self.stateful = _writes_state(self.fn)
        except (AttributeError, TypeError, ValueError):
            self.stateful = True  # unknown: assume it does
        self._fast = None if self.stateful else _FastCall.build(self.fn, self.inputs)

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the signature on numpy arrays; TF errors become INVALID_ARGUMENT."""
        import tensorflow as tf

        if self.defaults and feeds.keys() != self.inputs.keys():
            feeds = {**{k: v for k, v in self.defaults.items() if k not in feeds}, **feeds}
        with run_errors():
            fast = self._fast
            if fast is not None and fast.fn is self.fn and feeds.keys() == self.inputs.keys() \
                    and all(_fits(feeds[k], self.inputs[k]) for k in fast.order):
                out = fast(feeds) if fast.verified else self._verify(fast, feeds)
            else:
                out = self.fn(**{k: tf.constant(v) for k, v in feeds.items()})
            return {k: as_array(v.numpy()) for k, v in out.items()}

    def _verify(self, fast: _FastCall, feeds: dict[str, np.ndarray]) -> dict:
        """First call: the keyword call's result is returned; the fast call is kept for
        the next calls only if it gave the same outputs."""
        import tensorflow as tf

        out = self.fn(**{k: tf.constant(v) for k, v in feeds.items()})
        try:
            got = fast(feeds)
            same = got.keys() == out.keys() and all(
                _same(got[k].numpy(), out[k].numpy()) for k in out)
        except Exception:  # noqa: BLE001 - whatever went wrong, the keyword call is kept
            same = False
        if same:
            fast.verified = True
        else:
            log.warning("signature %s: the fast call differs from the keyword call; "
                        "using the keyword call", self.name)
            self._fast = None
        return out


def as_array(value) -> np.ndarray:
    """A tensor's value as an ndarray: `.numpy()` of a 0-d string tensor is bare bytes
    (and of a 0-d number a numpy scalar); TF strings are object arrays of bytes."""
    if isinstance(value, np.ndarray):
        return value
    return np.array(value, dtype=object if isinstance(value, bytes) else None)


@contextlib.contextmanager
def run_errors():
    """Turns what a signature run raises into a ServingError with TensorFlow's code:
    INVALID_ARGUMENT for bad inputs (TF's, or a ValueError/TypeError converting them)."""
    import tensorflow as tf

    try:
        yield
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
        raise invalid(_short(getattr(e, "message", None) or str(e)) or repr(e)) from None
    except tf.errors.OpError as e:
        raise ServingError(Code(e.error_code), _short(e.message)) from None


class _FastCall:
    """A restored signature called the way its keyword call ends up calling it.

    A keyword call of a restored signature binds the arguments to its structured
    signature (canonicalize, unpack, cast each tensor to its spec), maps the captured
    variables, checks for gradient tapes, then calls the function on the flat list of
    inputs and captures; tf.constant on each input goes through several layers too. For
    inputs that already have their spec's dtype and shape none of that changes anything,
    and in the server it is about a third of a small model's call, all of it holding the
    GIL the event loop needs. So such inputs become EagerTensors directly and go to the
    atomic function's `call_preflattened` (no tape ever watches a serving thread).

    These are TensorFlow internals: `build` returns None when they are not there as
    expected, and the first call is checked against the keyword call (Signature._verify):
    if the outputs differ, the keyword call is used from then on.
    """

    __slots__ = ("fn", "order", "dtypes", "call", "tensor", "context", "verified")

    @classmethod
    def build(cls, fn, inputs: dict[str, TensorSpec]) -> _FastCall | None:
        """None when the internals are not there (and, by the caller, for a stateful
        signature: verifying its fast call would run the update twice)."""
        try:
            return cls(fn, inputs)
        except (AttributeError, TypeError, ValueError, ImportError):
            return None

    def __init__(self, fn, inputs: dict[str, TensorSpec]):
        import tensorflow as tf
        from tensorflow.python.eager import context
        from tensorflow.python.framework import ops

        args, kwargs = fn.structured_input_signature
        if args or not isinstance(kwargs, dict) or set(kwargs) != set(inputs):
            raise TypeError("not a signature of keyword tensors")
        inner = fn._inference_function
        self.fn = fn
        self.order: list[str] = tf.nest.flatten({k: k for k in kwargs})  # the call's order
        self.dtypes = [kwargs[k].dtype.as_datatype_enum for k in self.order]
        fn.captured_inputs  # noqa: B018 - must exist
        self.call = inner.call_preflattened
        self.tensor = ops.EagerTensor
        self.context = context.context
        self.verified = False

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict:
        device, tensor = self.context().device_name, self.tensor
        return self.call([tensor(feeds[k], device, d) for k, d in zip(self.order, self.dtypes,
                                                                       strict=True)]
                         + self.fn.captured_inputs)


# Op types that update state (variables, hash tables): a signature holding one is stateful,
# so each call must run it exactly once (the counter model's incr_counter).
_STATE_WRITES = ("Assign", "ResourceApply", "ResourceScatter", "ResourceSparseApply",
                 "ResourceStridedSliceAssign", "LookupTableInsert", "LookupTableRemove",
                 "LookupTableImport", "MutableHashTable")


def _writes_state(fn) -> bool:
    """True when the signature's graph (or a function it calls) updates state."""
    graph_def = fn.graph.as_graph_def()
    ops = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        ops.update(n.op for n in f.node_def)
    return writes_state(ops)


def writes_state(op_types) -> bool:
    """True when any of these op types updates state."""
    return any(op.startswith(_STATE_WRITES) for op in op_types)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _fits(arr: np.ndarray, spec: TensorSpec) -> bool:
    """True when `arr` needs no cast or shape check to feed `spec`."""
    if arr.dtype != spec.dtype or spec.shape is None or arr.ndim != len(spec.shape):
        return False
    return all(e is None or e == a for e, a in zip(spec.shape, arr.shape, strict=True))


def set_parallelism(intra: int = 0, inter: int = 0) -> None:
    """`--tensorflow_intra_op_parallelism` / `--tensorflow_inter_op_parallelism` (0: TF
    picks); must run before TensorFlow's runtime starts (ModelServer.start does it first)."""
    import tensorflow as tf

    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError as e:  # the runtime already started (a server inside a test)
        log.warning("TensorFlow thread pools already set up; parallelism flags ignored: %s", e)


def _short(message: str) -> str:
    """The informative line of a TF error ("Graph execution error:" says nothing)."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Graph execution error") and len(lines) > 1:
        useful = [ln for ln in lines[1:]
                  if not ln.startswith(("Detected at node", "File ", "[[", "Stack trace"))]
        return (useful[-1] if useful else lines[-1])[:500]
    return lines[0][:500]


def spec_of(name: str, info) -> TensorSpec:
    """The TensorSpec of a SignatureDef's TensorInfo."""
    from tensorflow import as_dtype
    from tensorflow.core.framework import types_pb2

    dt = as_dtype(info.dtype)
    shape = None
    if not info.tensor_shape.unknown_rank:
        shape = tuple(None if d.size < 0 else int(d.size) for d in info.tensor_shape.dim)
    np_dtype = np.dtype(object) if dt.name == "string" else np.dtype(dt.as_numpy_dtype)
    return TensorSpec(name, np_dtype, types_pb2.DataType.Name(info.dtype), shape)


def read_saved_model_proto(export_dir: str):
    """Parses <export_dir>/saved_model.pb; raises ServingError(DATA_LOSS) if unreadable."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(export_dir, "saved_model.pb")
    try:
        with open(path, "rb") as f:
            data = f.read()
        sm = saved_model_pb2.SavedModel()
        sm.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - any failure means "not a loadable model"
        raise ServingError(Code.DATA_LOSS, f"cannot parse {path}: {e}") from None
    if not sm.meta_graphs:
        raise ServingError(Code.DATA_LOSS, f"{path} has no meta graph")
    return sm


class Servable:
    """A loaded version of a model. Immutable once built; safe to share across threads."""

    load_seconds: float  # set by load_servable once loaded and warmed up

    def __init__(self, model_name: str, version: int, export_dir: str, signature_defs, loaded,
                 signatures: dict[str, Signature] | None = None, kind: str = "saved_model"):
        """`loaded` keeps what the signatures run in alive (a restored object, a
        Session, an interpreter pool); `signatures` defaults to those of a restored
        object (`loaded.signatures`); `kind` names the loader that built them."""
        self.model_name = model_name
        self.version = version
        self.export_dir = export_dir
        self.signature_defs = signature_defs  # tensorflow SignatureDef map (for metadata)
        self._loaded = loaded
        self.kind = kind
        if signatures is None:
            signatures = {}
            for name, sd in signature_defs.items():
                if name not in loaded.signatures:
                    continue
                signatures[name] = Signature(
                    name=name,
                    method_name=sd.method_name,
                    inputs={k: spec_of(k, v) for k, v in sd.inputs.items()},
                    outputs={k: spec_of(k, v) for k, v in sd.outputs.items()},
                    fn=loaded.signatures[name],
                    defaults={k: to_ndarray(v) for k, v in sd.defaults.items()},
                )
        self.signatures: dict[str, Signature] = signatures

    def signature(self, name: str | None) -> Signature:
        name = name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
        sig = self.signatures.get(name)
        if sig is None:
            raise invalid(f"Serving signature name: \"{name}\" not found in signature def. "
                          f"Available: {sorted(self.signatures)}")
        return sig

    def signature_def_map(self):
        """A tensorflow.serving.SignatureDefMap for GetModelMetadata."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        m = get_model_metadata_pb2.SignatureDefMap()
        for k, v in self.signature_defs.items():
            m.signature_def[k].CopyFrom(v)
        return m

    def warmup(self, iterations: int = WARMUP_ITERATIONS) -> int:
        """Replays assets.extra/tf_serving_warmup_requests; returns the records replayed.

        Warmup runs before the version becomes visible, so the first real request does
        not pay for graph tracing; any failure fails the load (as in TF Serving).
        """
        path = os.path.join(self.export_dir, WARMUP_FILE)
        if not os.path.exists(path):
            return 0
        import tensorflow as tf
        from tensorflow_serving.apis import prediction_log_pb2

        n = 0
        for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
            log = prediction_log_pb2.PredictionLog.FromString(raw)
            kind = log.WhichOneof("log_type")
            if kind == "predict_log":
                req = log.predict_log.request
                sig = self.signature(req.model_spec.signature_name)
                feeds = {k: to_ndarray(v) for k, v in req.inputs.items()}
            elif kind in ("classify_log", "regress_log"):
                req = getattr(log, kind).request
                sig = self.signature(req.model_spec.signature_name)
                name = next(iter(sig.inputs))
                feeds = {name: examples_from_input_proto(req.input)}
            else:
                raise ServingError(Code.INVALID_ARGUMENT,
                                   f"unsupported warmup log type {kind!r} in {path}")
            for _ in range(iterations):
                sig(feeds)
            n += 1
        return n


def meta_graph_for(sm, tags: tuple[str, ...], export_dir: str):
    """The MetaGraphDef whose tag set is `tags` (`--saved_model_tags`), as TF Serving's
    LoadSavedModel picks it; DATA_LOSS naming the tag sets there are, if none."""
    for mg in sm.meta_graphs:
        if set(mg.meta_info_def.tags) == set(tags):
            return mg
    found = [sorted(mg.meta_info_def.tags) for mg in sm.meta_graphs]
    raise ServingError(Code.DATA_LOSS, f"Could not find meta graph def matching supplied tags: "
                                       f"{{ {' '.join(sorted(tags))} }} in {export_dir}. "
                                       f"Tag sets in the SavedModel: {found}")
