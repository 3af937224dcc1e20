"""TF1 Session path vs TF2 restored-function path, on the same graph, through the batcher.

TF Serving's upstream saved_model_half_plus_two_cpu is a TF1 SavedModel that both of
`baton serve`'s loaders read: tf.saved_model.load (a restored function per signature,
called flat) and the TF1 Session over the MetaGraph (session_servable.py, used where the
first cannot load a model). Both are loaded here and driven the way the server drives a
signature: closed-loop clients submit requests to the dynamic batcher (BatchScheduler,
the server's default thread count), which runs the signature; throughput is completed
requests per second. Same graph, same requests, same batcher: the difference is the call.

    .venv/bin/python bench/serving/bench_tf1_session.py [--seconds 5] [--clients 1,16]
        [--rounds 3] [--json OUT]

Reports req/s per path and client count (the best of `--rounds`, alternating paths, so
both see the same machine load) and the ratio session / restored function.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
MODEL = os.path.join(ROOT, "tests", "serving", "testdata", "tf_serving",
                     "saved_model_half_plus_two_cpu", "00000123")


def signatures():
    """{"tf2": restored-function signature, "tf1": Session signature} of one graph."""
    from baton.serving.loader import load_servable
    from baton.serving.servable import meta_graph_for, read_saved_model_proto
    from baton.serving.session_servable import load_session_signatures

    tf2 = load_servable("hp2", 123, MODEL)
    assert tf2.kind == "saved_model"
    defs = dict(meta_graph_for(read_saved_model_proto(MODEL), ("serve",), MODEL).signature_def)
    keep, sigs = load_session_signatures(MODEL, ("serve",), defs)
    return {"tf2": tf2.signature("serving_default"), "tf1": sigs["serving_default"]}, keep


def drive(sig, clients: int, seconds: float) -> float:
    """Requests per second of `clients` closed-loop clients through a BatchScheduler."""
    import numpy as np

    from baton.serving.batcher import BatchScheduler, Task
    from baton.serving.config import BatchingOptions

    sched = BatchScheduler(BatchingOptions(num_batch_threads=min(4, os.cpu_count() or 1)))
    feeds = {"x": np.array([[2.0]], np.float32)}
    stop = threading.Event()
    counts = [0] * clients
    errors: list = []

    def client(i: int) -> None:
        done = threading.Event()

        def finished(out, err):
            if err is not None:
                errors.append(err)
            done.set()

        while not stop.is_set():
            done.clear()
            sched.submit(Task(sig, feeds, finished))
            done.wait()
            counts[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for _ in range(50):  # warm up both paths' first calls
        sig(feeds)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    sched.close()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests: {errors[0]}")
    return sum(counts) / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    sigs, _keep = signatures()
    rows = []
    for clients in (int(c) for c in a.clients.split(",")):
        best = {"tf2": 0.0, "tf1": 0.0}
        for _ in range(a.rounds):
            for path in ("tf2", "tf1"):
                best[path] = max(best[path], drive(sigs[path], clients, a.seconds))
        row = {"clients": clients, "tf2_req_s": round(best["tf2"]),
               "tf1_session_req_s": round(best["tf1"]),
               "ratio": round(best["tf1"] / best["tf2"], 3)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    load = os.getloadavg()
    print(json.dumps({"loadavg": [round(x, 1) for x in load]}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "loadavg": load}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
