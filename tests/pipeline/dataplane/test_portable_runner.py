"""transform (with a preprocessing_fn) and statistics on the PortableRunner: Beam's Python job
service and an external worker pool, each its own process (the portability protocol Flink,
Spark and Dataflow use), against the in-process FnApiRunner run of the same rows: on a local
runs directory (shards passed as paths) and on a bucket (the workers read the shards' objects).

The workers see neither the spec's directory (renamed away before the first job starts; the
pool's cwd and PYTHONPATH exclude it) nor the test's sys.path: they import the user's module,
and the helper it imports, from the code staged inside the pipeline, under the names the user
wrote. A missing job service and a worker that never connects are stage errors in seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import baton
from baton.errors import StageError
from baton.pipeline.dataplane.beam import runner as beam_runner
from baton.pipeline.testing import run_stage
from baton.storage import manifest as M

pytestmark = [pytest.mark.slow, pytest.mark.multi_worker]

MODULE = '''\
import json
import os

import tensorflow as tf

import baton.tft as tft
from portable_helpers import NUMERIC

with open({log!r}, "a") as f:  # who imported this module, from where
    import portable_helpers
    f.write(json.dumps({{"pid": os.getpid(), "name": __name__, "file": __file__,
                        "helper": portable_helpers.__file__}}) + "\\n")


def preprocessing_fn(inputs):
    outputs = {{}}
    for key in NUMERIC:
        x = tf.where(tf.math.is_nan(inputs[key]), tft.mean(inputs[key]), inputs[key])
        outputs[key + "_xf"] = tft.scale_to_z_score(x)  # nested: phase 2 uses phase 1's mean
    outputs["island_xf"] = tft.compute_and_apply_vocabulary(
        inputs["island"], num_oov_buckets=1, vocab_filename="island")
    outputs["species"] = inputs["species"]
    return outputs
'''
HELPERS = 'NUMERIC = ["bill_length_mm", "flipper_length_mm"]\n'
JOB_TIMEOUT_MS = 120_000


class Service:
    """A Beam service in its own process group, its port read back from its own output."""

    def __init__(self, name: str, argv: list[str], port_of: re.Pattern[str], cwd: Path,
                 env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = port_of.search(log.read_text(errors="replace"))
            if found:
                self.port = int(found.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"{name} did not start: {log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        """SIGTERM to the process group (the pool's workers too), SIGKILL after 5 s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(5)
                os.killpg(self.proc.pid, 0)  # workers of the group still alive?
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture(scope="module")
def worker_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workers' node cache (BATON_CACHE_DIR): another node's, not the driver's."""
    return tmp_path_factory.mktemp("worker-node") / "cache"


@pytest.fixture(scope="module")
def beam_services(tmp_path_factory: pytest.TempPathFactory, s3_server: Any,
                  worker_cache: Path) -> Iterator[tuple[int, int]]:
    """(job service port, worker pool port), both on free ports (bound to 0, read back); the
    workers hold the S3 server's credentials and a node cache of their own."""
    d = tmp_path_factory.mktemp("beam-services")
    cwd = d / "cwd"  # an empty directory: nothing of the spec's on the workers' path
    cwd.mkdir()
    baton_root = str(Path(baton.__file__).parent.parent)
    env = {**os.environ, **s3_server.env(), "BATON_CACHE_DIR": str(worker_cache),
           "PYTHONPATH": baton_root, "TF_CPP_MIN_LOG_LEVEL": "3",
           # the pool starts each worker as `python -c ...`: this environment's python
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    services: list[Service] = []
    try:
        services.append(Service(
            "job service", [sys.executable, "-m",
                            "apache_beam.runners.portability.local_job_service_main",
                            "--port", "0", "--staging_dir", str(d / "staging")],
            re.compile(r"Listening for beam jobs on port (\d+)"), cwd, env, d / "job.log"))
        services.append(Service(
            "worker pool", [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                            "--service_port=0"],
            re.compile(r"Started worker pool servicer at port: \S+:(\d+)"), cwd, env,
            d / "pool.log"))
        yield services[0].port, services[1].port
    finally:
        for s in reversed(services):
            s.stop()


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_stage("ingest", {}, {}, tmp_path_factory.mktemp("ingest"))[0]["examples"]


def portable_args(job: int, pool: int) -> list[str]:
    return ["--runner=PortableRunner", f"--job_endpoint=localhost:{job}",
            "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool}",
            f"--wait_until_finish_duration={JOB_TIMEOUT_MS}"]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


REF = "portable_pre:preprocessing_fn"


@pytest.fixture(scope="module")
def user_code(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the spec's directory with the user's module and its helper, the imports log)."""
    d = tmp_path_factory.mktemp("user-code")
    code, log = d / "spec", d / "imports.jsonl"
    code.mkdir()
    (code / "portable_pre.py").write_text(MODULE.format(log=str(log)))
    (code / "portable_helpers.py").write_text(HELPERS)
    return code, log


@pytest.fixture(scope="module")
def local_outputs(tmp_path_factory: pytest.TempPathFactory, examples: Path,
                  user_code: tuple[Path, Path]) -> tuple[dict, dict, dict]:
    """(transform outputs, its metrics, statistics outputs) of the in-process FnApiRunner:
    what every portable run must equal."""
    d = tmp_path_factory.mktemp("local")
    local_t, local_m = run_stage("transform", {"preprocessing_fn": REF}, {"examples": examples},
                                 d, spec_dir=user_code[0], run_id="local")
    local_s, _ = run_stage("statistics", {}, {"examples": examples}, d, run_id="local")
    return local_t, local_m, local_s


@contextlib.contextmanager
def spec_dir_hidden(monkeypatch: pytest.MonkeyPatch, code: Path) -> Iterator[None]:
    """The driver imports the module first; the spec's directory is gone while each Beam job
    runs (as on workers of other machines), back between jobs and after the block."""
    real_run, hidden = beam_runner.run, code.with_name("spec-hidden")

    def run_hidden(build, args):  # noqa: ANN001, ANN202
        code.rename(hidden)
        try:
            return real_run(build, args)
        finally:
            hidden.rename(code)

    monkeypatch.setattr(beam_runner, "run", run_hidden)
    try:
        yield
    finally:
        monkeypatch.setattr(beam_runner, "run", real_run)
        if hidden.exists():
            hidden.rename(code)


def test_transform_on_the_portable_runner(tmp_path, beam_services, examples, monkeypatch,
                                          user_code, local_outputs):
    """A local runs directory (a volume the workers mount): shards passed as paths. Statistics
    on this runner: the bucket run below."""
    job, pool = beam_services
    code, log = user_code
    ref = REF
    local_t, local_m, _ = local_outputs

    args = portable_args(job, pool)
    started = time.perf_counter()
    with spec_dir_hidden(monkeypatch, code):
        port_t, port_m = run_stage("transform", {"preprocessing_fn": ref,
                                                 "beam_pipeline_args": args},
                                   {"examples": examples}, tmp_path, spec_dir=code,
                                   run_id="portable")
    print(f"portable transform: {time.perf_counter() - started:.1f} s")

    # identical transformed rows (byte for byte), analyzer values, feature spec, vocabulary
    assert (port_m["phases"], port_m["analyzers"]) == (local_m["phases"], local_m["analyzers"])
    assert local_m["phases"] == 2
    assert _tree(port_t["transformed"]) == _tree(local_t["transformed"])
    for name in ("analysis.json", "feature_spec.json", "assets/island"):
        assert (port_t["transform_graph"] / name).read_bytes() == \
            (local_t["transform_graph"] / name).read_bytes(), name

    # the workers imported the user's names from the staged copy, never from the spec's dir
    imports = [json.loads(line) for line in log.read_text().splitlines()]
    workers = [i for i in imports if i["pid"] != os.getpid()]
    assert workers, imports
    for i in workers:
        staged = Path(i["file"]).parent
        assert i["name"] == "portable_pre" and Path(i["file"]).name == "portable_pre.py", i
        assert staged.name.startswith("baton-user-code-"), i
        assert Path(i["helper"]) == staged / "portable_helpers.py", i
        assert not Path(i["file"]).resolve().is_relative_to(tmp_path.resolve()), i


def test_a_bucket_runs_workers_read_and_write_its_shards_on_the_store(
        s3, beam_services, worker_cache, user_code, local_outputs, monkeypatch):
    """`--runs-dir s3://...` with the workers in other processes that share no disk with the
    driver's node cache (nor the spec's directory): statistics and transform workers fetch the
    examples' shards from the bucket by their commit's manifest (into their own node cache),
    write the transformed shards and their results to the store, and the outputs equal an
    in-process run's."""
    from baton.pipeline.context import RunOptions
    from baton.pipeline.plan import plan
    from baton.pipeline.runner import run_pipeline
    from baton.pipeline.spec import load_spec
    from baton.pipeline.store import hash_path
    from baton.storage import location as L
    from baton.storage import objects

    code, _ = user_code
    local_t, local_m, local_s = local_outputs
    args = portable_args(*beam_services)
    spec = code / "bucket-spec.yaml"
    spec.write_text(json.dumps({"pipeline": "portable", "stages": [
        {"name": "ingest", "type": "ingest"},
        {"name": "statistics", "type": "statistics", "inputs": {"examples": "ingest.examples"},
         "config": {"beam_pipeline_args": args}},
        {"name": "transform", "type": "transform", "inputs": {"examples": "ingest.examples"},
         "config": {"preprocessing_fn": REF, "beam_pipeline_args": args}}]}))
    planned = plan(load_spec(spec))
    with spec_dir_hidden(monkeypatch, code):
        res = run_pipeline(planned, RunOptions(quiet=True), runs_dir=L.join(s3, "runs"))
    assert res.ok, [s.error for s in res.stages]

    def commit(stage: str) -> dict[str, Any]:
        return objects.read_json(L.join(res.url, stage, "lineage.json"))

    shards = {rel: e for rel, e in commit("ingest")["manifest"].items()
              if rel.endswith((".tfrecord", ".arrow"))}
    assert any(r.startswith("examples/columnar/") for r in shards) and len(shards) >= 4
    fetched = {p.name for p in (worker_cache / "objects").rglob("*") if p.is_file()}
    assert {e["sha256"] for e in shards.values()} <= fetched  # read from the store
    transform = commit("transform")
    assert transform["metrics"]["beam_running_mode"] == "PortableRunner"
    assert not [r for r in objects.list_tree(res.url) if ".tmp-results" in r]
    assert (transform["metrics"]["rows"], transform["metrics"]["phases"]) == \
        (local_m["rows"], local_m["phases"])
    assert transform["outputs"]["transformed"]["hash"] == hash_path(local_t["transformed"])
    files = {rel: e["sha256"] for rel, e in transform["manifest"].items()}
    for name in ("analysis.json", "feature_spec.json", "assets/island"):
        assert files[f"transform_graph/{name}"] == \
            M.hash_file(local_t["transform_graph"] / name)[0], name
    for out in ("statistics", "schema"):  # identical statistics and schema
        assert commit("statistics")["outputs"][out]["hash"] == hash_path(local_s[out]), out


def test_a_missing_job_service_fails_at_once(tmp_path, examples):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(StageError, match=rf"--job_endpoint=localhost:{port}: no job service"):
        run_stage("statistics", {"beam_pipeline_args": portable_args(port, 1)},
                  {"examples": examples}, tmp_path, run_id="missing")
    assert time.monotonic() - started < 15


def test_a_worker_that_never_connects_is_a_stage_error_after_the_timeout(tmp_path, examples,
                                                                         beam_services):
    """A pool that accepts the job's StartWorker but whose worker never connects (as one that
    crashes at start): Beam's job service waits forever; Baton cancels after the duration."""
    from concurrent import futures

    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc

    class DeadPool(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
        def StartWorker(self, request, context):  # noqa: ANN001, ANN202, N802
            return beam_fn_api_pb2.StartWorkerResponse()

        def StopWorker(self, request, context):  # noqa: ANN001, ANN202, N802
            return beam_fn_api_pb2.StopWorkerResponse()

    server = grpc.server(futures.ThreadPoolExecutor(2))
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(DeadPool(), server)
    pool = server.add_insecure_port("localhost:0")
    server.start()
    try:
        job, _ = beam_services
        args = [*portable_args(job, pool)[:-1], "--wait_until_finish_duration=4000"]
        started = time.monotonic()
        with pytest.raises(StageError, match=r"did not finish within 4 s .* cancelled"):
            run_stage("statistics", {"beam_pipeline_args": args}, {"examples": examples},
                      tmp_path, run_id="dead")
        assert time.monotonic() - started < 30
    finally:
        server.stop(0)


def test_staged_source_carries_the_module_and_its_helpers(tmp_path):
    """Unit: what travels, and a worker without the spec's directory imports the copy."""
    import pickle

    from baton.pipeline.dataplane.transform.fn_source import UserFn

    spec = tmp_path / "spec"
    (spec / "pkg").mkdir(parents=True)
    (spec / "staged_mod.py").write_text("from pkg.helper import K\n\ndef fn(x):\n    return K\n")
    (spec / "pkg" / "__init__.py").write_text("")
    (spec / "pkg" / "helper.py").write_text("K = 7\n")
    (spec / "unrelated.py").write_text("raise SystemExit('not staged')\n")
    source = UserFn.staged("staged_mod:fn", spec)
    assert sorted(source.staged_files) == ["pkg/__init__.py", "pkg/helper.py", "staged_mod.py"]
    shutil.rmtree(spec)
    probe = textwrap.dedent("""
        import pickle, sys
        fn = pickle.loads(sys.stdin.buffer.read()).load()
        import staged_mod
        print(fn(0), staged_mod.__file__)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(baton.__file__).parent.parent)}
    out = subprocess.run([sys.executable, "-c", probe], input=pickle.dumps(source), env=env,
                         cwd=tmp_path, capture_output=True, timeout=120, check=True)
    value, file = out.stdout.decode().split()
    assert value == "7" and "baton-user-code-" in file
