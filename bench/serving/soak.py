"""Soak: `baton serve` under steady mixed REST + gRPC load for minutes, while ten new
versions are pushed (one corrupt, one half-copied and then completed), a REST fuzz pass
runs, and SIGTERM ends it with requests in flight.

    .venv/bin/python bench/serving/soak.py [--seconds 120] [--concurrency 32] [--json OUT]

Reports requests, failures, the versions that answered, p50/p99 and the server's RSS,
and exits 1 if an invariant fails:

- no failed request before SIGTERM (an error status, a broken connection, a timeout or a
  wrong answer); after SIGTERM only refusals (connection refused/reset, REST 503
  "Server is shutting down", gRPC UNAVAILABLE, or CANCELLED for calls grpc had not yet
  handed to a handler), and at least one request in flight at SIGTERM still answered
  200; the server exits 0
- every fuzz body answered 200 or 4xx `{"error": ...}`, never 5xx or a dropped connection
- the corrupt version never answers (gRPC responses name their version; a REST or gRPC
  request for that version explicitly is 404 / NOT_FOUND every time); the half-copied
  version and the last one do answer once complete
- a gRPC answer's class is the one its version's model gives
- no request-free gap longer than 2 s while versions change (availability)
- RSS steady once pushes are over (no growth beyond 10% + 32 MB from then to the end)

Versions are penguins-like fixtures (tests/serving/fixture_models.py) whose bias makes
each version's answer recognisable. Load runs in two worker processes of this script
(`--worker REST|gRPC`: one asyncio loop each, keep-alive HTTP/1.1 connections or grpc.aio),
stopped by closing their stdin; the request rate is the clients', not the server's
ceiling: this measures behaviour over time, not throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "serving")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODEL = "penguins"
CORRUPT, HALF, LAST = 4, 7, 11
# answer (class id) of each fixture bias: bias b adds 10 to class b % 3
EXPECTED_CLASS = {1: 1, 2: 2, 3: 0}
# What a request may get once SIGTERM has arrived: the listener is closed (refused), a
# kept-alive connection is closed or answered 503, gRPC is UNAVAILABLE; and CANCELLED for
# gRPC calls grpc core had received but not yet handed to the server (its shutdown cancels
# calls no handler has picked up; that every handler that started finishes is
# tests/serving/test_reliability.py::test_stop_under_grpc_load_finishes_every_started_call).
REFUSALS = {"refused", "reset", "503", "UNAVAILABLE", "CANCELLED"}


def bias_of_version(v: int) -> int:
    return 1 + v % 3 if v > 1 else 1


class Load:
    """Closed-loop clients of one API on one asyncio loop: the body of a worker process.

    Records, for the parent to judge: each answer's end time and latency, the (version,
    class) of gRPC answers and the class of REST ones, and every error with its time.
    Clocks: time.monotonic() is system-wide on Linux, so the parent compares these
    times with its own (when it sent SIGTERM).
    """

    def __init__(self, api: str, port: int, clients: int):
        self.api, self.port, self.clients = api, port, clients
        self.t_end, self.lat = array("d"), array("d")
        self.answers: dict[str, int] = {}  # "version:class" (gRPC) or "class" (REST)
        self.errors: list[tuple[float, str, str]] = []  # (t, kind, detail)
        self.stop = asyncio.Event()

    def _ok(self, t0: float, t1: float, answer: str) -> None:
        self.t_end.append(t1)
        self.lat.append(t1 - t0)
        self.answers[answer] = self.answers.get(answer, 0) + 1

    def _err(self, kind: str, detail: str) -> None:
        self.errors.append((time.monotonic(), kind, detail[:200]))

    async def rest_client(self) -> None:
        import fixture_models as fm

        body = json.dumps({"instances": [fm.PENGUIN]}).encode()
        req = (b"POST /v1/models/%s:predict HTTP/1.1\r\nHost: soak\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (MODEL.encode(), len(body), body))
        reader = writer = None
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                assert reader is not None
                writer.write(req)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split(" ")[1])
                hdrs = {k.strip().lower(): v.strip() for k, _, v in
                        (ln.partition(":") for ln in lines[1:] if ln)}
                data = await asyncio.wait_for(
                    reader.readexactly(int(hdrs.get("content-length", 0))), 30)
                t1 = time.monotonic()
                if hdrs.get("connection", "").lower() == "close":
                    writer.close()
                    reader = writer = None
                if status != 200:
                    shutting = status == 503 and b"shutting down" in data
                    self._err("503" if shutting else str(status),
                              data.decode("utf-8", "replace"))
                    await asyncio.sleep(0.02)
                    continue
                self._ok(t0, t1, str(json.loads(data)["predictions"][0]["class_ids"]))
            except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError,
                    asyncio.IncompleteReadError) as e:
                self._err("refused" if isinstance(e, ConnectionRefusedError) else "reset",
                          repr(e))
                if writer is not None:
                    writer.close()
                reader = writer = None
                await asyncio.sleep(0.02)
            except (TimeoutError, OSError, ValueError, KeyError, IndexError) as e:
                self._err(type(e).__name__, repr(e))
                if writer is not None:
                    writer.close()
                reader = writer = None
                await asyncio.sleep(0.02)
        if writer is not None:
            writer.close()

    async def grpc_client(self, stub, req) -> None:
        import grpc

        from baton.serving.tensor_proto import to_ndarray

        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                r = await stub.Predict(req, timeout=30)
            except grpc.RpcError as e:
                self._err(e.code().name, str(e.details()))
                await asyncio.sleep(0.02)
                continue
            t1 = time.monotonic()
            cls = int(to_ndarray(r.outputs["class_ids"])[0])
            self._ok(t0, t1, f"{r.model_spec.version.value}:{cls}")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        fd = sys.stdin.fileno()

        def eof() -> None:  # the parent closed our stdin: finish the requests in flight
            loop.remove_reader(fd)
            self.stop.set()

        loop.add_reader(fd, eof)
        if self.api == "REST":
            import fixture_models  # noqa: F401 - before READY, not on the first request

            print("READY", flush=True)
            await asyncio.gather(*[self.rest_client() for _ in range(self.clients)])
            return
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        ch = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        req = predict_request()
        print("READY", flush=True)
        await asyncio.gather(*[self.grpc_client(stub, req) for _ in range(self.clients)])
        await ch.close()

    def dump(self, path: str) -> None:
        with open(path + ".bin", "wb") as f:
            self.t_end.tofile(f)
            self.lat.tofile(f)
        with open(path, "w") as f:
            json.dump({"n": len(self.t_end), "answers": self.answers, "errors": self.errors}, f)


def load_results(path: str) -> tuple[array, array, dict]:
    with open(path) as f:
        meta = json.load(f)
    t_end, lat = array("d"), array("d")
    with open(path + ".bin", "rb") as f:
        t_end.fromfile(f, meta["n"])
        lat.fromfile(f, meta["n"])
    return t_end, lat, meta


def worker(api: str, port: int, clients: int, out: str) -> int:
    load = Load(api, port, clients)
    asyncio.run(load.run())
    load.dump(out)
    return 0


def predict_request(version: int | None = None):
    import fixture_models as fm
    import numpy as np
    from tensorflow_serving.apis import predict_pb2

    from baton.serving.tensor_proto import from_ndarray

    req = predict_pb2.PredictRequest()
    req.model_spec.name = MODEL
    if version is not None:
        req.model_spec.version.value = version
    for k, v in fm.PENGUIN.items():
        from_ndarray(np.array([v], dtype=object if isinstance(v, str) else np.float32),
                     req.inputs[k])
    return req


def http(port: int, method: str, path: str, raw: bytes | None = None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=raw, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def fuzz_pass(port: int, out: dict) -> None:
    """Every fuzz body on every path; out['fuzz'] = requests, out['fuzz_failures'] = [...]."""
    import fixture_models as fm

    from baton.serving.testing import fuzz_bodies

    paths = [f"/v1/models/{MODEL}:predict", f"/v1/models/{MODEL}/versions/1:predict",
             f"/v1/models/{MODEL}:classify", f"/v1/models/{MODEL}:regress",
             f"/v1/models/{MODEL}/labels/stable:predict", "/v1/models/nope:predict",
             "/v1/models/..%2F..%2Fetc%2Fpasswd:predict", "/"]
    n, failures = 0, []
    for raw in fuzz_bodies(random.Random(11), fm.PENGUIN):
        for path in paths:
            n += 1
            try:
                status, body = http(port, "POST", path, raw)
            except OSError as e:
                failures.append(f"{path}: {e!r}")
                continue
            if status == 200:
                continue
            try:
                ok = 400 <= status < 500 and set(json.loads(body)) == {"error"}
            except ValueError:
                ok = False
            if not ok:
                failures.append(f"{path} {raw[:40]!r}: {status} {body[:120]!r}")
    out["fuzz"], out["fuzz_failures"] = n, failures


def probe_corrupt(rest_port: int, grpc_port: int) -> list[str]:
    """The corrupt version asked for by number: 404 / NOT_FOUND, never an answer."""
    import fixture_models as fm
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    bad = []
    status, body = http(rest_port, "POST", f"/v1/models/{MODEL}/versions/{CORRUPT}:predict",
                        json.dumps({"instances": [fm.PENGUIN]}).encode())
    if status != 404:
        bad.append(f"REST version {CORRUPT}: {status} {body[:120]!r}")
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        try:
            prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
                predict_request(CORRUPT), timeout=30)
            bad.append(f"gRPC version {CORRUPT} answered")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:
                bad.append(f"gRPC version {CORRUPT}: {e.code().name} {e.details()}")
    return bad


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(len(values) * q))] * 1e3


def start_worker(api: str, port: int, clients: int, out: str) -> subprocess.Popen:
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", api,
                             "--port", str(port), "--clients", str(clients), "--out", out],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # READY once its imports are done and clients built
    if b"READY" not in line:
        proc.kill()
        raise RuntimeError(f"{api} load worker did not start: {line!r}")
    return proc


def stop_worker(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.close()  # EOF: the clients finish their request in flight and stop
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def soak(seconds: float, concurrency: int, poll: float, tmp: str) -> dict:
    import fixture_models as fm
    import psutil

    from baton.serving.client_demo import ServerProcess
    from baton.serving.testing import corrupt, finish_copy, half_copy, install

    t_build = time.monotonic()
    src = {b: fm.build_penguins(os.path.join(tmp, "built", f"b{b}"), bias=float(b))
           for b in (1, 2, 3)}
    base = os.path.join(tmp, "models", MODEL)
    install(src[1], base, 1)
    biases = {1: 1}  # version -> bias, once complete on disk
    print(f"soak: fixtures built in {time.monotonic() - t_build:.1f}s; serving {base}",
          flush=True)
    server = ServerProcess(MODEL, base, ["--enable_batching",
                                         f"--file_system_poll_wait_seconds={poll}"]).start()
    assert server.proc is not None and server.rest_port and server.grpc_port
    proc = psutil.Process(server.proc.pid)
    n_rest = concurrency // 2
    outs = {"REST": os.path.join(tmp, "rest.json"), "gRPC": os.path.join(tmp, "grpc.json")}
    workers: dict[str, subprocess.Popen] = {}
    rss: list[tuple[float, int]] = []
    pushes: list[tuple[float, int, str]] = []
    side: dict = {}
    probe_failures: list[str] = []
    exit_code = None
    try:
        workers["REST"] = start_worker("REST", server.rest_port, n_rest, outs["REST"])
        workers["gRPC"] = start_worker("gRPC", server.grpc_port, concurrency - n_rest,
                                       outs["gRPC"])
        t0 = time.monotonic()
        print(f"soak: {concurrency} clients for {seconds:g}s", flush=True)
        span = 0.6 * seconds  # pushes in the first 60%, steady state after
        schedule = {v: t0 + 2.0 + (v - 2) * (span - 2.0) / 9 for v in range(2, LAST + 1)}
        fuzz_at = t0 + 0.3 * seconds
        fuzz_thread = None
        next_probe = t0 + 1.0
        end = t0 + seconds
        while time.monotonic() < end:
            now = time.monotonic()
            rss.append((now - t0, proc.memory_info().rss))
            for v, at in list(schedule.items()):
                if now >= at:
                    del schedule[v]
                    b = bias_of_version(v)
                    if v == CORRUPT:
                        corrupt(src[b], base, v)
                        pushes.append((now - t0, v, "corrupt"))
                    elif v == HALF:
                        dst = os.path.join(base, str(v))
                        half_copy(src[b], dst)
                        pushes.append((now - t0, v, "half-copied"))
                        time.sleep(max(1.0, 5 * poll))  # several polls see it half-copied
                        biases[v] = b
                        finish_copy(src[b], dst)
                        pushes.append((time.monotonic() - t0, v, "copy completed"))
                    else:
                        biases[v] = b
                        install(src[b], base, v)
                        pushes.append((now - t0, v, "pushed"))
            if fuzz_thread is None and now >= fuzz_at:
                fuzz_thread = threading.Thread(target=fuzz_pass, args=(server.rest_port, side))
                fuzz_thread.start()
            if now >= next_probe:
                probe_failures += probe_corrupt(server.rest_port, server.grpc_port)
                next_probe = now + 2.0
            time.sleep(min(0.5, max(0.0, end - time.monotonic())))
        if fuzz_thread is not None:
            fuzz_thread.join(120)
        status = json.loads(http(server.rest_port, "GET", f"/v1/models/{MODEL}")[1])
        rss.append((time.monotonic() - t0, proc.memory_info().rss))
        # SIGTERM with the load still running: in-flight requests finish, new ones refused
        sigterm = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        try:
            exit_code = server.proc.wait(60)
        except subprocess.TimeoutExpired:
            exit_code = None  # a failure below; server.stop() kills it
        stopped_at = time.monotonic()
        time.sleep(0.3)
    finally:
        for w in workers.values():
            stop_worker(w)
        server.stop()
    res = {api: load_results(out) for api, out in outs.items()}
    errors = [(t, api, kind, d) for api, (_, _, meta) in res.items()
              for t, kind, d in meta["errors"]]
    errors.sort()
    before = [e for e in errors if e[0] < sigterm]
    after = [e for e in errors if e[0] >= sigterm]
    bad_after = [e for e in after if e[2] not in REFUSALS]
    # every gRPC answer names its version: its class must be that version's model's
    versions: dict[int, int] = {}
    wrong = []
    for key, n in res["gRPC"][2]["answers"].items():
        v, cls = (int(x) for x in key.split(":"))
        versions[v] = versions.get(v, 0) + n
        if v not in biases or EXPECTED_CLASS[biases[v]] != cls:
            wrong.append(f"version {v} answered class {cls} ({n} times)")
    rest_classes = res["REST"][2]["answers"]
    wrong += [f"REST class {c}" for c in rest_classes
              if int(c) not in {EXPECTED_CLASS[b] for b in biases.values()}]
    ends = sorted(t for api in res for t in res[api][0])
    served = [t for t in ends if t0 <= t < sigterm]
    gaps = [(b - a, b) for a, b in zip(served, served[1:], strict=False)] or [(0.0, t0)]
    max_gap, gap_at = max(gaps)
    ok_after = sum(t >= sigterm for t in ends)
    lat = {api: sorted(res[api][1]) for api in res}
    all_lat = sorted(lat["REST"] + lat["gRPC"])
    last_push = max(t for t, _, _ in pushes) if pushes else 0.0
    steady = [r for t, r in rss if t >= last_push + 5.0] or [rss[-1][1]]
    states = {int(x["version"]): x["state"] for x in status.get("model_version_status", [])}
    mb = 1024 * 1024
    ok = {api: len(res[api][0]) for api in res}
    summary = {
        "seconds": seconds, "concurrency": concurrency, "poll_seconds": poll,
        "requests": {api: ok[api] + sum(e[1] == api for e in errors) for api in res},
        "ok": ok,
        "failures": len(before) + len(bad_after) + len(wrong),
        "failure_examples": wrong[:5] + [f"{api} {kind} at {t - sigterm:+.2f}s from SIGTERM: "
                                         f"{d}" for t, api, kind, d in (before + bad_after)[:10]],
        "refused_after_sigterm": len(after) - len(bad_after),
        "refused_kinds": sorted({f"{e[1]} {e[2]}" for e in after if e[2] in REFUSALS}),
        "ok_after_sigterm": ok_after,
        "exit_code": exit_code,
        "shutdown_seconds": round(stopped_at - sigterm, 2),
        "versions_answered_grpc": {str(k): v for k, v in sorted(versions.items())},
        "rest_answers_by_class": dict(sorted(rest_classes.items())),
        "pushes": [{"t": round(t, 1), "version": v, "what": w} for t, v, w in pushes],
        "status_at_end": {str(k): v for k, v in sorted(states.items())},
        "fuzz_requests": side.get("fuzz", 0),
        "fuzz_failures": side.get("fuzz_failures", ["fuzz pass did not run"]),
        "corrupt_probe_failures": probe_failures,
        "max_gap_ms": round(max_gap * 1e3, 1),
        "max_gap_ended_at": round(gap_at - t0, 1),
        "latency_ms": {
            "all": {"p50": percentile(all_lat, 0.5), "p99": percentile(all_lat, 0.99)},
            "REST": {"p50": percentile(lat["REST"], 0.5), "p99": percentile(lat["REST"], 0.99)},
            "gRPC": {"p50": percentile(lat["gRPC"], 0.5), "p99": percentile(lat["gRPC"], 0.99)},
        },
        "rps": round(len(served) / (sigterm - t0), 1),
        "rss_mb": {"start": round(next(r for t, r in rss if t >= 1.5 or t == rss[-1][0]) / mb,
                                  1),
                   "after_pushes": round(steady[0] / mb, 1),
                   "end": round(rss[-1][1] / mb, 1),
                   "peak": round(max(r for _, r in rss) / mb, 1)},
    }
    checks = {
        "no failures before SIGTERM, only refusals after": summary["failures"] == 0,
        "in-flight requests answered after SIGTERM": ok_after > 0,
        "server exited 0 after SIGTERM": exit_code == 0,
        "fuzz: only 200 or 4xx {error}": side.get("fuzz", 0) > 0 and not summary["fuzz_failures"],
        f"corrupt version {CORRUPT} never answered": CORRUPT not in versions
        and not probe_failures,
        f"half-copied version {HALF} answered once complete": HALF in versions,
        f"last version {LAST} answered": LAST in versions,
        "no gap > 2 s without an answer": max_gap < 2.0,
        "RSS steady after the pushes (<= +10% +32 MB)":
            steady[-1] <= steady[0] * 1.10 + 32 * mb,
    }
    summary["checks"] = checks
    summary["ok_overall"] = all(checks.values())
    return summary


def markdown(s: dict) -> list[str]:
    """The soak section of docs/benchmarks-serving.md."""
    lat, rss = s["latency_ms"], s["rss_mb"]
    req = s["requests"]
    lines = [
        "## Soak: versions pushed under load, fuzzing, SIGTERM", "",
        f"`bench/serving/soak.py --seconds {s['seconds']:g}`: `baton serve --enable_batching "
        f"--file_system_poll_wait_seconds={s['poll_seconds']:g}` on a penguins-like fixture "
        f"model, {s['concurrency']} closed-loop clients (half REST keep-alive, half gRPC "
        "grpc.aio; each half in its own Python process, so the rate is the clients', not the "
        "server's ceiling), on the same 2 shared cores as the server. During the "
        f"run: versions 2-{LAST} pushed (version {CORRUPT} with a corrupt saved_model.pb, "
        f"version {HALF} half-copied then completed), one REST fuzz pass, the corrupt version "
        "requested by number every 2 s; then SIGTERM with the load still running.", "",
        "| | |", "|---|---|",
        f"| requests | {req['REST'] + req['gRPC']} ({req['REST']} REST, {req['gRPC']} gRPC; "
        f"{s['rps']:.0f} req/s) |",
        f"| failures | **{s['failures']}** |",
        f"| refused after SIGTERM (expected) | {s['refused_after_sigterm']} "
        f"({', '.join(s['refused_kinds']) or '-'}) |",
        f"| answered 200 after SIGTERM (in flight) | {s['ok_after_sigterm']} |",
        f"| exit code / shutdown time | {s['exit_code']} / {s['shutdown_seconds']:g} s |",
        f"| versions that answered (gRPC) | "
        f"{', '.join(s['versions_answered_grpc']) or '-'} |",
        f"| corrupt version {CORRUPT} answered | "
        f"{'never' if s['checks'][f'corrupt version {CORRUPT} never answered'] else 'YES'} "
        f"(status at end: {s['status_at_end'].get(str(CORRUPT), 'absent')}) |",
        f"| fuzz requests / failures | {s['fuzz_requests']} / {len(s['fuzz_failures'])} |",
        f"| latency p50 / p99 (all) | {lat['all']['p50']:.2f} / {lat['all']['p99']:.2f} ms |",
        f"| REST p50 / p99 | {lat['REST']['p50']:.2f} / {lat['REST']['p99']:.2f} ms |",
        f"| gRPC p50 / p99 | {lat['gRPC']['p50']:.2f} / {lat['gRPC']['p99']:.2f} ms |",
        f"| longest gap without an answer | {s['max_gap_ms']:g} ms |",
        f"| server RSS start / after pushes / end (peak) | {rss['start']:g} / "
        f"{rss['after_pushes']:g} / {rss['end']:g} MB ({rss['peak']:g}) |",
        "",
        "Invariants: " + "; ".join(f"{k}: {'ok' if v else '**FAILED**'}"
                                   for k, v in s["checks"].items()) + ".",
        "",
    ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--poll", type=float, default=0.2,
                    help="--file_system_poll_wait_seconds of the server")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--worker", choices=["REST", "gRPC"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--clients", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.port, a.clients, a.out)
    tmp = tempfile.mkdtemp(prefix="baton-soak-")
    try:
        summary = soak(a.seconds, a.concurrency, a.poll, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(summary, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    for k, v in summary["checks"].items():
        print(f"{'ok    ' if v else 'FAILED'} {k}")
    return 0 if summary["ok_overall"] else 1


if __name__ == "__main__":
    sys.exit(main())
