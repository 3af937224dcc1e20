"""`baton serve` from a bucket: a real S3 server (SeaweedFS) holding the model base path."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import fixture_models as fm
import pytest
from conftest import http
from test_reliability import EXPECTED_CLASS, state_of, wait_for

from baton.errors import StorageError
from baton.serving.config import ModelConfig
from baton.serving.server import ModelServer, ServerOptions
from baton.storage import location as L
from baton.storage import manifest as M
from baton.storage import model_versions as MV
from baton.storage import objects

ROOT = Path(__file__).resolve().parents[2]


def push(src: str, base: str, version: int) -> None:
    """A Baton push of export `src` as `version` (the storage layer's commit protocol)."""
    files = {p.relative_to(src).as_posix(): p for p in Path(src).rglob("*") if p.is_file()}
    MV.write(base, version, files, {"digest": M.digest(M.of_directory(src))})


def predict_class(server) -> int:
    status, body = http(server.rest_port, "POST", "/v1/models/penguins:predict",
                        {"instances": [fm.PENGUIN]})
    assert status == 200, body
    ids = body["predictions"][0]["class_ids"]
    return int(ids[0] if isinstance(ids, list) else ids)


def version_of_answer(server) -> int:
    status, body = http(server.rest_port, "GET", "/v1/models/penguins")
    available = [int(v["version"]) for v in body["model_version_status"]
                 if v["state"] == "AVAILABLE"]
    return max(available)


def test_serves_from_a_bucket_and_hot_reloads_only_committed_versions(built, s3):
    base = L.join(s3, "models", "penguins")
    push(built["penguins1"], base, 1)
    opts = ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0.1)
    server = ModelServer(opts, [ModelConfig("penguins", base)]).start()
    try:
        assert state_of(server, 1) == "AVAILABLE"
        assert predict_class(server) == EXPECTED_CLASS[1]
        # a push in progress (pending marker, files, no commit) is never loaded
        prefix = L.join(base, "2")
        objects.write_json(L.join(prefix, MV.PENDING), {"token": "t", "started": time.time()})
        objects.upload_file(Path(built["penguins2"]) / "saved_model.pb",
                            L.join(prefix, "saved_model.pb"))
        time.sleep(1.0)
        assert state_of(server, 2) is None and version_of_answer(server) == 1
        # the commit makes it a version: downloaded, loaded, warmed, then served
        push(built["penguins2"], base, 2)
        wait_for(lambda: state_of(server, 2) == "AVAILABLE")
        assert predict_class(server) == EXPECTED_CLASS[2]
        local = next((Path(os.environ["BATON_CACHE_DIR"]) / "serving").glob("*/2-*"))
        assert (local / "saved_model.pb").is_file()
        # a version another tool copied (no commit, no pending marker): once its listing holds
        src = Path(built["penguins3"])
        for p in sorted(src.rglob("*")):
            if p.is_file():
                objects.upload_file(p, L.join(base, "3", p.relative_to(src).as_posix()))
        wait_for(lambda: state_of(server, 3) == "AVAILABLE")
        assert predict_class(server) == EXPECTED_CLASS[3]
        wait_for(lambda: state_of(server, 1) == "END")  # latest policy: one version served
    finally:
        server.stop(grace=1)


def test_a_store_out_of_reach_keeps_the_served_version(built, tmp_path, monkeypatch):
    from baton.storage.testing import LocalS3
    from baton.strategies.cluster import free_ports

    with LocalS3(free_ports(LocalS3.PORTS)).start() as store:
        for k, v in store.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("BATON_CACHE_DIR", str(tmp_path / "cache"))
        base = L.join(store.bucket("outage"), "models", "penguins")
        push(built["penguins1"], base, 1)
        opts = ServerOptions(bind_free_ports=True, file_system_poll_wait_seconds=0.1)
        server = ModelServer(opts, [ModelConfig("penguins", base)]).start()
        try:
            store.stop()
            time.sleep(1.5)  # several polls fail
            assert state_of(server, 1) == "AVAILABLE"
            assert predict_class(server) == EXPECTED_CLASS[1]
            store.start()
            push(built["penguins2"], base, 2)
            wait_for(lambda: state_of(server, 2) == "AVAILABLE")
        finally:
            server.stop(grace=1)


def test_missing_bucket_and_wrong_credentials_are_one_line_errors(s3, monkeypatch):
    server = ModelServer(ServerOptions(bind_free_ports=True),
                         [ModelConfig("penguins", "s3://no-such-bucket-serve/m")])
    with pytest.raises(StorageError, match=r"^model 'penguins' base path: cannot use "
                       r"s3://no-such-bucket-serve/m: bucket 'no-such-bucket-serve' does not "
                       r"exist$"):
        server.start()
    env = dict(os.environ, AWS_SECRET_ACCESS_KEY="wrong")
    done = subprocess.run([sys.executable, "-m", "baton.pipeline.cli", "serve",
                           "--model_name=penguins", f"--model_base_path={s3}/models/p",
                           "--port=0", "--rest_api_port=0"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    lines = [x for x in done.stderr.splitlines() if x.startswith("baton serve:")]
    assert done.returncode == 1, done.stderr[-2000:]
    assert lines == [f"baton serve: model 'penguins' base path: cannot use {s3}/models/p: "
                     "access denied (check the credentials: AWS_ACCESS_KEY_ID/"
                     "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the pod's service account role)"]
