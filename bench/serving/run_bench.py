"""Serving benchmark: baton serve vs a naive Starlette wrapper, Ray Serve and the bare
HTTP ceiling, side by side in one run with one load generator (wrk), so the ratios hold
even on a shared 2-core machine. Writes docs/benchmarks-serving.md.

    .venv/bin/python bench/serving/run_bench.py [--seconds 5] [--rounds 5] [--skip-ray]
        [--penguins-base DIR] [--soak-seconds 120] [--concurrency 1,16,64] [--no-grpc]

A/B of two source trees (e.g. `git worktree add /tmp/old HEAD`), REST only, interleaved,
no report written: `--models mlp --peers baton --concurrency 64 --no-grpc --soak-seconds 0
--baton-trees old=/tmp/old,new=/tmp/new` serves each tree's code (PYTHONPATH=DIR) as
its own peer and prints every round's req/s and the per-round ratios to the first tree.

The penguins model is the default pipeline's own export: the script runs `baton run` once
in a temporary directory and serves the model it pushes (or `--penguins-base`, a model
base path pushed earlier). Then bench/serving/soak.py runs (`--soak-seconds`, 0 skips it)
and its results are a section of the report; a failed soak invariant makes the exit
status 1. Needs `wrk` (apt-get install wrk) and, for the peers, starlette, uvicorn,
ray[serve].
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
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY_FILE"), "r"); wrk.body = f:read("*a"); f:close()
"""
TREES: dict[str, str] = {}  # --baton-trees: peer "baton-<name>" -> source tree
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
    if kind == "baton" or kind in TREES:
        tree = TREES.get(kind)
        env = ENV if tree is None else dict(ENV, PYTHONPATH=tree)
        cfg = os.path.join(tmp, "batching.config")
        with open(cfg, "w") as f:
            f.write(BATCHING)
        pf = os.path.join(tmp, f"ports-{time.monotonic_ns()}.json")
        proc = subprocess.Popen([PY, "-m", "serving", "--model_name=m",
                                 f"--model_base_path={os.path.dirname(model_dir)}",
                                 "--bind_free_ports", f"--ports_file={pf}", "--enable_batching",
                                 f"--batching_parameters_file={cfg}"], env=env, cwd=tree,
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
              results: dict, mname: str, concs=(1, 16, 64)) -> None:
    """Every REST cell of the peers that are up, interleaved: for each concurrency, each
    round runs every peer once, so a change in the machine's background load hits all
    peers alike; a cell reports the median over the rounds of req/s, of p50 and of p99,
    and keeps every round's req/s (`runs`) for the per-round ratios (see ratio)."""
    for c in concs:
        runs: dict[str, list[dict]] = {p: [] for p in peers_up}
        for _ in range(rounds):
            for peer, (_, url, _) in peers_up.items():
                runs[peer].append(wrk(url, bodies[peer], lua, c, seconds))
        for peer, rs in runs.items():
            results[(mname, peer, "REST", c)] = r = {
                **{k: median([x[k] for x in rs]) for k in ("rps", "p50_ms", "p99_ms")},
                "errors": sum(x["errors"] for x in rs), "runs": [x["rps"] for x in rs],
                "group": ",".join(peers_up)}
            print(f"   {peer:8s} c={c:<3} {r}", flush=True)


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
    results, notes, floor = {}, {}, {}
    for mname, (mdir, body) in models.items():
        floor[mname] = signature_p50(mdir, body)
        bf = os.path.join(tmp, f"{mname}.json")
        with open(bf, "w") as f:
            json.dump(body, f)
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
                    except Exception as e:  # noqa: BLE001
                        notes[peer] = f"failed on {mname}: {e!r}"
                        print(f"   {peer} failed: {e!r}", flush=True)
                        stop(up.pop(peer)[0])
                if not up:
                    continue
                run_cells(up, {p: bf for p in up}, lua, a.seconds, a.rounds, results, mname,
                          concs)
                if "baton" in up and not a.no_grpc:
                    gport = up["baton"][2]
                    for c in concs:
                        out = subprocess.run([PY, os.path.join(HERE, "grpc_load.py"), str(gport),
                                              "m", json.dumps(body), str(c), str(a.seconds)],
                                             capture_output=True, text=True, env=ENV, check=True)
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        results[(mname, "baton", "gRPC", c)] = r
                        print(f"   baton    gRPC c={c:<3} {r}", flush=True)
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


NAMES = {"baton": "baton serve (batching)", "naive": "naive Starlette+uvicorn",
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
             "a grpc.aio closed-loop generator in its own process. baton serve runs with "
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
                        lines.append(f"| {NAMES[peer]} | {api} | {c} | {r['rps']:.0f} | "
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
              "the throughput ratios compare REST servers, so only the latency goal is "
              "checked for gRPC too):", ""]
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
