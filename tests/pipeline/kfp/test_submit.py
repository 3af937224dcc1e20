"""`baton kfp --submit`: the compiled pipeline sent by kfp.Client to a KFP API endpoint.

A KFP API server needs a cluster (MySQL, Argo, Kubernetes), so the endpoint here is a small
HTTP server that answers KFP's v2beta1 REST calls (healthz, experiments, runs) and records the
requests kfp.Client sent: the pipeline spec and the run's parameters are checked in them.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from baton.pipeline.cli import main


@pytest.fixture
def kfp_api():
    from baton.strategies.cluster import free_ports

    seen: list[tuple[str, str, dict]] = []
    state = {"fail": False}

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else {}
            seen.append((self.command, self.path, body))
            if state["fail"] and "/runs" in self.path:
                status, data = 500, {"error": "pipeline spec is invalid: (the test's refusal)",
                                     "code": 13}
            elif "/experiments" in self.path and self.command == "GET":
                status, data = 200, {"experiments": [], "total_size": 0}
            elif "/experiments" in self.path:
                status, data = 200, {"experiment_id": "e-1", "display_name": body["display_name"]}
            elif "/runs" in self.path:
                status, data = 200, {"run_id": "run-123", "display_name": body["display_name"]}
            else:
                status, data = 200, {}
            out = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = _reply

        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_ports(1)[0]), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, state
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_submit_creates_a_run_with_the_compiled_spec_and_parameters(kfp_api, capsys):
    host, seen, _ = kfp_api
    rc = main(["kfp", "--submit", "--host", host, "--pipeline-root", "s3://kfp-bucket/root",
               "--param", "epochs=3", "--param", "run_id=r-7", "--run-name", "retrain",
               "--experiment", "penguins-exp"])
    out = capsys.readouterr().out
    assert rc == 0 and f"submitted run run-123 to {host}" in out
    run = next(body for method, path, body in seen if method == "POST" and "/runs" in path)
    assert run["display_name"] == "retrain" and run["experiment_id"] == "e-1"
    spec = run["pipeline_spec"]["pipeline_spec"]
    assert spec["pipelineInfo"]["name"] == "penguins"
    assert spec["defaultPipelineRoot"] == "s3://kfp-bucket/root"
    assert set(spec["root"]["dag"]["tasks"]) >= {"plan-run", "train", "push", "finish-run"}
    assert run["runtime_config"]["parameters"] == {"epochs": 3, "run_id": "r-7"}
    # the compiled tasks' cache setting (off) is kept: the client was not told to override it
    assert all(not t.get("cachingOptions", {}).get("enableCache")
               for t in spec["root"]["dag"]["tasks"].values())


def test_a_refused_submission_is_one_line_exit_1(kfp_api, capsys):
    host, _, state = kfp_api
    state["fail"] = True
    rc = main(["kfp", "--submit", "--host", host, "--pipeline-root", "s3://kfp-bucket/root"])
    err = capsys.readouterr().err
    assert rc == 1 and f"--submit {host}:" in err and "Traceback" not in err


def test_submit_without_a_host_is_a_usage_error(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("KF_PIPELINES_ENDPOINT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["kfp", "--submit", "--pipeline-root", "s3://kfp-bucket/root"]) == 2
    assert "--host" in capsys.readouterr().err
