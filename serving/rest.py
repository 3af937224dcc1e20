"""TF Serving's REST API routes on top of the lean HTTP server.

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   signature metadata
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict|:classify|:regress
    ANY  <monitoring path>                                       Prometheus metrics

Routing is TF Serving's (model_servers/http_rest_api_util.cc, http_rest_api_handler.cc):
the same case-insensitive, whole-path regexes, matched on the raw path with the model
name and label percent-decoded afterwards. A `/v1/...` path that does not match for its
method (a GET on `:predict`, a PUT, a trailing slash, a verb in capitals) is 400
`{"error": "Malformed request: METHOD PATH"}`; paths outside `/v1/` are 404, as
TF Serving's HTTP server answers them. Every error is `{"error": "..."}` with TF
Serving's status-to-HTTP mapping; unknown models and versions are 404 NOT_FOUND.
"""

from __future__ import annotations

import json
import re
import time
from asyncio import get_running_loop
from urllib.parse import unquote

from baton.serving import examples as ex
from baton.serving.conventions import CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME
from baton.serving.http import HttpProtocol, error_body
from baton.serving.json_write import classify_json, predict_json, regress_json
from baton.serving.rest_json import loads, parse_predict, request_signature_name
from baton.serving.service import ModelService
from baton.serving.status import Code, ServingError, invalid

_V1 = re.compile(r"(?ai)/v1/.*")  # kHTTPRestApiHandlerPathRegex
_PREDICTION = re.compile(  # kPredictionApiGegex (sic)
    r"(?ai)/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
    r":(classify|regress|predict)")
_MODEL_STATUS = re.compile(  # kModelStatusApiRegex
    r"(?ai)/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
    r"(?:/(metadata))?")
_INT64_MAX = 2 ** 63 - 1
_VERBS = ("predict", "classify", "regress")


def parse_route(method: str, path: str) -> tuple[str, int | None, str | None, str] | None:
    """(model, version, label, what) for a /v1/ request, None if malformed; raises 400.

    `what` is "predict", "classify", "regress", "metadata" or "status". As in TF
    Serving, only the lower-case verbs dispatch (the regexes ignore case, the dispatch
    does not), and a GET whose subresource is not exactly "metadata" is a status request.
    """
    if method == "POST":
        m = _PREDICTION.fullmatch(path)
        if m is None or m.group(4) not in _VERBS:
            return None
        name, version, label, what = m.groups()
    elif method == "GET":
        m = _MODEL_STATUS.fullmatch(path)
        if m is None:
            return None
        name, version, label, sub = m.groups()
        what = "metadata" if sub == "metadata" else "status"
    else:
        return None
    v = None
    if version is not None:
        v = int(version)
        if v > _INT64_MAX:
            raise invalid(f"Failed to convert version: {version} to numeric.")
    if not name:
        raise invalid("Missing model name in request.")
    return unquote(name), v, (unquote(label) if label is not None else None), what


def status_json(manager, name, version, label) -> dict:
    out = []
    for rec in manager.status(name, version, label):
        err = rec.error
        out.append({
            "version": str(rec.version),
            "state": rec.state,
            "status": {"error_code": "OK" if err is None else err.code.name,
                       "error_message": "" if err is None else err.message},
        })
    return {"model_version_status": out}


def metadata_json(manager, name, version, label) -> dict:
    """GetModelMetadataResponse as TF Serving's REST handler prints it (ToJsonString):
    proto field names, and every field without presence printed even when empty
    (`"defaults": {}`, `"name": ""`, `"dim": []`, `"unknown_rank": false`)."""
    from google.protobuf import json_format

    s = manager.resolve(name, version, label)
    sigs = json_format.MessageToDict(s.signature_def_map(), preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
    return {"model_spec": {"name": name, "signature_name": "", "version": str(s.version)},
            "metadata": {"signature_def": sigs}}


class RestApi:
    """The HTTP handler: `RestApi(service, metrics_path)(conn, method, target, body)`."""

    def __init__(self, service: ModelService, metrics_path: str | None,
                 timeout_s: float = 0.0):
        self.service = service
        self.manager = service.manager
        self.metrics_path = metrics_path
        self.timeout_s = timeout_s  # --rest_api_timeout_in_ms, for the batcher
        self._routes: dict[tuple[str, str], tuple | None] = {}  # parsed once per path

    def __call__(self, conn: HttpProtocol, method: str, target: str, body: bytes) -> None:
        t0 = time.perf_counter()
        path = target.split("?", 1)[0]
        if self.metrics_path is not None and path == self.metrics_path:
            # TF Serving registers a plain handler on the path: any method gets the page.
            conn.respond(200, self.service.metrics.render(),
                         b"text/plain; version=0.0.4; charset=utf-8")
            return
        key = (method, path)
        try:
            route = self._routes[key]
        except KeyError:
            if not _V1.fullmatch(path):
                conn.respond(404, error_body("Not Found"))
                return
            try:
                route = parse_route(method, path)
            except ServingError as e:
                conn.respond(e.http_status, error_body(e.message))
                return
            if len(self._routes) < 1024:  # bounded: paths are client input
                self._routes[key] = route
        if route is None:
            conn.respond(400, error_body(f"Malformed request: {method} {path}"))
            return
        name, version, label, what = route
        try:
            if what == "status":
                payload = status_json(self.manager, name, version, label)
            elif what == "metadata":
                payload = metadata_json(self.manager, name, version, label)
            else:
                self._infer(conn, what, name, version, label, body, t0)
                return
        except ServingError as e:
            if what in _VERBS:
                self.service.record(name, what, "REST", e, t0)
            conn.respond(e.http_status, error_body(e.message))
            return
        conn.respond(200, json.dumps(payload).encode())

    def _infer(self, conn, verb, name, version, label, body, t0):
        """Predict/Classify/Regress in TF Serving's order: the body is parsed and its
        signature_name checked, then (predict) the model and signature resolved and the
        tensors converted, or (classify/regress) the examples converted and then the model
        and signature resolved; the answer is written when the batch completes."""
        req = loads(body)
        sig_name = request_signature_name(req)
        key = None
        if verb == "predict":
            servable = self.manager.resolve(name, version, label)
            sig = servable.signature(sig_name)
            feeds, row, key = parse_predict(req, sig)
        else:
            examples = ex.examples_from_json(req)
            servable = self.manager.resolve(name, version, label)
            sig = ex.signature_for(servable, sig_name, CLASSIFY_METHOD_NAME
                                   if verb == "classify" else REGRESS_METHOD_NAME,
                                   self.service.method_name_check)
            self.service.metrics.examples(self.service.known(name), len(examples))
            feeds = {next(iter(sig.inputs)): examples}
        seq = conn.seq

        def done(out, err):
            # Runs on the loop for every completed task: whatever goes wrong writing the
            # answer, the client gets one (an exception here would leave it waiting).
            if err is None:
                try:
                    if verb == "predict":
                        data = predict_json(out, row)
                    elif verb == "classify":  # kClassifyRegressResponseKey is "results"
                        data = classify_json(ex.classification_rows(sig, out))
                    else:
                        data = regress_json(ex.regression_values(sig, out))
                except ServingError as e:
                    err = e
                except Exception as e:  # noqa: BLE001
                    err = ServingError(Code.INTERNAL, f"Failed to write the response: {e}")
            self.service.record(name, verb, "REST", err, t0)
            if err is not None:
                conn.respond(err.http_status, error_body(err.message), seq=seq)
            else:
                conn.respond(200, data, seq=seq)

        conn.task = self.service.submit(servable, sig, feeds, done, get_running_loop(), verb,
                                        self.timeout_s, key)
