"""TF Serving's REST API routes on top of the lean HTTP server.

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   signature metadata
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict|:classify|:regress
    GET  <monitoring path>                                       Prometheus metrics

Every error is `{"error": "..."}` with TF Serving's status-to-HTTP mapping.
"""

from __future__ import annotations

import json
import re
import time
from urllib.parse import unquote

from serving import examples as ex
from serving.http import HttpProtocol, error_body
from serving.rest_json import dumps, feeds_from_json, loads, predict_response
from serving.servable import CLASSIFY, REGRESS
from serving.service import ModelService
from serving.status import ServingError, invalid

_ROUTE = re.compile(
    r"^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?"
    r"(?::(predict|classify|regress)|(/metadata))?/?$"
)


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
    from google.protobuf import json_format

    s = manager.resolve(name, version, label)
    sigs = json_format.MessageToDict(s.signature_def_map(), preserving_proto_field_name=True)
    return {"model_spec": {"name": name, "signature_name": "", "version": str(s.version)},
            "metadata": {"signature_def": sigs}}


class RestApi:
    """The HTTP handler: `RestApi(service, metrics_path)(conn, method, target, body)`."""

    def __init__(self, service: ModelService, metrics_path: str | None):
        self.service = service
        self.manager = service.manager
        self.metrics_path = metrics_path
        self._routes: dict[str, re.Match] = {}  # path -> route match (parsed once)

    def __call__(self, conn: HttpProtocol, method: str, target: str, body: bytes) -> None:
        t0 = time.perf_counter()
        path = target.split("?", 1)[0]
        if self.metrics_path is not None and path == self.metrics_path:
            if method != "GET":
                conn.respond(405, error_body(f"Method {method} not allowed on {path}"))
                return
            conn.respond(200, self.service.metrics.render(),
                         b"text/plain; version=0.0.4; charset=utf-8")
            return
        m = self._routes.get(path)
        if m is None:
            m = _ROUTE.match(unquote(path)) if path.startswith("/v1/models/") else None
            if m is not None and len(self._routes) < 1024:  # bounded: paths are client input
                self._routes[path] = m
        if m is None:
            conn.respond(404, error_body(f"Malformed request: {method} {path[:200]}"))
            return
        name, version, label, verb, metadata = m.groups()
        version = int(version) if version is not None else None
        api = verb or ("metadata" if metadata else "status")
        if (verb is None) != (method == "GET"):
            conn.respond(405, error_body(f"Method {method} not allowed for {api} on "
                                         f"{path[:200]}; use {'GET' if verb is None else 'POST'}"))
            return
        try:
            if verb is None:
                fn = metadata_json if metadata else status_json
                payload = fn(self.manager, name, version, label)
                self._record(name, api, None, t0)
                conn.respond(200, json.dumps(payload).encode())
                return
            self._infer(conn, verb, name, version, label, body, t0)
        except ServingError as e:
            self._record(name, api, e, t0)
            conn.respond(e.http_status, error_body(e.message))

    def _record(self, name, api, err, t0):
        known = name if name in self.manager._models else "<unknown>"
        self.service.record(known, api, "REST", err, t0)

    def _infer(self, conn, verb, name, version, label, body, t0):
        servable = self.manager.resolve(name, version, label)
        try:
            req = loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise invalid(f"JSON Parse error: {e}") from None
        if not isinstance(req, dict):
            raise invalid(f"JSON request body must be an object. Received: {type(req).__name__}")
        sig_name = req.get("signature_name", "")
        if not isinstance(sig_name, str):
            raise invalid(f"'signature_name' must be a string. Received: {sig_name!r}")
        if verb == "predict":
            sig = servable.signature(sig_name)
            feeds, row = feeds_from_json(req, sig)
        else:
            sig = ex.signature_for(servable, sig_name, CLASSIFY if verb == "classify"
                                   else REGRESS)
            feeds = {next(iter(sig.inputs)): ex.examples_from_json(req)}
        seq = conn.seq

        def done(out, err):
            if err is None:
                try:
                    if verb == "predict":
                        data = dumps(predict_response(out, row), out)
                    elif verb == "classify":
                        data = json.dumps({"result": [[list(p) for p in r] for r in
                                                      ex.classification_rows(sig, out)]}).encode()
                    else:
                        data = json.dumps({"result": ex.regression_values(sig, out)}).encode()
                except ServingError as e:
                    err = e
            if err is not None:
                self._record(name, verb, err, t0)
                conn.respond(err.http_status, error_body(err.message), seq=seq)
            else:
                self._record(name, verb, None, t0)
                conn.respond(200, data, seq=seq)

        self.service.submit(servable, sig, feeds, done, _loop())


def _loop():
    import asyncio

    return asyncio.get_running_loop()

