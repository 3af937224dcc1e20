"""Rounds per minute at 8 clients: Baton's federation (TLS + node authentication, and the
`insecure: true` rehearsal) beside Flower's own simulation engine running the same ClientApp.

Every case is a fresh subprocess on the same rows (the synthetic table of run_bench.py, iid over
8 clients, MLP [16], batch 32, 1 local epoch) and the same ServerApp and ClientApp
(pipeline.federated.flower_server / flower_client). A round's seconds are the ServerApp's own
round records (`rounds.jsonl`: from the start of a round's training to the end of its
evaluation), so the three sides are timed the same way; setup and the federated transform are
not in them.

- `deployment`: the federated stage as `baton run` runs it: a SuperLink and 8 SuperNodes as
  real processes on 127.0.0.1 (`--extra '{"insecure": true}'` for the plaintext rehearsal);
- `simulation`: Flower 1.42's simulation engine (`flwr.simulation.run_simulation`, its Ray
  backend, Flower's fastest documented path for many clients on one machine) with 8 virtual
  SuperNodes; the ClientApp is Baton's, wrapped only to hand each virtual node the data
  directory of its partition (`data-dir`, which a SuperNode gets from `--node-config`).

`python bench/federated/bench_rounds.py --label after [--rounds 3] [--cases a,b]` appends the
cases' results under `label` to bench/federated/results/rounds.json; `legacy` is the stage before
this change, run from an export of that commit on PYTHONPATH (`git archive <commit> | tar -x
-C DIR`, `BATON_BENCH_BEFORE=DIR`), beside the others at the same load. `--report` re-renders the
rounds section of docs/benchmarks-federated.md from it. The simulation needs Ray 2.55.1
(flwr[simulation]'s pin, which the bench extra's ray[serve] 2.60 conflicts with), installed
beside the venv: `pip install --target DIR --no-deps ray==2.55.1 msgpack filelock` and
`BATON_BENCH_RAY_PATH=DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").is_dir() else sys.executable
RESULTS = ROOT / "bench" / "federated" / "results" / "rounds.json"
DOC = ROOT / "docs" / "benchmarks-federated.md"
BEGIN, END = "<!-- bench_rounds: begin -->", "<!-- bench_rounds: end -->"
ISSUE_BEFORE = 0.65  # rounds per minute at 8 clients, issue 33's figure for before
SYNTHETIC = {"source": "synthetic", "synthetic": {"rows": 20_000, "seed": 1, "numeric": 8,
                                                  "categorical": 2, "vocab_size": 20,
                                                  "classes": 3}}
CLIENTS = 8


def fed_config(rounds: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {"clients": CLIENTS, "partition": {"iid": True}, "rounds": rounds,
            "min_clients": 2, "round_timeout_s": 180, "batch_size": 32,
            "learning_rate": 0.01, "model_params": {"hidden_units": [16]}, **extra}


def _round_seconds(records: list[dict[str, Any]]) -> list[float]:
    return [float(r["seconds"]) for r in records if r.get("event") == "round"]


class TreeCPU:
    """CPU seconds used by this process's descendants (the federation's processes), sampled
    every 0.5 s: what a round costs in CPU, which the machine's load does not change the way
    it changes wall time. Processes that end between samples are lost, so it is read only
    for the warm cases, whose processes live for the whole run."""

    def __init__(self) -> None:
        import threading

        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.5):
            total = 0.0
            for p in me.children(recursive=True):
                try:
                    t = p.cpu_times()
                    total += t.user + t.system
                except psutil.Error:
                    continue
            self.samples.append((time.time(), total))

    def between(self, start: float, end: float) -> float | None:
        self._stop.set()
        self._thread.join()
        a = [c for t, c in self.samples if t <= start]
        b = [c for t, c in self.samples if t >= end]
        return (b[0] - a[-1]) if a and b else None


def deployment(root: Path, rounds: int, extra: dict[str, Any]) -> dict[str, Any]:
    from baton.pipeline.testing import run_stage

    ing, _ = run_stage("ingest", SYNTHETIC, {}, root, run_id="data")
    start = time.perf_counter()
    cpu = TreeCPU()
    out, metrics = run_stage("federated", fed_config(rounds, extra),
                             {"examples": ing["examples"]}, root, run_id="fed")
    records = json.loads((out["model"] / "rounds.json").read_text())
    # the rounds' span: the first round's start (its end minus its seconds) to the last's end
    first, last = records[0], records[-1]
    used = cpu.between(first["time"] - first["seconds"], last["time"]) \
        if "time" in first else None
    return {"seconds_total": time.perf_counter() - start, "round_seconds":
            _round_seconds(records), "accuracy": metrics.get("accuracy"),
            "cpu_s_per_round": None if used is None else used / len(records)}


def simulation(root: Path, rounds: int) -> dict[str, Any]:
    """Flower's simulation engine on the same plan, ServerApp logic and ClientApp."""
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from baton.pipeline.dataplane import partition as P
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema
    from baton.pipeline.dataplane.transform.column_plan import TransformSettings, plan_columns
    from baton.pipeline.federated import flower_client
    from baton.pipeline.federated.flower_server import FederatedRun
    from baton.pipeline.federated.local import FnSpec
    from baton.pipeline.federated.plan import Plan
    from baton.pipeline.testing import run_stage
    from baton.strategies.federated_settings import FederatedSettings

    ing, _ = run_stage("ingest", SYNTHETIC, {}, root, run_id="data")
    examples = ing["examples"]
    part = P.Partition(iid=True)
    names = P.client_names(part, ExamplesSchema.load(examples), examples, CLIENTS)
    silos = root / "silos"
    P.split(examples, [silos / n for n in names], part)
    cfg = fed_config(rounds, {})
    out = root / "server"
    out.mkdir(parents=True)
    fn = FnSpec(columns=plan_columns(TransformSettings(), ExamplesSchema.load(silos / names[0])))
    settings = FederatedSettings(
        clients=len(names), model="mlp", model_params=cfg["model_params"],
        batch_size=cfg["batch_size"], learning_rate=cfg["learning_rate"], optimizer="adam",
        seed=42, rounds=rounds, min_clients=cfg["min_clients"],
        round_timeout_s=cfg["round_timeout_s"])
    plan = Plan(clients=list(names), out_dir=str(out), wire_path="", fn=fn.to_dict(),
                settings=settings)
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:  # flower_server.main, the plan given
        FederatedRun(plan, grid, context).run()

    client = ClientApp()

    def node(context: Context) -> Context:
        # a virtual SuperNode's node_config is its partition; a real one's is --node-config
        i = int(context.node_config["partition-id"])
        context.node_config["data-dir"] = str(silos / names[i])
        context.node_config["client"] = names[i]
        return context

    @client.query()
    def query(msg: Message, context: Context) -> Message:
        return flower_client.app(msg, node(context))

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        return flower_client.app(msg, node(context))

    @client.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return flower_client.app(msg, node(context))

    start = time.perf_counter()
    # one CPU per virtual client: two ClientApp actors at once on a 2-core machine (Flower's
    # default of 2 CPUs a client would run them one at a time)
    run_simulation(server_app=server, client_app=client, num_supernodes=CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"include_dashboard": False}})
    records = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    rec = [r for r in records if r.get("event") == "round"]
    return {"seconds_total": time.perf_counter() - start,
            "round_seconds": _round_seconds(records),
            "accuracy": rec[-1].get("accuracy") if rec else None}


def label_is_legacy(extra: str) -> bool:
    return json.loads(extra).get("_legacy", False)


def child(case: str, rounds: int, extra: str) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"baton-bench-rounds-{case}-"))
    load = os.getloadavg()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    ray = os.environ.get("BATON_BENCH_RAY_PATH")  # Ray 2.55.1 beside the venv (module doc)
    if case == "simulation" and ray:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ray, env.get("PYTHONPATH")) if p)
    before = os.environ.get("BATON_BENCH_BEFORE")  # an export of the commit before (doc)
    if label_is_legacy(extra) and before:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (before, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([PY, __file__, "--child", case, "--rounds", str(rounds), "--extra",
                           extra, "--root", str(root)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=7200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"case failed: {case}")
    res = json.loads(lines[-1])
    res.update(case=case, extra=json.loads(extra), load_average_start=load,
               load_average_end=os.getloadavg(), date=time.strftime("%Y-%m-%d %H:%M"))
    res["rounds_per_minute"] = 60 / (sum(res["round_seconds"]) / len(res["round_seconds"]))
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="secure,insecure,simulation",
                    help="comma-separated: secure, insecure, simulation, legacy (today's "
                    "stage with no security keys: the 'before' measurement)")
    ap.add_argument("--extra", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()
    if a.child:
        root = Path(a.root)
        if a.child == "simulation":
            res = simulation(root, a.rounds)
        else:
            extra = {k: v for k, v in json.loads(a.extra).items() if not k.startswith("_")}
            res = deployment(root, a.rounds, extra)
        print(json.dumps(res))
        return
    if a.report:
        write_section(json.loads(RESULTS.read_text()), DOC)
        return
    extras = {"secure": "{}", "legacy": '{"_legacy": true}', "insecure": '{"insecure": true}',
              "simulation": "{}"}
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    runs = results.setdefault(a.label, {"cases": {}, "cores": os.cpu_count()})
    for case in a.cases.split(","):
        print(f"[{time.strftime('%H:%M:%S')}] {case} ...", file=sys.stderr, flush=True)
        res = child("simulation" if case == "simulation" else "deployment", a.rounds,
                    extras[case])
        runs["cases"][case] = res
        print(f"[{time.strftime('%H:%M:%S')}] {case}: {res['rounds_per_minute']:.2f} rounds/min "
              f"({res['round_seconds']})", file=sys.stderr, flush=True)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(results, DOC)


NAMES = {"legacy": "before: Flower's subprocess isolation (a ClientApp process per message), "
         "plaintext", "secure": "after: warm ClientApp hosts, TLS + SuperNode authentication "
         "(the default)", "insecure": "after: warm ClientApp hosts, `insecure: true`",
         "simulation": "Flower 1.42 simulation engine (Ray, 2 actors), the same ClientApp"}


def _load(r: dict[str, Any]) -> str:
    """The 1-minute load average when the case started and when it ended."""
    return f"{r['load_average_start'][0]:.1f} -> {r['load_average_end'][0]:.1f}"


def section(results: dict[str, Any]) -> list[str]:
    """The doc's rounds section: each label's cases side by side, the goals checked."""
    lines = [BEGIN, "### Rounds per minute at 8 clients: before and after, beside Flower's "
             "simulation", "",
             "`python bench/federated/bench_rounds.py` (results: bench/federated/results/"
             "rounds.json): the synthetic table iid over 8 clients, MLP [16], batch 32, 1 local "
             "epoch, 3 or 4 rounds (each row lists its rounds), each case a fresh process one "
             "after the other. Seconds per round are the ServerApp's own round records (from a round's training to the end of its "
             "evaluation, setup and the federated transform excluded), the same for every "
             "case; rounds per minute = 60 / their mean. `before` is the commit before this "
             "change, run from an export of it beside the others at the same load (the "
             "machine is shared: its load average, from other sessions' work, is in each row). "
             "The previous report's figure for before was 0.65 rounds per minute (2026-12-01, "
             "2 rounds, load 3.5 at the start).", ""]
    for label, run in results.items():
        cases = run["cases"]
        lines += [f"Run `{label}`, {next(iter(cases.values()))['date']}, "
                  f"{run.get('cores')} cores:", "",
                  "| case | rounds/min | s per round | CPU s per round | eval accuracy (last "
                  "round) | load average (1 min), start -> end |",
                  "|---|---:|---|---:|---:|---|"]
        for name, r in cases.items():
            acc = f"{r['accuracy']:.4f}" if r.get("accuracy") is not None else ""
            cpu = f"{r['cpu_s_per_round']:.1f}" if r.get("cpu_s_per_round") else ""
            lines.append(f"| {NAMES.get(name, name)} | {r['rounds_per_minute']:.2f} | "
                         + ", ".join(f"{x:.1f}" for x in r["round_seconds"])
                         + f" | {cpu} | {acc} | {_load(r)} |")
        lines.append("")
        if {"legacy", "secure"} <= set(cases):
            speed = cases["secure"]["rounds_per_minute"] / cases["legacy"]["rounds_per_minute"]
            lines.append(f"- After (secure) against before: **{speed:.1f}x** the rounds per "
                         f"minute (goal: at least 5x: **{'met' if speed >= 5 else 'missed'}**).")
        if {"insecure", "secure"} <= set(cases):
            ratio = cases["secure"]["rounds_per_minute"] / cases["insecure"]["rounds_per_minute"]
            lines.append(f"- TLS + SuperNode authentication against the same hosts without: "
                         f"{ratio:.2f}x the rounds per minute (goal: at least 0.90x, within "
                         f"10%: **{'met' if ratio >= 0.90 else 'missed'}**).")
        if run.get("note"):
            lines.append(f"- Note: {run['note']}.")
        if {"simulation", "secure"} <= set(cases):
            ratio = cases["simulation"]["rounds_per_minute"] / \
                cases["secure"]["rounds_per_minute"]
            lines.append(f"- Flower's simulation engine runs the same rounds "
                         f"{ratio:.1f}x as fast: no network, no TLS, no polling (its virtual "
                         "nodes are called directly); the deployment's round is mostly the "
                         "SuperNodes' 3 s pull loop and the ServerApp's 1 s reply poll.")
        lines.append("")
    lines += summary(results)
    lines.append(END)
    return lines


def summary(results: dict[str, Any]) -> list[str]:
    """Across the runs: each pair's secure/insecure ratio (the load moves between two cases
    more than TLS does, so one pair proves little), and before against after at one load."""
    import statistics

    pairs = [(label, run["cases"]) for label, run in results.items()
             if {"secure", "insecure"} <= set(run["cases"])]
    if not pairs:
        return []
    ratios = [c["secure"]["rounds_per_minute"] / c["insecure"]["rounds_per_minute"]
              for _, c in pairs]
    cpu = [(c["secure"].get("cpu_s_per_round"), c["insecure"].get("cpu_s_per_round"))
           for _, c in pairs]
    cpu = [(a, b) for a, b in cpu if a and b]
    speed = [run["cases"]["secure"]["rounds_per_minute"] / run["cases"]["legacy"]
             ["rounds_per_minute"] for run in results.values()
             if {"secure", "legacy"} <= set(run["cases"])]
    out = ["**Across the runs.** Secure/insecure rounds per minute, pair by pair ("
           + ", ".join(f"`{label}` {x:.2f}" for (label, _), x in zip(pairs, ratios,
                                                                      strict=True))
           + f"): median **{statistics.median(ratios):.2f}x**, "
           f"{sum(x >= 0.9 for x in ratios)} of {len(ratios)} pairs within 10%."]
    if cpu:
        out[-1] += (" CPU seconds per round of the federation's processes, which the load "
                    "moves less: secure " + ", ".join(f"{a:.1f}" for a, _ in cpu)
                    + " against insecure " + ", ".join(f"{b:.1f}" for _, b in cpu)
                    + f" (means {statistics.mean(a for a, _ in cpu):.1f} and "
                    f"{statistics.mean(b for _, b in cpu):.1f}): TLS costs about "
                    f"{statistics.mean(a for a, _ in cpu) - statistics.mean(b for _, b in cpu):+.1f}"
                    " CPU s a round on 8 nodes (the SuperNodes keep their connections: 7 TCP "
                    "connections a node in a 3-round run of 2 clients, counted at the relays).")
    if speed:
        out[-1] += (" After against before at the same load: "
                    + ", ".join(f"{x:.1f}x" for x in speed) + ".")
    secure = [(label, run["cases"]["secure"]) for label, run in results.items()
              if "secure" in run["cases"]]
    if secure:  # the issue's own figure was taken at a lower load: say how far each run is
        out[-1] += (f" Against the issue's {ISSUE_BEFORE} rounds per minute (2026-12-01, load "
                    "3.5), each run's secure case: " + ", ".join(
                        f"`{label}` {r['rounds_per_minute'] / ISSUE_BEFORE:.1f}x (load "
                        f"{r['load_average_start'][0]:.0f})" for label, r in secure)
                    + f"; {sum(r['rounds_per_minute'] >= 5 * ISSUE_BEFORE for _, r in secure)}"
                    f" of {len(secure)} reach 5x that figure. These runs started at load "
                    f"averages of {min(r['load_average_start'][0] for _, r in secure):.0f} to "
                    f"{max(r['load_average_start'][0] for _, r in secure):.0f} against 3.5 that "
                    "day, so before and after in one run, at one load, is the comparison that "
                    "holds.")
    return [*out, ""]


def write_section(results: dict[str, Any], path: Path) -> None:
    """Replace the rounds section of `path` (between the markers), or append it."""
    text = path.read_text() if path.is_file() else ""
    block = "\n".join(section(results))
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
