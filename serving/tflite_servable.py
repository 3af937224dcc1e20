"""`--prefer_tflite_model`: a version's `model.tflite` served through LiteRT (ai-edge-litert).

TF Serving's SavedModel loader, with `prefer_tflite_model`, loads `<version>/model.tflite`
when the file is there (saved_model_bundle_factory.cc) and runs it in a TfLiteSession
(servables/tensorflow/tflite_session.cc). This module does the same with LiteRT's Python
interpreter, the package TensorFlow's deprecated `tf.lite.Interpreter` moved to:

- signatures: the SignatureDefs the TFLite converter stored in the model's
  `signature_defs_metadata` (a flexbuffer map of name -> serialized SignatureDef), their
  tensor names matched to the interpreter's with TF Serving's fallback (a name's `:0`
  suffix dropped, as early converters did); without that metadata, one
  `serving_default` (predict) signature whose inputs and outputs are the model's
  tensors, keyed by their names without `:0` (TfLiteSession::Create);
- a call: each input tensor resized to the shape fed (ResizeInputTensor), tensors
  allocated, inputs set, Invoke, outputs copied out (TfLiteSession::RunInternal);
- `--num_tflite_pools` interpreters, each used by one call at a time: the batcher's
  worker threads take one from the pool (TF Serving's interpreter pool).

Not served: custom ops TF Serving links in (its ParseExample kernel for
`parse_example_tflite`): LiteRT's Python package does not ship them, and the load fails
naming the op.
"""

from __future__ import annotations

import os
import queue

import numpy as np

from baton.serving.conventions import DEFAULT_SERVING_SIGNATURE_DEF_KEY, PREDICT_METHOD_NAME
from baton.serving.servable import Signature, run_errors, spec_of
from baton.serving.status import Code, ServingError

TFLITE_FILE = "model.tflite"
_SIGNATURE_METADATA = "signature_defs_metadata"


def tflite_path(export_dir: str) -> str | None:
    """`<export_dir>/model.tflite` when it exists (what prefer_tflite_model looks for)."""
    p = os.path.join(export_dir, TFLITE_FILE)
    return p if os.path.isfile(p) else None


def _legacy(name: str) -> str:
    """TfToTfLiteLegacyTensorName: "x:0" -> "x"."""
    return name.split(":", 1)[0]


def _stored_signature_defs(buf: bytes) -> dict:
    """The SignatureDefs in the model's `signature_defs_metadata`, or {} if none."""
    from ai_edge_litert import schema_py_generated as schema
    from flatbuffers import flexbuffers
    from tensorflow.core.protobuf import meta_graph_pb2

    model = schema.Model.GetRootAsModel(buf, 0)
    for i in range(model.MetadataLength()):
        md = model.Metadata(i)
        if (md.Name() or b"").decode() != _SIGNATURE_METADATA:
            continue
        data = model.Buffers(md.Buffer()).DataAsNumpy()
        if not isinstance(data, np.ndarray) or not data.size:
            return {}
        entries = flexbuffers.GetRoot(data.tobytes()).AsMap
        out = {}
        for key, value in zip(entries.Keys, entries.Values, strict=True):
            sd = meta_graph_pb2.SignatureDef()
            sd.ParseFromString(bytes(value.AsStringBytes if value.IsString else value.AsBlob))
            out[key.AsKey] = sd
        return out
    return {}


def _tensor_info(detail):
    from tensorflow import as_dtype
    from tensorflow.core.protobuf import meta_graph_pb2

    info = meta_graph_pb2.TensorInfo(name=detail["name"])
    kind = detail["dtype"]
    info.dtype = as_dtype("string" if kind in (np.bytes_, np.str_, object)
                          else np.dtype(kind)).as_datatype_enum
    for d in detail["shape"]:
        info.tensor_shape.dim.add(size=int(d))
    return info


def tflite_signature_defs(interpreter, buf: bytes) -> dict:
    """TfLiteSession::Create's SignatureDefs: stored ones (names fixed), else a mock."""
    inputs = {d["name"]: d for d in interpreter.get_input_details()}
    outputs = {d["name"]: d for d in interpreter.get_output_details()}
    stored = _stored_signature_defs(buf)
    if not stored:
        from tensorflow.core.protobuf import meta_graph_pb2

        sd = meta_graph_pb2.SignatureDef(method_name=PREDICT_METHOD_NAME)
        for name, d in inputs.items():
            sd.inputs[_legacy(name)].CopyFrom(_tensor_info(d))
        for name, d in outputs.items():
            sd.outputs[_legacy(name)].CopyFrom(_tensor_info(d))
        return {DEFAULT_SERVING_SIGNATURE_DEF_KEY: sd}
    for sd in stored.values():
        for kind, known in (("input", inputs), ("output", outputs)):
            for key, info in getattr(sd, kind + "s").items():
                if info.name not in known:
                    if _legacy(info.name) not in known:
                        raise ServingError(Code.INTERNAL, f"Signature {kind} {key} references "
                                                          f"an unknown tensor: Unknown tensor "
                                                          f"'{info.name}'.")
                    info.name = _legacy(info.name)
    return stored


class InterpreterPool:
    """`size` interpreters of one model; a call holds one for its duration."""

    def __init__(self, buf: bytes, size: int, threads: int):
        from ai_edge_litert.interpreter import Interpreter

        self._free: queue.SimpleQueue = queue.SimpleQueue()
        interpreters = [Interpreter(model_content=buf, num_threads=threads or None)
                        for _ in range(max(1, size))]
        self.first = interpreters[0]  # for the tensor names and shapes
        for it in interpreters:
            it.allocate_tensors()  # fails here, naming the op, for an unresolved custom op
            # each interpreter with the input shapes it is allocated for
            shapes = {d["index"]: tuple(d["shape"]) for d in it.get_input_details()}
            self._free.put((it, shapes))

    def run(self, feeds: dict[int, np.ndarray], fetches: list[int]) -> list[np.ndarray]:
        it, shapes = item = self._free.get()
        try:
            resized = False
            for index, arr in feeds.items():
                if shapes.get(index) != arr.shape:
                    it.resize_tensor_input(index, list(arr.shape), strict=False)
                    shapes[index] = arr.shape
                    resized = True
            if resized:
                it.allocate_tensors()
            for index, arr in feeds.items():
                it.set_tensor(index, arr)
            it.invoke()
            return [it.get_tensor(i) for i in fetches]
        except BaseException:
            shapes.clear()  # a failed resize or allocation: reallocate next time
            raise
        finally:
            self._free.put(item)


class _Runner:
    """One signature: signature keys -> interpreter tensor indices, and back."""

    def __init__(self, pool: InterpreterPool, sd):
        it = pool.first
        by_name = {d["name"]: d["index"] for d in it.get_input_details()}
        by_name.update({d["name"]: d["index"] for d in it.get_output_details()})
        self.pool = pool
        self.inputs = {k: by_name[v.name] for k, v in sd.inputs.items()}
        self.output_keys = sorted(sd.outputs)
        self.fetches = [by_name[sd.outputs[k].name] for k in self.output_keys]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if feeds.keys() != self.inputs.keys():
            raise ValueError(f"Missing input TFLite tensor: expected inputs "
                             f"{sorted(self.inputs)}. Received: {sorted(feeds)}")
        args = {}
        for k, a in feeds.items():
            if a.dtype == object:  # TF strings: LiteRT takes numpy bytes
                a = np.array(a.tolist(), dtype=np.bytes_).reshape(a.shape)
            args[self.inputs[k]] = a
        values = self.pool.run(args, self.fetches)
        return {k: (v.astype(object) if v.dtype.kind == "S" else v)
                for k, v in zip(self.output_keys, values, strict=True)}


class TfLiteSignature(Signature):
    """A signature run by a pooled LiteRT interpreter (TFLite models hold no state that a
    call updates: variables are frozen at conversion)."""

    def __post_init__(self) -> None:
        self._fast = None
        self.stateful = False

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with run_errors():
            try:
                return self.fn(feeds)
            except RuntimeError as e:  # LiteRT's error for a failed Invoke/resize
                raise ValueError(str(e)) from None


def load_tflite(path: str, pools: int = 1, threads: int = 0):
    """(pool, signature defs, signatures) of the model.tflite at `path`."""
    with open(path, "rb") as f:
        buf = f.read()
    try:
        pool = InterpreterPool(buf, pools, threads)
    except (RuntimeError, ValueError) as e:
        raise ServingError(Code.INVALID_ARGUMENT,
                           f"Cannot build Interpreter from {path}: {e}") from None
    sig_defs = tflite_signature_defs(pool.first, buf)
    sigs: dict[str, Signature] = {}
    for name, sd in sig_defs.items():
        sigs[name] = TfLiteSignature(
            name=name, method_name=sd.method_name,
            inputs={k: spec_of(k, v) for k, v in sd.inputs.items()},
            outputs={k: spec_of(k, v) for k, v in sd.outputs.items()},
            fn=_Runner(pool, sd))
    return pool, sig_defs, sigs
