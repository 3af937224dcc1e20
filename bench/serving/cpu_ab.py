"""Server CPU time per request, two source trees side by side (an A/B that load survives).

On the shared 2-core machine req/s of one cell swings 4x between runs, so an A/B of
req/s says little. The serving process's own CPU time (user + sys, /proc/<pid>/stat)
per completed request moves far less with other processes' load. Both trees serve the
same model at once (PYTHONPATH=<tree>, batching as run_bench.py) and are driven in turn
every round: wrk for REST, h2load for gRPC, at each concurrency. Prints every run and a
table: median CPU us per request and req/s for each tree, with the median of the
per-round ratios (CPU old/new: above 1, the new tree is cheaper).

    python bench/serving/cpu_ab.py --trees old=/tmp/old,new=/tmp/new \\
        --model mlp=<base path>:<body.json> --model penguins=<base>:<body.json>
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_bench import BATCHING, LUA, PREDICT_PATH, grpc_request  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(tree: str, base: str, tmp: str, tag: str) -> tuple[subprocess.Popen, dict]:
    ports = os.path.join(tmp, f"ports-{tag}.json")
    cfg = os.path.join(tmp, "batching.config")
    with open(cfg, "w") as f:
        f.write(BATCHING)
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton.serving", "--model_name=m", f"--model_base_path={base}",
         "--bind_free_ports", f"--ports_file={ports}", "--enable_batching",
         f"--batching_parameters_file={cfg}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="3"))
    deadline = time.monotonic() + 300
    while not os.path.exists(ports):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the server of {tree} did not start")
        time.sleep(0.2)
    time.sleep(0.3)
    with open(ports) as f:
        return proc, json.load(f)


def wrk(port: int, body: str, lua: str, conc: int, secs: int) -> tuple[int, float]:
    out = subprocess.run(["wrk", "-t1", f"-c{conc}", f"-d{secs}s", "-s", lua,
                          f"http://127.0.0.1:{port}/v1/models/m:predict"],
                         env=dict(os.environ, BODY_FILE=body), capture_output=True,
                         text=True, check=True).stdout
    return (int(re.search(r"(\d+) requests in", out).group(1)),
            float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)))


def h2load(port: int, body: str, conc: int, secs: int) -> tuple[int, float]:
    out = subprocess.run(["h2load", "-t1", f"-c{conc}", "-m1", f"-D{secs}", "-H",
                          "content-type: application/grpc", "-H", "te: trailers", "-d", body,
                          f"http://127.0.0.1:{port}{PREDICT_PATH}"],
                         capture_output=True, text=True, check=True).stdout
    ok = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    return int(ok.group(1)), float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s",
                                             out).group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", required=True, help="name=DIR,name=DIR (the first is the base)")
    ap.add_argument("--model", action="append", required=True,
                    help="name=<base path>:<REST body .json> (one row)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,64")
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.trees.split(","))
    first, second = list(trees)[:2]
    concs = [int(c) for c in a.concurrency.split(",")]
    res: dict[tuple, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        lua = os.path.join(tmp, "post.lua")
        with open(lua, "w") as f:
            f.write(LUA)
        for spec in a.model:
            mname, _, rest = spec.partition("=")
            base, body = rest.rsplit(":", 1)
            with open(body) as f:
                req = grpc_request(json.load(f)).SerializeToString()
            gbody = os.path.join(tmp, f"{mname}.grpc")
            with open(gbody, "wb") as f:
                f.write(b"\x00" + len(req).to_bytes(4, "big") + req)
            up = {}
            try:
                for t, tree in trees.items():
                    up[t] = start(os.path.abspath(tree), base, tmp, t)
                for _, ports in up.values():  # warm up
                    wrk(ports["rest"], body, lua, 16, 2)
                    h2load(ports["grpc"], gbody, 16, 2)
                for _ in range(a.rounds):
                    for conc in concs:
                        for api in ("REST", "gRPC"):
                            for t, (proc, ports) in up.items():
                                c0 = cpu_seconds(proc.pid)
                                n, rps = (wrk(ports["rest"], body, lua, conc, a.seconds)
                                          if api == "REST"
                                          else h2load(ports["grpc"], gbody, conc, a.seconds))
                                us = (cpu_seconds(proc.pid) - c0) / max(n, 1) * 1e6
                                res.setdefault((mname, api, conc, t), []).append((us, rps))
                                print(f"{mname} {api} c={conc} {t}: {us:.0f} us CPU/request, "
                                      f"{rps:.0f} req/s", flush=True)
            finally:
                for proc, _ in up.values():
                    proc.terminate()
                    proc.wait(30)
    print(f"\n| model | API | concurrency | CPU us/request {first} | {second} | "
          f"{first}/{second} | req/s {first} | {second} | {second}/{first} |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (mname, api, conc, t), new in sorted(res.items()):
        if t != second:
            continue
        old = res[(mname, api, conc, first)]
        cpu_ratio = statistics.median(o[0] / n[0] for n, o in zip(new, old, strict=True))
        rps_ratio = statistics.median(n[1] / o[1] for n, o in zip(new, old, strict=True))
        print(f"| {mname} | {api} | {conc} | {statistics.median(x[0] for x in old):.0f} | "
              f"{statistics.median(x[0] for x in new):.0f} | {cpu_ratio:.2f} | "
              f"{statistics.median(x[1] for x in old):.0f} | "
              f"{statistics.median(x[1] for x in new):.0f} | {rps_ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
