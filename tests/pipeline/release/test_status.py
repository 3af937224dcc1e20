"""Polling a TF Serving-compatible status endpoint after a push."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from baton.pipeline.release import status


@pytest.fixture
def server():
    """A stub of GET /v1/models/<name>/versions/<v>: LOADING twice, then AVAILABLE."""
    calls: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            calls.append(self.path)
            if not self.path.startswith("/v1/models/penguins/versions/"):
                self.send_response(404)
                self.end_headers()
                return
            version = self.path.rsplit("/", 1)[1]
            state = "AVAILABLE" if len(calls) >= 3 else "LOADING"
            body = json.dumps({"model_version_status": [
                {"version": version, "state": state,
                 "status": {"error_code": "OK", "error_message": ""}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", calls
    httpd.shutdown()
    httpd.server_close()


def test_waits_until_the_version_is_available(server):
    url, calls = server
    state = status.wait_available(url, "penguins", 4, wait_seconds=10, interval=0.01)
    assert state["state"] == "AVAILABLE" and len(calls) == 3
    assert calls[-1] == "/v1/models/penguins/versions/4"


def test_reports_what_it_saw_when_the_model_never_appears(server):
    url, _ = server
    state = status.wait_available(url, "other", 1, wait_seconds=0.05, interval=0.01)
    assert state["state"] == "UNKNOWN" and state["error"] == "HTTP 404"
    assert status.version_state("http://127.0.0.1:9", "m", 1, timeout=0.5)["state"] == "UNREACHABLE"
