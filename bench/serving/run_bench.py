"""Serving benchmark: baton serve vs a naive Starlette wrapper, Ray Serve and the bare
HTTP ceiling, side by side in one run with one load generator (wrk), so the ratios hold
even on a shared 2-core machine. Writes docs/benchmarks-serving.md.

    .venv/bin/python bench/serving/run_bench.py [--seconds 5] [--rounds 5] [--skip-ray]
        [--penguins-base DIR] [--soak-seconds 120] [--concurrency 1,16,64] [--no-grpc]
        [--grpc-server native,grpcio]

A/B of two source trees (e.g. `git worktree add /tmp/old HEAD`), REST only, interleaved,
no report written: `--models mlp --peers baton --concurrency 64 --no-grpc --soak-seconds 0
--baton-trees old=/tmp/old,new=/tmp/new` serves each tree's code (PYTHONPATH=DIR) as
its own peer and prints every round's req/s and the per-round ratios to the first tree.

The penguins model is the default pipeline's own export: the script runs `baton run` once
in a temporary directory and serves the model it pushes (or `--penguins-base`, a model
base path pushed earlier). Then bench/serving/soak.py runs (`--soak-seconds`, 0 skips it)
and its results are a section of the report; a failed soak invariant makes the exit
status 1. Needs `wrk` (apt-get install wrk), `h2load` for gRPC (apt-get install
nghttp2-client) and, for the peers, starlette, uvicorn, ray[serve].

gRPC is driven by h2load (C, like wrk): POST /tensorflow.serving.PredictionService/Predict
with `content-type: application/grpc`, `te: trailers` and a body holding the 5-byte gRPC
frame prefix and a serialized PredictRequest (the same row as the REST body), one
connection per concurrent call (`-c N -m 1`, as wrk's connections). h2load only sees
HTTP status 200, so each run is checked against the server: real grpc client calls must
answer OK with the expected outputs first, and the server's own request_count
(by status, while only h2load drives it) must count every call h2load completed as OK; any other
status is the cell's `errors`. `--grpc-server grpcio,native` adds cells for grpcio's
grpc.aio server (BATON_SERVING_GRPC=grpcio) beside the default native one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "serving")]
PY = sys.executable
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY_FILE"), "r"); wrk.body = f:read("*a"); f:close()
"""
TREES: dict[str, str] = {}  # --baton-trees: peer "baton-<name>" -> source tree
GRPC_SERVERS: dict[str, str] = {}  # --grpc-server: peer "baton-grpcio" -> BATON_SERVING_GRPC
BATCHING = ("max_batch_size { value: 256 } batch_timeout_micros { value: 0 } "
            "max_enqueued_batches { value: 64 } num_batch_threads { value: 1 }")
METRICS_PATH = "/monitoring/prometheus/metrics"
PREDICT_PATH = "/tensorflow.serving.PredictionService/Predict"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ok(url: str, body: bytes, timeout: float, proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(url)


def wrk(url: str, body_file: str, lua: str, conc: int, seconds: float) -> dict:
    out = subprocess.run(["wrk", "-t1", f"-c{conc}", f"-d{int(seconds)}s", "--latency", "-s", lua,
                          url], capture_output=True, text=True, env=dict(ENV, BODY_FILE=body_file),
                         check=True).stdout

    def ms(label):
        m = re.search(rf"{label}\s+([\d.]+)(us|ms|s)\b", out)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v

    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50_ms": ms("50%"), "p99_ms": ms("99%"),
            "errors": int(non2xx.group(1)) if non2xx else 0, "socket_errors": errs.group(1)
            if errs else ""}


def grpc_request(body: dict):
    """The PredictRequest for the REST body's one row (model "m")."""
    import numpy as np
    from tensorflow_serving.apis import predict_pb2

    from baton.serving.tensor_proto import from_ndarray

    inst = body["instances"][0]
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "m"
    if isinstance(inst, dict):
        for k, v in inst.items():
            from_ndarray(np.array([v], dtype=object if isinstance(v, str) else np.float32),
                         req.inputs[k])
    else:
        from_ndarray(np.array([inst], np.float32), req.inputs["x"])
    return req


def grpc_check(port: int, req, calls: int = 20) -> None:
    """Real grpc client calls: every one OK, with outputs (h2load cannot read trailers)."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        for _ in range(calls):
            resp = stub.Predict(req, timeout=30)
            if not resp.outputs:
                raise RuntimeError(f"Predict answered no outputs: {resp}")


def grpc_counts(rest_port: int) -> dict[str, float]:
    """The server's request_count by status (TF Serving's labels: model_name and status,
    both APIs; nothing else drives the server while h2load runs)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{rest_port}{METRICS_PATH}", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(":tensorflow:serving:request_count{"):
            status = re.search(r'status="([^"]*)"', line).group(1)
            out[status] = out.get(status, 0) + float(line.rsplit(" ", 1)[1])
    return out


def h2load(port: int, rest_port: int, body_file: str, conc: int, seconds: float,
           tmp: str) -> dict:
    """One h2load gRPC run; latencies from its per-request log, statuses from the server."""
    log = os.path.join(tmp, "h2load.log")
    with contextlib.suppress(FileNotFoundError):
        os.remove(log)
    before = grpc_counts(rest_port)
    out = subprocess.run(["h2load", "-t1", f"-c{conc}", "-m1", f"-D{int(seconds)}",
                          "-H", "content-type: application/grpc", "-H", "te: trailers",
                          "-d", body_file, "--log-file", log,
                          f"http://127.0.0.1:{port}{PREDICT_PATH}"],
                         capture_output=True, text=True, check=True).stdout
    time.sleep(0.2)  # calls h2load abandoned at the deadline finish on the server
    after = grpc_counts(rest_port)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    with open(log) as f:
        lat = sorted(int(row[2]) / 1000 for row in (line.split() for line in f)
                     if len(row) >= 3 and row[1] == "200")
    m = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    done = int(m.group(1))
    ok = delta.pop("OK", 0)
    if ok < len(lat):  # a 200 whose trailers said otherwise: count it as an error
        delta["not OK"] = delta.get("not OK", 0) + len(lat) - ok
    return {"rps": float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out).group(1)),
            "p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)],
            "errors": int(sum(delta.values())) + done - len(lat), "done": done,
            "server_ok": int(ok)}


def start(kind: str, model_dir: str, tmp: str):
    """Returns (proc, url, grpc_port or None)."""
    if kind == "baton" or kind in TREES or kind in GRPC_SERVERS:
        tree = TREES.get(kind)
        env = ENV if tree is None else dict(ENV, PYTHONPATH=tree)
        if kind in GRPC_SERVERS:
            env = dict(env, BATON_SERVING_GRPC=GRPC_SERVERS[kind])
        cfg = os.path.join(tmp, "batching.config")
        with open(cfg, "w") as f:
            f.write(BATCHING)
        mon = os.path.join(tmp, "monitoring.config")
        with open(mon, "w") as f:
            f.write(f'prometheus_config {{ enable: true path: "{METRICS_PATH}" }}')
        pf = os.path.join(tmp, f"ports-{time.monotonic_ns()}.json")
        proc = subprocess.Popen([PY, "-m", "serving", "--model_name=m",
                                 f"--model_base_path={os.path.dirname(model_dir)}",
                                 "--bind_free_ports", f"--ports_file={pf}", "--enable_batching",
                                 f"--batching_parameters_file={cfg}",
                                 f"--monitoring_config_file={mon}"], env=env, cwd=tree,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(pf):
            if proc.poll() is not None:
                raise RuntimeError("baton serve exited")
            time.sleep(0.1)
        with open(pf) as f:
            ports = json.load(f)
        return (proc, f"http://127.0.0.1:{ports['rest']}/v1/models/m:predict",
                (ports["grpc"], ports["rest"]))
    port = free_port()
    log = os.path.join(tmp, f"peer-{kind}-{os.path.basename(os.path.dirname(model_dir))}.log")
    with open(log, "wb") as f:  # the peer's output: read it when a peer fails to answer
        proc = subprocess.Popen([PY, os.path.join(HERE, "peers.py"), kind, model_dir, str(port)],
                                env=ENV, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, f"http://127.0.0.1:{port}/v1/models/m:predict", None


def stop(proc) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # our own session: ray's workers included
        except (PermissionError, ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def signature_p50(model_dir: str, body: dict) -> float:
    """In-process signature call at batch 1 (the floor for concurrency-1 latency)."""
    import numpy as np
    import tensorflow as tf

    fn = tf.saved_model.load(model_dir).signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    inst = body["instances"][0]
    if isinstance(inst, dict):
        feeds = {k: tf.constant([inst[k]]) for k in specs}
    else:
        feeds = {next(iter(specs)): tf.constant(np.array([inst], np.float32))}
    for _ in range(50):
        fn(**feeds)
    ts = []
    for _ in range(500):
        t = time.perf_counter()
        {k: v.numpy() for k, v in fn(**feeds).items()}
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def pipeline_model(tmp: str) -> str:
    """Runs the default pipeline (`baton run`) in `tmp`; returns its pushed model's base."""
    t0 = time.monotonic()
    log = os.path.join(tmp, "baton-run.log")
    with open(log, "wb") as f:
        rc = subprocess.call([os.path.join(os.path.dirname(PY), "baton"), "run", "-q",
                              "--runs-dir", os.path.join(tmp, "runs")], cwd=tmp, env=ENV,
                             stdout=f, stderr=subprocess.STDOUT)
    base = os.path.join(tmp, "models", "penguins")
    if rc or not os.path.isdir(base):
        with open(log, errors="replace") as f:
            raise RuntimeError(f"baton run failed ({rc}):\n{f.read()[-3000:]}")
    print(f"   default pipeline run in {time.monotonic() - t0:.0f}s: {base}", flush=True)
    return base


def latest_version(base: str) -> str:
    return os.path.join(base, str(max(int(v) for v in os.listdir(base) if v.isdigit())))


def instance_for(model_dir: str) -> dict:
    """A raw penguin with exactly the serving signature's inputs (the real export adds
    `year` to the fixture's features)."""
    import fixture_models as fm
    import tensorflow as tf

    specs = tf.saved_model.load(model_dir).signatures["serving_default"]
    names = set(specs.structured_input_signature[1])
    row = dict(fm.PENGUIN, year=2008.0)
    missing = names - set(row)
    if missing:
        raise RuntimeError(f"no bench value for the model's inputs {sorted(missing)}")
    return {k: v for k, v in row.items() if k in names}


def run_cells(peers_up: dict, bodies: dict, lua: str, seconds: float, rounds: int,
              results: dict, mname: str, concs=(1, 16, 64), grpc_body: str = "",
              tmp: str = "") -> None:
    """Every REST cell (wrk) of the peers that are up and, with `grpc_body`, every gRPC
    cell (h2load) of the baton servers, interleaved: for each concurrency, each round
    runs every peer once (a baton server: REST, then gRPC), so a change in the machine's
    background load hits all peers and both APIs alike; a cell reports the median over
    the rounds of req/s, of p50 and of p99, and keeps every round's req/s (`runs`) for the
    per-round ratios (see ratio)."""
    for c in concs:
        runs: dict[tuple[str, str], list[dict]] = {}
        for _ in range(rounds):
            for peer, (_, url, ports) in peers_up.items():
                x = wrk(url, bodies[peer], lua, c, seconds)
                runs.setdefault((peer, "REST"), []).append(x)
                print(f"   {peer:12s} REST c={c:<3} {x}", flush=True)
                if grpc_body and ports:
                    x = h2load(ports[0], ports[1], grpc_body, c, seconds, tmp)
                    runs.setdefault((peer, "gRPC"), []).append(x)
                    print(f"   {peer:12s} gRPC c={c:<3} {x}", flush=True)
        for (peer, api), rs in runs.items():
            results[(mname, peer, api, c)] = r = {
                **{k: median([x[k] for x in rs]) for k in ("rps", "p50_ms", "p99_ms")},
                "errors": sum(x["errors"] for x in rs), "runs": [x["rps"] for x in rs],
                "group": ",".join(peers_up)}
            print(f"   {peer:12s} {api} c={c:<3} median {r}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5, help="per wrk run")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved runs per cell; the median is reported")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--models", default="mlp,penguins", help="subset while iterating")
    ap.add_argument("--peers", default="baton,naive,constant,ray", help="subset while iterating")
    ap.add_argument("--penguins-base", help="serve this model base path (a pushed penguins "
                    "model) instead of running the default pipeline for one")
    ap.add_argument("--soak-seconds", type=float, default=120,
                    help="then run soak.py this long (0: skip)")
    ap.add_argument("--concurrency", default="1,16,64", help="REST/gRPC cells' concurrencies")
    ap.add_argument("--no-grpc", action="store_true", help="REST cells only")
    ap.add_argument("--grpc-server", default="native",
                    help="native,grpcio: baton's gRPC servers to measure (BATON_SERVING_GRPC)")
    ap.add_argument("--baton-trees", default="", help="name=DIR,...: A/B source trees")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks-serving.md"))
    a = ap.parse_args()
    import fixture_models as fm

    if not shutil.which("wrk"):
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="baton-bench-")
    try:
        return run(a, fm, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a, fm, tmp: str) -> int:
    lua = os.path.join(tmp, "post.lua")
    with open(lua, "w") as f:
        f.write(LUA)
    wanted = a.models.split(",")
    models = {}
    if "mlp" in wanted:
        models["mlp"] = (fm.build_mlp(os.path.join(tmp, "mlp", "1")), {"instances": [[0.5] * 32]})
    if "penguins" in wanted:
        print("== penguins: the default pipeline's pushed model", flush=True)
        base = a.penguins_base or pipeline_model(tmp)
        mdir = latest_version(base)
        models["penguins"] = (mdir, {"instances": [instance_for(mdir)]})
    peers = [p for p in ["baton", "naive", "constant", "ray"]
             if p in a.peers.split(",") and not (a.skip_ray and p == "ray")]
    concs = [int(c) for c in a.concurrency.split(",")]
    for item in filter(None, a.baton_trees.split(",")):
        name, _, tree = item.partition("=")
        TREES[f"baton-{name}"] = os.path.abspath(tree)
    if TREES:
        peers = [p for p in peers if p != "baton"] + list(TREES)
    elif "baton" in peers and "grpcio" in a.grpc_server.split(","):
        GRPC_SERVERS["baton-grpcio"] = "grpcio"
        peers.insert(peers.index("baton") + 1, "baton-grpcio")
        if "native" not in a.grpc_server.split(","):
            peers.remove("baton")
    results, notes, floor = {}, {}, {}
    grpc_on = not a.no_grpc and shutil.which("h2load") is not None
    if not a.no_grpc and not grpc_on:
        notes["gRPC"] = "h2load not found (apt-get install nghttp2-client): no gRPC cells"
    for mname, (mdir, body) in models.items():
        floor[mname] = signature_p50(mdir, body)
        bf = os.path.join(tmp, f"{mname}.json")
        with open(bf, "w") as f:
            json.dump(body, f)
        gbf = os.path.join(tmp, f"{mname}.grpc")
        req = grpc_request(body).SerializeToString()
        with open(gbf, "wb") as f:
            f.write(b"\x00" + len(req).to_bytes(4, "big") + req)
        # baton, naive and the ceiling run side by side (idle when not driven); Ray, whose
        # cluster keeps the cores busy even when idle, runs alone afterwards
        for group in ([p for p in peers if p != "ray"], [p for p in peers if p == "ray"]):
            up = {}
            try:
                for peer in group:
                    print(f"== {mname} / {peer}", flush=True)
                    try:
                        proc, url, gport = start(peer, mdir, tmp)
                    except Exception as e:  # noqa: BLE001
                        notes[peer] = f"could not start on {mname}: {e}"
                        print(f"   {peer} could not start: {e!r}", flush=True)
                        continue
                    up[peer] = (proc, url, gport)
                    try:
                        wait_ok(url, json.dumps(body).encode(), 180, proc)
                        wrk(url, bf, lua, 16, 2)  # warm up
                        if gport and grpc_on:
                            grpc_check(gport[0], grpc_request(body))
                            h2load(gport[0], gport[1], gbf, 16, 2, tmp)  # warm up
                    except Exception as e:  # noqa: BLE001
                        notes[peer] = f"failed on {mname}: {e!r}"
                        print(f"   {peer} failed: {e!r}", flush=True)
                        stop(up.pop(peer)[0])
                if not up:
                    continue
                run_cells(up, {p: bf for p in up}, lua, a.seconds, a.rounds, results, mname,
                          concs, gbf if grpc_on else "", tmp)
            except Exception as e:  # noqa: BLE001
                notes[",".join(up) or "?"] = f"failed on {mname}: {e!r}"
                print(f"   failed: {e!r}", flush=True)
            finally:
                for proc, _, _ in up.values():
                    stop(proc)
    if TREES:  # an A/B: every round, and the per-round ratios to the first tree
        first = next(iter(TREES))
        for (mname, peer, api, c), r in sorted(results.items()):
            base = results.get((mname, first, api, c))
            x = ratio(r, base) if base else float("nan")
            print(f"A/B {mname} {peer} {api} c={c}: runs {r['runs']} req/s, median "
                  f"{r['rps']:.0f}; per-round ratio to {first}: median {x:.3f}")
        return 0
    soak = None
    if a.soak_seconds > 0:
        print(f"== soak ({a.soak_seconds:g} s)", flush=True)
        out = os.path.join(tmp, "soak.json")
        subprocess.call([PY, os.path.join(HERE, "soak.py"), "--seconds", str(a.soak_seconds),
                         "--json", out], env=ENV)
        try:
            with open(out) as f:
                soak = json.load(f)
        except (OSError, ValueError) as e:
            notes["soak"] = f"soak.py wrote no summary: {e!r}"
    write_report(a.out, results, notes, floor, peers, a, soak)
    print(f"wrote {a.out}")
    return 0 if soak is None or soak["ok_overall"] or a.soak_seconds <= 0 else 1


NAMES = {"baton": "baton serve (batching)",
         "baton-grpcio": "baton serve (batching), grpcio's grpc.aio server",
         "naive": "naive Starlette+uvicorn",
         "constant": "bare HTTP ceiling (Starlette constant)", "ray": "Ray Serve @serve.batch"}
MODEL_NOTES = {
    "mlp": "a 32-256-256-10 MLP, one float input `x` [None, 32] "
           "(tests/serving/fixture_models.py)",
    "penguins": "the default pipeline's own export, pushed by `baton run` (raw features in: "
                "5 floats and 2 strings; the transform graph with its vocabulary lookups and "
                "the Keras model inside; outputs `probabilities`, `class_ids` and the string "
                "`classes`)",
}


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def ratio(b: dict, p: dict) -> float:
    """baton req/s / peer req/s: the median of the per-round ratios when both ran in the
    same rounds (each round's runs are back to back, so they saw the same background
    load), else the ratio of the reported cells."""
    br, pr = b.get("runs"), p.get("runs")
    if br and pr and len(br) == len(pr) and b.get("group") == p.get("group"):
        return median([x / y for x, y in zip(br, pr, strict=True)])
    return b["rps"] / p["rps"]


def goals(mname: str, results: dict, floor: dict) -> list[str]:
    """The issue's goals for one model: met or missed, with the figures."""
    b64 = results.get((mname, "baton", "REST", 64))
    b1 = results.get((mname, "baton", "REST", 1))
    out = []

    def line(ok, text):
        out.append(f"- {'met' if ok else '**missed**'}: {text}")

    for peer, want in (("naive", 5.0), ("ray", 30.0), ("constant", 0.6)):
        r = results.get((mname, peer, "REST", 64))
        if b64 and r:
            x = ratio(b64, r)
            line(x >= want, f">= {want:g}x {NAMES[peer]} at concurrency 64: **{x:.2f}x** "
                            f"(cells: {b64['rps']:.0f} / {r['rps']:.0f} req/s)")
        else:
            out.append(f"- not measured: >= {want:g}x {NAMES[peer]}")
    for api in ("REST", "gRPC"):
        r = results.get((mname, "baton", api, 64))
        if r:
            line(r["p99_ms"] < 30, f"p99 < 30 ms at concurrency 64 ({api}): "
                                   f"**{r['p99_ms']:.2f} ms**")
    for peer in ("baton", "baton-grpcio"):
        g = results.get((mname, peer, "gRPC", 64))
        r = results.get((mname, peer, "REST", 64))
        if g and r:
            x = ratio(g, r)
            text = (f"gRPC (h2load) >= 0.5x REST (wrk) req/s at concurrency 64, same server "
                    f"and batching: **{x:.2f}x** (cells: {g['rps']:.0f} / {r['rps']:.0f} "
                    "req/s; per-round ratios "
                    + ", ".join(f"{u / v:.2f}" for u, v in zip(g["runs"], r["runs"],
                                                              strict=False)) + ")")
            if peer == "baton":
                line(x >= 0.5, text)
            else:
                out.append(f"- for comparison, grpcio's grpc.aio server: {text}")
    if b1 and mname in floor:
        d = b1["p50_ms"] - floor[mname]
        line(d <= 0.5, f"concurrency-1 p50 within 0.5 ms of the in-process call: **+{d:.3f} ms** "
                       f"({b1['p50_ms']:.2f} vs {floor[mname]:.3f} ms)")
    return out


def write_report(path, results, notes, floor, peers, a, soak) -> None:
    lines = ["# Serving benchmark", "",
             f"Generated by `bench/serving/run_bench.py --seconds {a.seconds:g} --rounds "
             f"{a.rounds}` on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, shared "
             "with other work: compare ratios, not absolutes). Load: `wrk -t1` closed loop, "
             f"one JSON row per request, {a.seconds:g} s per run. baton, the naive server and "
             f"the ceiling are up together and driven in turn: each cell is run {a.rounds} "
             "times interleaved with the other servers' runs and req/s, p50 and p99 are each "
             "the median over those runs, so background load on the shared machine hits every "
             "server alike "
             "(ratios between them are medians of the per-round ratios); "
             "Ray Serve runs alone afterwards (its cluster keeps cores busy while idle). gRPC: "
             "`h2load -t1 -c N -m1` (nghttp2's C load generator; one connection per "
             "concurrent call, as wrk) sending the same row as a PredictRequest in a gRPC "
             "frame, run right after the same server's REST run in every round; its "
             "`errors` count calls the server's request_count did not record as OK (real "
             "grpc client calls check the answers first). baton serve runs with "
             f"`--enable_batching` and `{BATCHING}`.", ""]
    for mname in ("mlp", "penguins"):
        if not any(k[0] == mname for k in results):
            continue
        lines += [f"## Model: {mname}", "", f"Model: {MODEL_NOTES[mname]}.", "",
                  f"In-process signature call, batch 1: p50 {floor.get(mname, 0):.3f} ms", "",
                  "| server | API | conc | req/s | p50 ms | p99 ms | errors |",
                  "|---|---|---|---|---|---|---|"]
        for peer in peers:
            for api in ("REST", "gRPC"):
                for c in (1, 16, 64):
                    r = results.get((mname, peer, api, c))
                    if r is not None:
                        lines.append(f"| {NAMES.get(peer, peer)} | {api} | {c} | {r['rps']:.0f} | "
                                     f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} |")
        lines.append("")
        b = results.get((mname, "baton", "REST", 64))
        if b:
            lines += ["Ratios at concurrency 64 (baton REST req/s / peer req/s; for the "
                      "peers run side by side, the median of the per-round ratios):", ""]
            for peer in ("naive", "ray", "constant"):
                r = results.get((mname, peer, "REST", 64))
                if r:
                    lines.append(f"- vs {NAMES[peer]}: **{ratio(b, r):.2f}x**")
            b1 = results.get((mname, "baton", "REST", 1))
            if b1:
                lines.append(f"- concurrency-1 p50 overhead over the in-process call: "
                             f"**{b1['p50_ms'] - floor[mname]:.3f} ms**")
            lines.append("")
    lines += ["## Goals", "",
              "The issue's goals, per model, from the tables above (REST unless stated; "
              "the throughput ratios to the peers compare REST servers; gRPC has its "
              "latency goal and its ratio to the same server's REST):", ""]
    for mname in ("mlp", "penguins"):
        if any(k[0] == mname for k in results):
            lines += [f"**{mname}**", ""] + goals(mname, results, floor) + [""]
    if soak is not None:
        from soak import markdown

        lines += markdown(soak)
    if notes:
        lines += ["## Peers that did not run", ""] + [f"- {NAMES.get(k, k)}: {v}" for k, v in
                                                      notes.items()] + [""]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
