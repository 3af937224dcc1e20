"""TF Serving's gRPC API (PredictionService, ModelService) on grpc.aio.

Uses the official generated servicers from tensorflow-serving-api, so any TF Serving
client stub works unchanged. Handlers run on the same asyncio loop as the REST server
and await batch completions, so thousands of concurrent calls need no thread each.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from baton.serving import examples as ex
from baton.serving.config import ConfigError, model_configs_from_proto
from baton.serving.conventions import (
    CLASSIFY_METHOD_NAME,
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    REGRESS_METHOD_NAME,
)
from baton.serving.profiler import add_profiler_service
from baton.serving.service import ModelService, check_feeds
from baton.serving.status import Code, ServingError, invalid
from baton.serving.tensor_proto import from_ndarray, to_ndarray

_GRPC_CODE = {c.value[0]: c for c in grpc.StatusCode}
log = logging.getLogger(__name__)


def _spec_args(spec) -> tuple[str, int | None, str | None]:
    if not spec.name:
        raise invalid("Missing ModelSpec name")
    choice = spec.WhichOneof("version_choice")
    if choice == "version":
        return spec.name, spec.version.value, None
    if choice == "version_label":
        return spec.name, None, spec.version_label
    return spec.name, None, None


async def _abort(context, err: ServingError):
    await context.abort(_GRPC_CODE.get(int(err.code), grpc.StatusCode.UNKNOWN), err.message)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, service: ModelService):
        self.service = service
        self.manager = service.manager

    async def _call(self, api, request, context, body):
        """Runs `body`; `api` ("Predict", ...) is recorded as TF Serving does, None: not."""
        t0 = time.perf_counter()
        name = request.model_spec.name
        try:
            resp = await body()
        except ServingError as e:
            self._record(name, api, e, t0)
            await _abort(context, e)
        except Exception as e:  # noqa: BLE001 - surface as INTERNAL, never crash the server
            err = ServingError(Code.INTERNAL, str(e))
            self._record(name, api, err, t0)
            await _abort(context, err)
        self._record(name, api, None, t0)
        return resp

    def _record(self, name, api, err, t0):
        if api is not None:
            self.service.record(name, api, "GRPC", err, t0)

    async def Predict(self, request, context):
        async def body():
            servable = self.manager.resolve(*_spec_args(request.model_spec))
            sig = _predict_signature(servable, request.model_spec.signature_name)
            feeds = check_feeds(sig, {k: to_ndarray(v) for k, v in request.inputs.items()})
            wanted = _output_filter(sig, request.output_filter)
            out = await self.service.run(servable, sig, feeds, "Predict")
            resp = predict_pb2.PredictResponse()
            resp.model_spec.name = servable.model_name
            resp.model_spec.version.value = servable.version
            resp.model_spec.signature_name = sig.name
            content = self.service.tensor_content
            for k in wanted or out:
                from_ndarray(out[k], resp.outputs[k], content)
            return resp

        return await self._call("Predict", request, context, body)

    async def Classify(self, request, context):
        async def body():
            servable = self.manager.resolve(*_spec_args(request.model_spec))
            sig = ex.signature_for(servable, request.model_spec.signature_name,
                                   CLASSIFY_METHOD_NAME, self.service.method_name_check)
            examples = ex.examples_from_input_proto(request.input)
            self.service.metrics.examples(self.service.known(servable.model_name),
                                          len(examples))
            out = await self.service.run(servable, sig, {next(iter(sig.inputs)): examples},
                                         "Classify")
            resp = classification_pb2.ClassificationResponse()
            resp.model_spec.name = servable.model_name
            resp.model_spec.version.value = servable.version
            resp.model_spec.signature_name = sig.name
            for row in ex.classification_rows(sig, out):
                c = resp.result.classifications.add()
                for label, score in row:
                    c.classes.add(label=label, score=score)
            return resp

        return await self._call("Classify", request, context, body)

    async def Regress(self, request, context):
        async def body():
            servable = self.manager.resolve(*_spec_args(request.model_spec))
            sig = ex.signature_for(servable, request.model_spec.signature_name,
                                   REGRESS_METHOD_NAME, self.service.method_name_check)
            examples = ex.examples_from_input_proto(request.input)
            self.service.metrics.examples(self.service.known(servable.model_name),
                                          len(examples))
            out = await self.service.run(servable, sig, {next(iter(sig.inputs)): examples},
                                         "Regress")
            resp = regression_pb2.RegressionResponse()
            resp.model_spec.name = servable.model_name
            resp.model_spec.version.value = servable.version
            resp.model_spec.signature_name = sig.name
            for v in ex.regression_values(sig, out):
                resp.result.regressions.add(value=v)
            return resp

        return await self._call("Regress", request, context, body)

    async def MultiInference(self, request, context):
        async def body():
            servable, plan = _multi_inference_plan(self.manager, request,
                                                   self.service.method_name_check)
            examples = ex.examples_from_input_proto(request.input)
            self.service.metrics.examples(self.service.known(servable.model_name),
                                          len(examples))
            # one call per signature on the same examples (TF Serving: one Session::Run
            # fetching every task's outputs; the results are the same)
            outs = await asyncio.gather(*(
                self.service.run(servable, sig, {next(iter(sig.inputs)): examples})
                for _, sig in plan))
            resp = inference_pb2.MultiInferenceResponse()
            for (task, sig), out in zip(plan, outs, strict=True):
                r = resp.results.add()
                r.model_spec.name = task.model_spec.name
                r.model_spec.signature_name = sig.name
                r.model_spec.version.value = servable.version
                if task.method_name == CLASSIFY_METHOD_NAME:
                    for row in ex.classification_rows(sig, out):
                        c = r.classification_result.classifications.add()
                        for label, score in row:
                            c.classes.add(label=label, score=score)
                else:
                    for v in ex.regression_values(sig, out):
                        r.regression_result.regressions.add(value=v)
            return resp

        first = request.tasks[0] if request.tasks else inference_pb2.InferenceTask()
        return await self._call(None, first, context, body)  # not counted by TF Serving

    async def GetModelMetadata(self, request, context):
        async def body():
            fields = list(request.metadata_field)
            if not fields:  # get_model_metadata_impl.cc's checks and messages
                raise invalid("GetModelMetadataRequest must specify at least one "
                              "metadata_field")
            for f in fields:
                if f != "signature_def":
                    raise invalid(f"Metadata field {f} is not supported")
            servable = self.manager.resolve(*_spec_args(request.model_spec))
            resp = get_model_metadata_pb2.GetModelMetadataResponse()
            resp.model_spec.name = servable.model_name
            resp.model_spec.version.value = servable.version
            resp.metadata["signature_def"].Pack(servable.signature_def_map())
            return resp

        return await self._call(None, request, context, body)  # not counted by TF Serving


def _predict_signature(servable, name: str):
    """predict_util.cc's lookup: an unknown signature is FAILED_PRECONDITION on gRPC."""
    key = name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
    sig = servable.signatures.get(key)
    if sig is None:
        raise ServingError(Code.FAILED_PRECONDITION,
                           f"Serving signature key \"{key}\" not found.")
    return sig


def _output_filter(sig, output_filter) -> list[str]:
    wanted = list(output_filter)
    for k in wanted:
        if k not in sig.outputs:
            raise invalid(f"output tensor alias not found in signature: {k} Outputs "
                          f"expected to be in the set {{{','.join(sorted(sig.outputs))}}}.")
    if len(set(wanted)) != len(wanted):
        dup = next(k for k in wanted if wanted.count(k) > 1)
        raise invalid(f"duplicate output tensor alias: {dup}")
    return wanted


def _multi_inference_plan(manager, request, check_method_name: bool):
    """The servable and [(task, signature)] of a MultiInferenceRequest, checked as TF
    Serving's TensorFlowMultiInferenceRunner::Infer checks it (same messages)."""
    tasks = list(request.tasks)
    if not tasks:
        raise invalid("Missing ModelSpec name")
    name = tasks[0].model_spec.name
    for t in tasks:
        if not t.model_spec.name:
            raise invalid("Found ModelSpec with an empty model name.")
        if t.model_spec.name != name:
            raise invalid("All ModelSpecs in a MultiInferenceRequest must access the same "
                          "model name.")
    servable = manager.resolve(*_spec_args(tasks[0].model_spec))
    plan, seen = [], set()
    for t in tasks:
        key = t.model_spec.signature_name or DEFAULT_SERVING_SIGNATURE_DEF_KEY
        if key in seen:
            raise invalid(f"Duplicate evaluation of signature: {key}")
        seen.add(key)
        sig = servable.signatures.get(key)
        if sig is None:
            raise invalid(f"Requested signature not found in model graph: {key}")
        if t.method_name not in (CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME):
            raise ServingError(Code.UNIMPLEMENTED,
                               f"Unsupported signature method_name: {t.method_name}")
        plan.append((t, ex.check_signature(sig, t.method_name, check_method_name)))
    return servable, plan


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, service: ModelService):
        self.manager = service.manager

    async def GetModelStatus(self, request, context):
        try:
            recs = self.manager.status(*_spec_args(request.model_spec))
        except ServingError as e:
            await _abort(context, e)
        resp = get_model_status_pb2.GetModelStatusResponse()
        for rec in recs:
            s = resp.model_version_status.add()
            s.version = rec.version
            s.state = get_model_status_pb2.ModelVersionStatus.State.Value(rec.state)
            if rec.error is not None:
                s.status.error_code = int(rec.error.code)
                s.status.error_message = rec.error.message
        return resp

    async def HandleReloadConfigRequest(self, request, context):
        """As model_service_impl.cc: the status goes in the response *and* is the RPC's."""
        resp = model_management_pb2.ReloadConfigResponse()
        err = None
        try:
            configs = model_configs_from_proto(request.config)
            await asyncio.to_thread(self.manager.reload_config, configs)
        except ConfigError as e:
            err = ServingError(Code.INVALID_ARGUMENT, str(e))
        except ServingError as e:
            err = e
        if err is not None:
            log.error("ReloadConfig failed: %s", err.message)
            resp.status.error_code = int(err.code)
            resp.status.error_message = err.message
            context.set_code(_GRPC_CODE.get(int(err.code), grpc.StatusCode.UNKNOWN))
            context.set_details(err.message)
        return resp


def add_services(server, service: ModelService) -> None:
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(service), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(service), server)
    if service.profiler:
        add_profiler_service(server)
