"""Loading one version directory: which runtime serves it, then warmup.

Three ways, tried in TF Serving's order of preference:

1. `--prefer_tflite_model` and a `model.tflite` in the directory: LiteRT
   (tflite_servable.py), as TF Serving's TfLiteSession.
2. `tf.saved_model.load`: TF2 SavedModels, and the TF1 ones it can restore; their
   signatures are called as restored functions (servable.py's fast call).
3. Where that fails, TF Serving's own way, which every TF1 and Estimator export was
   written for: a Session over the MetaGraph, signatures run by tensor names
   (session_servable.py). Upstream's `saved_model_half_plus_three` and
   `saved_model_counter` load only this way.

Ops outside TensorFlow (TF Text's, SentencePiece's) are registered first from the
installed packages that provide them (custom_ops.py).

A version that none of them loads fails with both reasons, so the manager keeps the
previous version serving and logs why.
"""

from __future__ import annotations

import logging
import time

from baton.serving.conventions import SERVING
from baton.serving.servable import (
    WARMUP_ITERATIONS,
    Servable,
    meta_graph_for,
    read_saved_model_proto,
)
from baton.serving.status import Code, ServingError

log = logging.getLogger(__name__)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)


def _load_saved_model(model_name: str, version: int, export_dir: str,
                      tags: tuple[str, ...]) -> Servable:
    import tensorflow as tf

    from baton.serving.custom_ops import ensure_ops
    from baton.serving.session_servable import load_session_signatures

    sm = read_saved_model_proto(export_dir)
    meta_graph = meta_graph_for(sm, tags, export_dir)
    ensure_ops(meta_graph, export_dir)
    sig_defs = dict(meta_graph.signature_def)
    try:
        loaded = tf.saved_model.load(export_dir, tags=list(tags))
    except Exception as e:  # noqa: BLE001 - TF raises many types for a model it cannot restore
        tf2_error = _first_line(e)
    else:
        return Servable(model_name, version, export_dir, sig_defs, loaded)
    try:
        session, sigs = load_session_signatures(export_dir, tags, sig_defs)
    except Exception as e:  # noqa: BLE001
        raise ServingError(Code.DATA_LOSS, f"failed to load {export_dir}: {tf2_error} (as a "
                                           f"TF1 Session: {_first_line(e)})") from None
    log.info("Loaded %s in a TF1 Session (tf.saved_model.load: %s)", export_dir, tf2_error)
    return Servable(model_name, version, export_dir, sig_defs, session, sigs, kind="session")


def _load_tflite(model_name: str, version: int, export_dir: str, path: str,
                 pools: int) -> Servable:
    from baton.serving.tflite_servable import load_tflite

    pool, sig_defs, sigs = load_tflite(path, pools)
    return Servable(model_name, version, export_dir, sig_defs, pool, sigs, kind="tflite")


def load_servable(model_name: str, version: int, export_dir: str, warmup: bool = True,
                  tags: tuple[str, ...] = (SERVING,), warmup_iterations: int = 0,
                  prefer_tflite: bool = False, tflite_pools: int = 1) -> Servable:
    """Loads (and warms up) one version; raises ServingError on any failure.

    `tags` is `--saved_model_tags` (the meta graph to load); `warmup_iterations` is
    `--num_request_iterations_for_warmup` (each warmup record replayed that many times;
    0: the default, once); `prefer_tflite` is `--prefer_tflite_model` and
    `tflite_pools` `--num_tflite_pools` (interpreters of a TFLite model).
    """
    t0 = time.monotonic()
    path = None
    if prefer_tflite:
        from baton.serving.tflite_servable import tflite_path

        path = tflite_path(export_dir)
    if path is not None:
        servable = _load_tflite(model_name, version, export_dir, path, tflite_pools)
    else:
        servable = _load_saved_model(model_name, version, export_dir, tags)
    if warmup:
        try:
            servable.warmup(warmup_iterations or WARMUP_ITERATIONS)
        except ServingError as e:
            raise ServingError(e.code, f"warmup of {export_dir} failed: {e.message}") from None
        except Exception as e:  # noqa: BLE001
            raise ServingError(Code.INVALID_ARGUMENT,
                               f"warmup of {export_dir} failed: {e}") from None
    servable.load_seconds = time.monotonic() - t0
    return servable
