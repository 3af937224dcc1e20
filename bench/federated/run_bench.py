"""Federated benchmark: the federated stage against centralized training, side by side.

Every case is a fresh subprocess running Baton's stages on the same rows:

- penguins split by island (3 clients, non-IID): federated FedAvg for R rounds of E local
  epochs against the train stage for R*E epochs on the union of the clients' rows (the same
  model, batch size and learning rate); both evaluated by the evaluate stage on the same eval
  split;
- a synthetic table (20,000 rows, 8 numeric + 2 categorical columns, 3 classes) split
  Dirichlet(0.5) over 4 clients, with a larger MLP so the weights dominate the wire: update
  compression none / fp16 / int8 (bytes per round counted on the wire by the relays, accuracy);
- rounds per minute at 8 clients (before and after the warm ClientApp hosts, with and without
  TLS, beside Flower's simulation engine): bench_rounds.py, whose section of the report this
  script keeps;
- the Dirichlet run with client-level DP (clip 1.0, noise 0.5): seconds per round beside the
  run without, and the epsilon spent;
- the Dirichlet run with SecAgg+ (`secure_aggregation: true`) beside the same run without:
  seconds and bytes per round, the seconds of the protocol's own steps, accuracy.

Writes bench/federated/results/federated.json and docs/benchmarks-federated.md.
`python bench/federated/run_bench.py [--quick] [--only compression|penguins|secagg] [--out DIR]`:
`--only` runs those cases alone (secagg: without and with, one after the other) and keeps the
other results from the last full run; `--out DIR` writes the results and the report there
instead of the repository (a trial run).
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
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
SYNTHETIC = {"source": "synthetic", "synthetic": {"rows": 20_000, "seed": 1, "numeric": 8,
                                                  "categorical": 2, "vocab_size": 20,
                                                  "classes": 3}}
BIG_MLP = {"hidden_units": [256, 256]}


def case(kind: str, root: str, ingest: str, fed: str = "", central: str = "") -> dict:
    """One case in this process: ingest, then the federated stage or transform + train, then
    evaluate on the eval split."""
    from baton.pipeline.testing import run_stage

    ing, _ = run_stage("ingest", json.loads(ingest), {}, root, run_id="data")
    out: dict = {"kind": kind}
    start = time.perf_counter()
    if fed:
        model, metrics = run_stage("federated", json.loads(fed), {"examples": ing["examples"]},
                                   root, run_id="fed")
        out["rounds"] = json.loads((model["model"] / "rounds.json").read_text())
        graph = model["transform_graph"]
    else:
        t, _ = run_stage("transform", {}, {"examples": ing["examples"]}, root, run_id="central")
        model, metrics = run_stage("train", json.loads(central), t, root, run_id="central")
        graph = t["transform_graph"]
    out["seconds"] = time.perf_counter() - start
    out["metrics"] = metrics
    _, ev = run_stage("evaluate", {}, {"model": model["model"], "transform_graph": graph,
                                      "examples": ing["examples"]}, root, run_id="eval")
    out["eval_accuracy"] = ev["accuracy"]
    return out


def child(*args: str) -> dict:
    proc = subprocess.run([PY, __file__, "--case", *args], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"case failed: {args[0]}")
    return json.loads(lines[-1])


def fed_cfg(**kw: object) -> str:
    base = {"round_timeout_s": 180, "min_clients": 2, "batch_size": 32, "learning_rate": 0.01}
    return json.dumps({**base, **kw})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--report", action="store_true", help="re-render the doc from the results")
    ap.add_argument("--only", choices=["compression", "penguins", "secagg"],
                    help="run these cases only; the others stay as the last results have them")
    ap.add_argument("--out", help="write results and report here (default: the repository)")
    a = ap.parse_args()
    if a.case:
        print(json.dumps(case(*a.case)))
        return
    if a.report:
        res = json.loads((ROOT / "bench" / "federated" / "results" / "federated.json").read_text())
        write_report(res, ROOT / "docs" / "benchmarks-federated.md")
        return
    rounds, epochs = (2, 1) if a.quick else (5, 2)
    crounds = 2 if a.quick else 3
    work = tempfile.mkdtemp(prefix="baton-bench-fed-")
    machine = {"cores": os.cpu_count(), "load_average": os.getloadavg(),
               "date": time.strftime("%Y-%m-%d %H:%M")}
    res: dict = {"machine": machine,
                 "rounds": rounds, "local_epochs": epochs, "compression_rounds": crounds}
    out = Path(a.out) if a.out else ROOT / "bench" / "federated" / "results"
    report = out / "benchmarks-federated.md" if a.out else \
        ROOT / "docs" / "benchmarks-federated.md"

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    if a.only:
        res = json.loads((ROOT / "bench" / "federated" / "results" / "federated.json")
                         .read_text())
        if a.only == "compression":
            res["compression_machine"] = machine
            res["compression"] = compression_cases(work, crounds, log)
        elif a.only == "penguins":
            res["penguins_machine"] = machine
            res["rounds"], res["local_epochs"] = rounds, epochs
            res.update(penguin_cases(work, rounds, epochs, log))
        else:
            res["secagg"] = secagg_cases(work, crounds, log)
        out.mkdir(parents=True, exist_ok=True)
        (out / "federated.json").write_text(json.dumps(res, indent=1) + "\n")
        write_report(res, report)
        log(f"wrote {report}")
        return

    res.update(penguin_cases(work, rounds, epochs, log))
    synth = json.dumps(SYNTHETIC)
    res["compression"] = compression_cases(work, crounds, log)
    res["compression_central"] = child("dirichlet-central", f"{work}/d-cen", synth, "",
                                       json.dumps({"epochs": crounds, "hidden_units": [256, 256],
                                                   "batch_size": 32, "learning_rate": 0.01}))
    res["dp"] = child("dirichlet-dp", f"{work}/d-dp", synth, fed_cfg(
        clients=4, partition={"dirichlet": 0.5}, rounds=crounds, model_params=BIG_MLP,
        privacy={"clip_norm": 1.0, "noise_multiplier": 0.5}))
    log("dp done")
    res["secagg"] = secagg_cases(work, crounds, log)
    out.mkdir(parents=True, exist_ok=True)
    (out / "federated.json").write_text(json.dumps(res, indent=1) + "\n")
    write_report(res, report)
    log(f"wrote {report}")


def secagg_cases(work: str, crounds: int, log: Any) -> dict:
    """The Dirichlet case without and with SecAgg+, one after the other (the same load)."""
    res: dict = {"machine": {"load_average": os.getloadavg(),
                             "date": time.strftime("%Y-%m-%d %H:%M")}}
    for name, on in (("off", False), ("on", True)):
        res[name] = child(f"dirichlet-secagg-{name}", f"{work}/d-sa-{name}",
                          json.dumps(SYNTHETIC), fed_cfg(
                              clients=4, partition={"dirichlet": 0.5}, rounds=crounds,
                              model_params=BIG_MLP, secure_aggregation=on))
        log(f"secagg {name}: {_round_s(res[name]):.1f} s, {_bytes(res[name]):,.0f} B per round")
    return res


def penguin_cases(work: str, rounds: int, epochs: int, log: Any) -> dict:
    """Federated against centralized on penguins by island, at R x E epochs and at twice
    that (FedAvg on non-IID silos needs more epochs than one model on the union: both are
    reported, each pair on the same data and epochs)."""
    out = {}
    for key, r in (("penguins", rounds), ("penguins_long", 2 * rounds)):
        out[key] = {
            "federated": child("penguins-fed", f"{work}/{key}-fed", "{}", fed_cfg(
                clients=3, partition={"by": "island"}, rounds=r, local_epochs=epochs,
                model_params={"hidden_units": [16]})),
            "centralized": child("penguins-central", f"{work}/{key}-cen", "{}", "", json.dumps(
                {"epochs": r * epochs, "hidden_units": [16], "batch_size": 32,
                 "learning_rate": 0.01})),
            "rounds": r, "local_epochs": epochs,
        }
        log(f"{key} ({r} rounds x {epochs}): {_acc(out[key])}")
    return out


def compression_cases(work: str, crounds: int, log: Any) -> dict:
    res = {}
    for method in ("none", "fp16", "int8"):
        res[method] = child(f"dirichlet-{method}", f"{work}/d-{method}", json.dumps(SYNTHETIC),
                            fed_cfg(clients=4, partition={"dirichlet": 0.5}, rounds=crounds,
                                    compression=method, model_params=BIG_MLP))
        log(f"compression {method}: {_bytes(res[method])} B/round")
    return res


def _acc(r: dict) -> str:
    return ", ".join(f"{k} {v['eval_accuracy']:.4f}" for k, v in r.items() if isinstance(v, dict))


def _bytes(c: dict, which: tuple[str, ...] = ("bytes_up", "bytes_down")) -> float:
    return sum(sum(r[k] for k in which) for r in c["rounds"]) / len(c["rounds"])


def _round_s(c: dict) -> float:
    return sum(r["seconds"] for r in c["rounds"]) / len(c["rounds"])


def write_report(r: dict, path: Path) -> None:
    m = r["machine"]
    load = ", ".join(f"{x:.1f}" for x in m["load_average"])
    pairs = [r[k] for k in ("penguins", "penguins_long") if k in r]
    comp = r["compression"]
    none_b = _bytes(comp["none"])
    lines = [
        "## Federated training (Flower deployment engine, real SuperNode processes)", "",
        f"Run {m['date']}, {m['cores']} cores, load average {load} at the start, by "
        "`python bench/federated/run_bench.py` (results: bench/federated/results/federated.json)."
        " Every client is its own SuperNode process on 127.0.0.1; bytes are counted on the wire "
        "by the relay in front of each client (HTTP, polling and heartbeats included). "
        "Accuracy is the evaluate stage's on the same eval split for both sides.", "",
        "### Federated against centralized: penguins by island (3 clients, non-IID)", "",
        "Each pair on the same rows, model (MLP [16]), batch (32), learning rate (0.01) and "
        "epochs: FedAvg for R rounds of E local epochs against the train stage for R x E "
        "epochs on the union of the clients' rows. The eval split has 66 rows, so one row is "
        "1.5 points.", "",
        "| epochs | federated FedAvg | centralized (train stage) | centralized minus "
        "federated | federated accuracy by round | seconds (fed / central) |",
        "|---|---:|---:|---:|---|---:|"]
    for p in pairs:
        rr, ee = p.get("rounds", r["rounds"]), p.get("local_epochs", r["local_epochs"])
        gap = (p["centralized"]["eval_accuracy"] - p["federated"]["eval_accuracy"]) * 100
        curve = ", ".join(f"{x['accuracy']:.3f}" for x in p["federated"]["rounds"])
        lines.append(f"| {rr} x {ee} vs {rr * ee} | {p['federated']['eval_accuracy']:.4f} | "
                     f"{p['centralized']['eval_accuracy']:.4f} | {gap:+.1f} points | {curve} | "
                     f"{p['federated']['seconds']:.0f} / {p['centralized']['seconds']:.0f} |")
    gaps = [(p["centralized"]["eval_accuracy"] - p["federated"]["eval_accuracy"]) * 100
            for p in pairs]
    lines += [
        "",
        "Goal: within 2 points on the same data and epochs: " + "; ".join(
            f"at {p.get('rounds', r['rounds']) * p.get('local_epochs', r['local_epochs'])} "
            f"epochs **{'met' if g <= 2 else 'missed'}** ({g:+.1f})" for p, g in zip(pairs, gaps, strict=True))
        + ". FedAvg averages three models each trained on one island (Torgersen holds only "
        "Adelie penguins), so a round moves the global model less than an epoch on the union "
        "does" + (": it reaches the centralized accuracy, but needs more epochs to. "
                  if len(gaps) > 1 and gaps[-1] <= 2 < gaps[0] else ". ")
        + (f"Penguin runs: {r['penguins_machine']['date']}, load average "
           f"{', '.join(f'{x:.1f}' for x in r['penguins_machine']['load_average'])} at the "
           "start (`--only penguins`)." if "penguins_machine" in r else ""), "",
        f"### Update compression: synthetic table, Dirichlet(0.5) over 4 clients, MLP "
        f"{BIG_MLP['hidden_units']}, {r['compression_rounds']} rounds", "",
        "| compression | bytes per round (wire, up+down) | vs none | bytes up per round "
        "(the updates) | vs none | eval accuracy | s per round |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    none_up = _bytes(comp["none"], ("bytes_up",))
    for method, c in comp.items():
        up = _bytes(c, ("bytes_up",))
        lines.append(f"| {method} | {_bytes(c):,.0f} | {none_b / _bytes(c):.2f}x fewer | "
                     f"{up:,.0f} | {none_up / up:.2f}x fewer | {c['eval_accuracy']:.4f} | "
                     f"{_round_s(c):.1f} |")
    central = r["compression_central"]["eval_accuracy"]
    i8 = comp["int8"]
    ratio = none_b / _bytes(i8)
    dacc = (comp["none"]["eval_accuracy"] - i8["eval_accuracy"]) * 100
    none_down = _bytes(comp["none"], ("bytes_down",))
    i8_down = _bytes(i8, ("bytes_down",))
    when = ""
    if "compression_machine" in r:
        cm = r["compression_machine"]
        when = (f"These compression runs: {cm['date']}, load average "
                f"{', '.join(f'{x:.1f}' for x in cm['load_average'])} at the start "
                "(`--only compression`; the other sections are from the run above). ")
    lines += [
        f"| centralized ({r['compression_rounds']} epochs) | | | | | {central:.4f} | |", "",
        f"Goals: int8 at least 3.5x fewer bytes than none: **{'met' if ratio >= 3.5 else 'missed'}**"
        f" ({ratio:.2f}x on the wire, up and down, polling and heartbeats included; "
        f"{none_up / _bytes(i8, ('bytes_up',)):.2f}x on the uplink, "
        f"{none_down / i8_down:.2f}x on the downlink); accuracy within 1 "
        f"point of none: **{'met' if abs(dacc) <= 1 else 'missed'}** ({dacc:+.1f} points).", "",
        when + "With fp16 or int8 the downlink is compressed too: the server sends each client "
        "the global model as a delta against the copy that client holds (kept in the "
        "SuperNode's run context), encoded like the updates, with error feedback on the "
        "server's side; round 1 sends the float32 model once (the clients hold nothing yet), "
        "and the next round's train message refers to the copy the evaluate message left "
        "instead of sending the model again (docs/federated.md). Bytes by round:", "",
        "| compression | round | bytes down | bytes up | total | downlink messages |",
        "|---|---:|---:|---:|---:|---|"]
    for method, c in comp.items():
        for rr in c["rounds"]:
            dl = rr.get("downlink")
            kinds = ", ".join(f"{v} {k}" for k, v in dl.items() if v) if dl else \
                "float32 weights (train and evaluate)"
            lines.append(f"| {method} | {rr['round']} | {rr['bytes_down']:,} | "
                         f"{rr['bytes_up']:,} | {rr['bytes_down'] + rr['bytes_up']:,} | "
                         f"{kinds} |")
    lines += ["", "`copy`: a reference to the model the client holds (no arrays); `delta`: "
              "the compressed difference to it; `full`: float32 weights. Round 1's train "
              "message is a `copy` when the initial model a client built at setup has the "
              "server's digest, else `full`.", ""]
    dp = r["dp"]
    eps = dp["rounds"][-1].get("epsilon")
    lines += [
        "### The cost of privacy", "",
        f"- Client-level DP (clip 1.0, noise multiplier 0.5): {_round_s(dp):.1f} s per round "
        f"against {_round_s(comp['none']):.1f} s without; eval accuracy "
        f"{dp['eval_accuracy']:.4f} against {comp['none']['eval_accuracy']:.4f}; epsilon after "
        f"{len(dp['rounds'])} rounds {eps:.2f} (delta 1e-5; dp-accounting's RDP accountant). "
        "The seconds do not isolate DP's cost: clipping and one noise draw per round are "
        "milliseconds, and the machine's load moved between the runs by more than that. With "
        "4 clients, noise of 0.5 x the clip on the sum is large against each update, hence "
        "the accuracy: client-level DP wants many clients per round.", ""]
    if "secagg" in r:
        lines += secagg_report(r["secagg"])
    else:
        lines += ["- SecAgg+: not measured in this run.", ""]
    path.write_text("\n".join(lines))
    rounds = ROOT / "bench" / "federated" / "results" / "rounds.json"
    if rounds.is_file():  # bench_rounds.py's section, kept
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_rounds

        bench_rounds.write_section(json.loads(rounds.read_text()), path)


def secagg_report(sa: dict) -> list[str]:
    off, on = sa["off"], sa["on"]
    steps = [rr["secure_aggregation"] for rr in on["rounds"]]
    stage = {k: sum(s["stage_seconds"][k] for s in steps) / len(steps)
             for k in steps[0]["stage_seconds"]}
    extra = sum(s["overhead_seconds"] for s in steps) / len(steps)
    load = ", ".join(f"{x:.1f}" for x in sa["machine"]["load_average"])
    return [
        f"### The cost of SecAgg+ per round: Dirichlet(0.5) over 4 clients, MLP "
        f"{BIG_MLP['hidden_units']}, {len(on['rounds'])} rounds", "",
        f"Run {sa['machine']['date']}, load average {load} at the start; the two runs one "
        "after the other.", "",
        "| | s per round | bytes per round (wire, up+down) | bytes up per round | "
        "eval accuracy |", "|---|---:|---:|---:|---:|",
        f"| FedAvg | {_round_s(off):.1f} | {_bytes(off):,.0f} | "
        f"{_bytes(off, ('bytes_up',)):,.0f} | {off['eval_accuracy']:.4f} |",
        f"| FedAvg + SecAgg+ | {_round_s(on):.1f} | {_bytes(on):,.0f} | "
        f"{_bytes(on, ('bytes_up',)):,.0f} | {on['eval_accuracy']:.4f} |", "",
        f"SecAgg+ costs {_round_s(on) - _round_s(off):+.1f} s and "
        f"{_bytes(on) / _bytes(off):.2f}x the bytes per round (its masked vectors are int64), "
        f"and its model ends {(on['eval_accuracy'] - off['eval_accuracy']) * 100:+.1f} points "
        "from FedAvg's (its sum is FedAvg's within 3e-5 in test_secagg_inprocess; plain runs "
        "of this case differ by about half a point between runs here, and the quantization "
        "of the updates is not otherwise isolated). Its steps per round: "
        + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in stage.items())
        + ". Collect includes the clients' training; setup, share keys and unmask "
        f"({extra:.1f} s) are the protocol's own: three more train messages per client (each "
        "a fresh ClientApp process when this was measured); on a loaded machine they are the "
        "direct measure, "
        "the difference between the two runs moves with the load. The server received "
        f"{min(s['masked_vectors'] for s in steps)} masked vectors and "
        f"{max(s['unmasked_arrays_seen'] for s in steps)} unmasked arrays in every round.", ""]


if __name__ == "__main__":
    main()
