"""The API-independent operations behind both REST and gRPC.

Resolving a model, checking inputs against its signature and submitting a batching
task happen here once, so the two front ends cannot drift apart in behaviour: the same
request gets the same answer and the same status code on either.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from baton.serving.batcher import BatchScheduler, Task
from baton.serving.conventions import examples_hint
from baton.serving.manager import ModelManager
from baton.serving.metrics import Metrics
from baton.serving.servable import Servable, Signature
from baton.serving.status import ServingError, invalid


class ModelService:
    """Shared by the REST and gRPC front ends of one server."""

    def __init__(self, manager: ModelManager, scheduler: BatchScheduler, metrics: Metrics,
                 method_name_check: bool = False, tensor_content: bool = False,
                 profiler: bool = True):
        self.manager = manager
        self.scheduler = scheduler
        self.metrics = metrics
        # --enable_signature_method_name_check: Classify/Regress/MultiInference accept
        # only signatures of their method_name (TF Serving's default: not checked)
        self.method_name_check = method_name_check
        # --enable_serialization_as_tensor_content: Predict outputs as tensor_content
        self.tensor_content = tensor_content
        # --enable_profiler: tensorflow.ProfilerService on the gRPC port (profiler.py);
        # false leaves the service out, as TF Serving does
        self.profiler = profiler

    def submit(self, servable: Servable, sig: Signature, feeds: dict[str, np.ndarray],
               done, loop, api: str = "", timeout: float = 0.0, key: tuple | None = None
               ) -> Task:
        """Queues one signature call; `done(outputs, error)` runs on `loop`.

        `api` labels the runtime latency metric; `timeout` (seconds, 0: none) is
        `--rest_api_timeout_in_ms` for REST requests (see batcher); `key`, when the
        caller knows it, is the feeds' batching key (see batcher.Task).
        """
        task = Task(sig, feeds, done, loop, servable.model_name, api, timeout, key)
        self.scheduler.submit(task)
        return task

    async def run(self, servable: Servable, sig: Signature, feeds: dict[str, np.ndarray],
                  api: str = "") -> dict[str, np.ndarray]:
        """Awaitable form of `submit` (gRPC)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def done(out, err):
            if not fut.done():
                if err is not None:
                    fut.set_exception(err)
                else:
                    fut.set_result(out)

        self.submit(servable, sig, feeds, done, loop, api)
        return await fut

    def known(self, name: str) -> str:
        """The model_name label: unknown names are one series, not one per client typo."""
        return name if name in self.manager._models else "<unknown>"

    def record(self, model: str, api: str, entrypoint: str, error: ServingError | None,
               t0: float) -> None:
        """One Predict/Classify/Regress request: request_count and request_latency."""
        status = "OK" if error is None else error.code.name
        self.metrics.request(self.known(model), api, entrypoint, status,
                             time.perf_counter() - t0)


def check_feeds(sig: Signature, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validates proto-decoded inputs (gRPC) against the signature by name, casting dtypes.

    As TF Serving's predict_util (VerifyRequestInputsSize): inputs are checked by name
    only, an input with a default in the SignatureDef may be left out (the signature fills
    it in); shapes are TensorFlow's to check when the signature runs (a TF1 graph fed `x`
    of shape [1] where it declares [-1, 1] computes, as under TF Serving's Session::Run).
    """
    if feeds.keys() != sig.inputs.keys() and not (
            feeds.keys() <= sig.inputs.keys() and sig.inputs.keys() - feeds.keys() <= sig.defaults.keys()):
        sent, want = sorted(feeds), sorted(sig.inputs)
        extra = sorted(feeds.keys() - sig.inputs.keys())
        missing = sorted(sig.inputs.keys() - feeds.keys() - sig.defaults.keys())
        raise invalid(f"input size does not match signature: {len(sent)}!={len(want)} "
                      f"len({{{','.join(sent)}}}) != len({{{','.join(want)}}}). "
                      f"Sent extra: {{{','.join(extra)}}}. "
                      f"Missing but required: {{{','.join(missing)}}}.{examples_hint(extra)}")
    out = {}
    for k, arr in feeds.items():
        spec = sig.inputs[k]
        if spec.is_string != (arr.dtype == object):
            raise invalid(f"input {k!r}: expects {spec.tf_dtype}. Received dtype {arr.dtype}")
        if arr.dtype != spec.dtype and not spec.is_string:
            if not np.can_cast(arr.dtype, spec.dtype, casting="same_kind"):
                raise invalid(f"input {k!r}: expects {spec.tf_dtype}. "
                              f"Received dtype {arr.dtype}")
            arr = arr.astype(spec.dtype)
        out[k] = arr
    return out
