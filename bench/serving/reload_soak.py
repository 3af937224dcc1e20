"""Hot-reload soak: does `baton serve` hold its memory over hundreds of new versions?

TF Serving's users report memory that grows on every hot reload until Kubernetes kills
the pod (tensorflow/serving 1664, 2017). This pushes a new version CYCLES times into a
running `baton serve` (copied beside the base path, then renamed into it, as a push
does), waits until the new version answers and the old one is unloaded, deletes the old
directory, and reads the server's RSS after every cycle.

    .venv/bin/python bench/serving/reload_soak.py [--cycles 200] [--model tf2,tf1]
        [--json OUT]

`tf2`: a penguins-like Keras SavedModel (tests/serving/fixture_models.py), loaded by
tf.saved_model.load; `tf1`: TF Serving's own saved_model_half_plus_three, which loads in
a TF1 Session (session_servable.py). Passes when the RSS after the last cycle is within
5% of the RSS after the first; exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "serving")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
TESTDATA = os.path.join(ROOT, "tests", "serving", "testdata", "tf_serving")
LIMIT = 0.05


def _get(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def _source(kind: str, tmp: str) -> tuple[str, dict]:
    """(a version directory to copy, a request its model answers)."""
    if kind == "tf1":
        return (os.path.join(TESTDATA, "saved_model_half_plus_three", "00000123"),
                {"instances": [[1.0], [2.0]]})
    import fixture_models as fm

    export_dir = fm.build_penguins(os.path.join(tmp, "penguins"), bias=1.0)  # a version dir
    return export_dir, {"instances": [fm.PENGUIN] * 2}


def run(kind: str, cycles: int) -> dict:
    import psutil

    tmp = tempfile.mkdtemp(prefix=f"reload-{kind}-")
    src, request = _source(kind, tmp)
    base = os.path.join(tmp, "model")
    shutil.copytree(src, os.path.join(base, "1"))
    ports = os.path.join(tmp, "ports.json")
    log = open(os.path.join(tmp, "server.log"), "wb")  # noqa: SIM115 - the server's lifetime
    proc = subprocess.Popen([sys.executable, "-m", "baton.serving", "--model_name=m",
                             f"--model_base_path={base}", "--bind_free_ports",
                             f"--ports_file={ports}", "--file_system_poll_wait_seconds=0.1"],
                            stdout=log, stderr=log)
    rss: list[int] = []
    t0 = time.monotonic()
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ports):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start; see {log.name}")
            time.sleep(0.05)
        with open(ports) as f:
            rest = json.load(f)["rest"]
        url = f"http://127.0.0.1:{rest}/v1/models/m"
        server = psutil.Process(proc.pid)
        for v in range(2, cycles + 2):
            staging = os.path.join(tmp, f"staging-{v}")
            shutil.copytree(src, staging)
            os.rename(staging, os.path.join(base, str(v)))
            deadline = time.monotonic() + 120
            while True:  # the new version serving, the previous one unloaded
                status, body = _get(url)
                states = {int(s["version"]): s["state"]
                          for s in body.get("model_version_status", [])}
                if states.get(v) == "AVAILABLE" and states.get(v - 1) in (None, "END"):
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"version {v} never took over: {states}")
                time.sleep(0.05)
            for _ in range(5):
                status, body = _get(url + ":predict", request)
                if status != 200:
                    raise RuntimeError(f"version {v} answered {status}: {body}")
            shutil.rmtree(os.path.join(base, str(v - 1)))
            rss.append(server.memory_info().rss)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    first, last = rss[0], rss[-1]
    growth = (last - first) / first
    return {"model": kind, "cycles": cycles, "rss_first_mb": round(first / 2 ** 20, 1),
            "rss_last_mb": round(last / 2 ** 20, 1), "rss_max_mb": round(max(rss) / 2 ** 20, 1),
            "growth": round(growth, 4), "ok": growth <= LIMIT,
            "seconds": round(time.monotonic() - t0, 1),
            "rss_every_10_mb": [round(r / 2 ** 20, 1) for r in rss[::10]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--model", default="tf2,tf1", help="comma-separated: tf2, tf1")
    ap.add_argument("--json", default="", help="write the results here too")
    a = ap.parse_args(argv)
    results = []
    for kind in a.model.split(","):
        r = run(kind, a.cycles)
        print(json.dumps(r), flush=True)
        results.append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
