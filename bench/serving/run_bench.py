"""Serving benchmark: baton serve vs a naive Starlette wrapper, Ray Serve and the bare
HTTP ceiling, side by side in one run with one load generator (wrk), so the ratios hold
even on a shared 2-core machine. Writes docs/benchmarks-serving.md.

    .venv/bin/python bench/serving/run_bench.py [--seconds 6] [--skip-ray]

Needs `wrk` (apt-get install wrk) and, for the peers, starlette, uvicorn, ray[serve].
"""

from __future__ import annotations

import argparse
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
ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY_FILE"), "r"); wrk.body = f:read("*a"); f:close()
"""
BATCHING = ("max_batch_size { value: 256 } batch_timeout_micros { value: 0 } "
            "max_enqueued_batches { value: 64 } num_batch_threads { value: 1 }")


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


def start(kind: str, model_dir: str, tmp: str):
    """Returns (proc, url, grpc_port or None)."""
    if kind == "baton":
        cfg = os.path.join(tmp, "batching.config")
        with open(cfg, "w") as f:
            f.write(BATCHING)
        pf = os.path.join(tmp, f"ports-{time.monotonic_ns()}.json")
        proc = subprocess.Popen([PY, "-m", "serving", "--model_name=m",
                                 f"--model_base_path={os.path.dirname(model_dir)}",
                                 "--bind_free_ports", f"--ports_file={pf}", "--enable_batching",
                                 f"--batching_parameters_file={cfg}"], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(pf):
            if proc.poll() is not None:
                raise RuntimeError("baton serve exited")
            time.sleep(0.1)
        with open(pf) as f:
            ports = json.load(f)
        return proc, f"http://127.0.0.1:{ports['rest']}/v1/models/m:predict", ports["grpc"]
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--models", default="mlp,penguins", help="subset while iterating")
    ap.add_argument("--peers", default="baton,naive,constant,ray", help="subset while iterating")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks-serving.md"))
    a = ap.parse_args()
    import fixture_models as fm

    if not shutil.which("wrk"):
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="baton-bench-")
    lua = os.path.join(tmp, "post.lua")
    with open(lua, "w") as f:
        f.write(LUA)
    models = {"mlp": (fm.build_mlp(os.path.join(tmp, "mlp", "1")),
                      {"instances": [[0.5] * 32]}),
              "penguins": (fm.build_penguins(os.path.join(tmp, "penguins", "1")),
                           {"instances": [fm.PENGUIN]})}
    models = {k: v for k, v in models.items() if k in a.models.split(",")}
    peers = [p for p in ["baton", "naive", "constant", "ray"]
             if p in a.peers.split(",") and not (a.skip_ray and p == "ray")]
    results, notes, floor = {}, {}, {}
    for mname, (mdir, body) in models.items():
        floor[mname] = signature_p50(mdir, body)
        bf = os.path.join(tmp, f"{mname}.json")
        with open(bf, "w") as f:
            json.dump(body, f)
        for peer in peers:
            print(f"== {mname} / {peer}", flush=True)
            try:
                proc, url, gport = start(peer, mdir, tmp)
            except Exception as e:  # noqa: BLE001
                notes[peer] = f"could not start on {mname}: {e}"
                print(f"   {peer} could not start: {e!r}", flush=True)
                continue
            try:
                wait_ok(url, json.dumps(body).encode(), 180, proc)
                wrk(url, bf, lua, 16, 2)  # warm up
                for c in (1, 16, 64):
                    results[(mname, peer, "REST", c)] = r = wrk(url, bf, lua, c, a.seconds)
                    print(f"   c={c:<3} {r}", flush=True)
                if gport:
                    for c in (1, 16, 64):
                        out = subprocess.run([PY, os.path.join(HERE, "grpc_load.py"), str(gport),
                                              "m", json.dumps(body), str(c), str(a.seconds)],
                                             capture_output=True, text=True, env=ENV, check=True)
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        results[(mname, peer, "gRPC", c)] = r
                        print(f"   gRPC c={c:<3} {r}", flush=True)
            except Exception as e:  # noqa: BLE001
                notes[peer] = f"failed on {mname}: {e!r}"
                print(f"   {peer} failed: {e!r}", flush=True)
            finally:
                stop(proc)
    write_report(a.out, results, notes, floor, peers, a.seconds)
    print(f"wrote {a.out}")
    return 0


NAMES = {"baton": "baton serve (batching)", "naive": "naive Starlette+uvicorn",
         "constant": "bare HTTP ceiling (Starlette constant)", "ray": "Ray Serve @serve.batch"}


def write_report(path, results, notes, floor, peers, seconds) -> None:
    lines = ["# Serving benchmark", "",
             f"Generated by `bench/serving/run_bench.py` on {time.strftime('%Y-%m-%d')} "
             f"({os.cpu_count()} cores, shared with other work: compare ratios, not absolutes). "
             f"Load: `wrk -t1` closed loop, one JSON row per request, {seconds:g} s per cell; "
             "gRPC: a grpc.aio closed-loop generator in its own process.", ""]
    for mname in ("mlp", "penguins"):
        lines += [f"## Model: {mname}", "",
                  f"In-process signature call, batch 1: p50 {floor.get(mname, 0):.3f} ms", "",
                  "| server | API | conc | req/s | p50 ms | p99 ms | errors |",
                  "|---|---|---|---|---|---|---|"]
        for peer in peers + ["baton"]:
            for api in ("REST", "gRPC"):
                if peer == "baton" and api == "REST" and (mname, peer, "gRPC", 1) in results \
                        and lines[-1].startswith(f"| {NAMES['baton']} | gRPC"):
                    continue
                for c in (1, 16, 64):
                    r = results.get((mname, peer, api, c))
                    if r is None or (peer == "baton" and api == "REST" and any(
                            ln.startswith(f"| {NAMES[peer]} | REST | {c} |") and f"| {mname}" not
                            in ln for ln in [])):
                        continue
                    row = (f"| {NAMES[peer]} | {api} | {c} | {r['rps']:.0f} | {r['p50_ms']:.2f} "
                           f"| {r['p99_ms']:.2f} | {r['errors']} |")
                    if row not in lines:
                        lines.append(row)
        lines.append("")
        b = results.get((mname, "baton", "REST", 64))
        if b:
            lines += ["Ratios at concurrency 64 (baton REST req/s / peer req/s):", ""]
            for peer in ("naive", "ray", "constant"):
                r = results.get((mname, peer, "REST", 64))
                if r:
                    lines.append(f"- vs {NAMES[peer]}: **{b['rps'] / r['rps']:.2f}x**")
            b1 = results.get((mname, "baton", "REST", 1))
            if b1:
                lines.append(f"- concurrency-1 p50 overhead over the in-process call: "
                             f"**{b1['p50_ms'] - floor[mname]:.3f} ms**")
            lines.append("")
    if notes:
        lines += ["## Peers that did not run", ""] + [f"- {NAMES[k]}: {v}" for k, v in
                                                      notes.items()] + [""]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
