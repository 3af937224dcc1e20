"""Fixture SavedModels (built once per session) and an in-process server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import fixture_models as fm  # noqa: E402

from baton.serving.testing import install  # noqa: E402,F401 - tests import it from here


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """Exported models by role: penguins biased to class b (b = 0..3), a regressor, an MLP."""
    root = tmp_path_factory.mktemp("built")
    out = {}
    for b in range(4):
        out[f"penguins{b}"] = fm.build_penguins(str(root / f"penguins{b}"), bias=float(b))
    out["regressor"] = fm.build_penguins(str(root / "regressor"), regression=True)
    return out


@pytest.fixture(scope="session")
def upstream(tmp_path_factory) -> dict[str, str]:
    """TF Serving's test models (upstream_models.py), name -> base path: exported once,
    by a child process (two virtual CPUs and TF1 graphs stay out of this one)."""
    root = tmp_path_factory.mktemp("upstream")
    script = os.path.join(os.path.dirname(__file__), "upstream_models.py")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, script, str(root)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server(built, tmp_path_factory):
    """One server with penguins (versions 1, 2, label stable=1) and a regressor."""
    from baton.serving.config import ModelConfig, VersionPolicy
    from baton.serving.server import ModelServer, ServerOptions

    root = tmp_path_factory.mktemp("models")
    pb, rb = str(root / "penguins"), str(root / "regressor")
    install(built["penguins1"], pb, 1)
    install(built["penguins2"], pb, 2)
    install(built["regressor"], rb, 7)
    mon = root / "monitoring.config"
    mon.write_text('prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }')
    models = [ModelConfig("penguins", pb, VersionPolicy("all"), (("stable", 1), ("canary", 2))),
              ModelConfig("regressor", rb)]
    opts = ServerOptions(bind_free_ports=True, enable_batching=True,
                         monitoring_config_file=str(mon), file_system_poll_wait_seconds=0,
                         rest_api_max_body_bytes=1 << 20)
    s = ModelServer(opts, models).start()
    yield s
    s.stop(grace=2)


def http(port: int, method: str, path: str, body=None, raw: bytes | None = None,
         headers: dict | None = None):
    """(status, parsed JSON or text) for one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text
