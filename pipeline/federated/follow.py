"""Following a federated run from the stage: faults injected at their rounds, the round log
reported as it grows, the ServerApp's outputs published as the stage's artifacts.

The ServerApp (flower_server) appends its events to `rounds.jsonl` beside its outputs; the stage
(pipeline.stages.federated) reads that file, not Flower's logs, and asks the SuperLink only
for the run's status (control.Control.status).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.context import StageContext


def follow(ctx: StageContext, fed: Any, run_id: int, plan_path: Path | str, log: Any,
            faults: list[tuple[str, int, int]]) -> None:
    """Wait for the run; inject each fault at its round; resume after a server restart."""
    seen = 0
    names = list(getattr(fed, "clients", ()))  # a Federation's (the faults need processes)
    pending = list(faults)
    while True:
        records = log.read()
        for rec in records[seen:]:
            say(ctx, rec)
            due = [f for f in pending
                   if rec.get("event") == "train_start" and rec.get("round") == f[2]]
            for kind, index, number in due:
                pending.remove((kind, index, number))
                if kind == "client":
                    ctx.log(f"inject-failure: SIGKILL client {names[index]}'s SuperNode")
                    fed.nodes[names[index]].kill()
                else:
                    ctx.log("inject-failure: SIGKILL the SuperLink and its ServerApp")
                    fed.superlink.kill()
                    fed.start_superlink()
                    run_id = fed.submit(plan_path)
                    ctx.log(f"SuperLink restarted; run {run_id} resumes after the last round")
        seen = len(records)
        status = fed.status(run_id)
        if status.startswith("finished"):
            if status != "finished:completed":
                detail = fed.logs_of(run_id)
                lines = [ln for ln in detail.splitlines()
                         if "Error" in ln or "error" in ln or "raise" in ln][-6:]
                raise StageError(f"federated: run {run_id} {status}: "
                                 + ("; ".join(ln.strip() for ln in lines) or detail[-1500:])
                                 + node_clues(fed))
            for rec in log.read()[seen:]:
                say(ctx, rec)
            return
        time.sleep(2.0)


# what a SuperNode's log says when a message of it went wrong: its host's errors and warnings
# (a ClientApp that raised, a reply it could not push), Flower's (a reply it failed to send, a
# connection it gave up on) and the launcher's restarts, which lose the message in hand
CLUES = ("ERROR", "WARNING", "Failed to send", "Traceback", "starting it again")
# warnings every SuperNode prints at its start, which explain nothing
NOISE = ("before absl::InitializeLog()", "SuperExec authentication is experimental")


def node_clues(fed: Any, per_node: int = 4) -> str:
    """The last lines of each local SuperNode's log that explain a failed run ("" for a
    federation whose nodes run elsewhere, or whose logs say nothing of the kind)."""
    parts = []
    for name, proc in sorted(getattr(fed, "nodes", {}).items()):
        tail = getattr(proc, "tail", None)
        lines = [ln.strip() for ln in (tail(200_000) if tail else "").splitlines()
                 if any(c in ln for c in CLUES) and not any(n in ln for n in NOISE)][-per_node:]
        if lines:
            parts.append(f"SuperNode {name} ({proc.log}): " + " | ".join(ln[:300] for ln in lines))
    return ("; " + "; ".join(parts)) if parts else ""


def say(ctx: StageContext, rec: dict[str, Any]) -> None:
    if rec.get("event") == "round":
        metric = (f"accuracy {rec['accuracy']:.4f}" if "accuracy" in rec
                  else f"mse {rec['mse']:.4f}" if "mse" in rec
                  else "no evaluate reply within round_timeout_s")
        eps = f", epsilon {rec['epsilon']:.3f}" if "epsilon" in rec else ""
        if "secure_aggregation" in rec:
            sa = rec["secure_aggregation"]
            eps += (f", SecAgg+: {sa['masked_vectors']} masked vectors, "
                    f"{sa['unmasked_arrays_seen']} unmasked arrays, "
                    f"{sa['overhead_seconds']:.1f} s in its key and unmask steps")
        ctx.log(f"round {rec['round']}: {len(rec.get('clients', []))} clients "
                f"{rec.get('clients')}, loss {rec.get('loss', float('nan')):.4f}, {metric}, "
                + (f"{rec['bytes_up']:,} B up / {rec['bytes_down']:,} B down"
                   if "bytes_up" in rec else "bytes not measured")
                + f"{eps}, {rec['seconds']:.1f} s")
        if rec.get("missing"):
            ctx.log(f"round {rec['round']}: not counted: " + "; ".join(
                f"{name} ({why})" for name, why in rec["missing"].items()))
    elif rec.get("event") == "edge":
        for name, r in rec["clients"].items():
            key = "accuracy" if "edge_accuracy" in r else "mse"
            ctx.log(f"edge ({rec['variant']} TFLite, {rec['size_bytes']:,} B) on {name}: "
                    f"{key} {r[f'edge_{key}']:.4f} (cloud {r[f'cloud_{key}']:.4f})")
    elif rec.get("event") == "outputs" and rec.get("kind") == "probabilities":
        ctx.log(f"the model outputs probabilities ({rec.get('reason')}): trained and evaluated "
                "with the loss on probabilities (from_logits=False), served as it answers")
    elif rec.get("event") == "transform":
        ctx.log(f"federated transform: {rec['analyzers']} analyzers in {rec['phases']} phases "
                f"from {len(rec['rows'])} clients' summaries ({sum(rec['rows'].values())} rows "
                "never left them)")


PER_ROUND = ("round", "clients", "loss", "accuracy", "mse", "bytes_up", "bytes_down", "epsilon")


def publish(ctx: StageContext, server: Path, log: Any, clients: int, seconds: float) -> None:
    import json

    model, graph = server / "model", server / "transform_graph"
    rounds = [r for r in log.read() if r.get("event") == "round"]
    if not model.is_dir() or not rounds:
        raise StageError("federated: no round completed; no global model is written")
    shutil.copytree(model, ctx.output("model"), dirs_exist_ok=True)
    (ctx.output("model") / "rounds.json").write_text(json.dumps(rounds, indent=1) + "\n")
    edge = [r for r in log.read() if r.get("event") == "edge"]
    if edge:
        (ctx.output("model") / "edge.json").write_text(json.dumps(edge[-1], indent=1) + "\n")
        shutil.copyfile(server / "edge" / "model.tflite", ctx.output("model") / "model.tflite")
    shutil.copytree(graph, ctx.output("transform_graph"), dirs_exist_ok=True)
    last = rounds[-1]
    numbers: dict[str, Any] = {
        "rounds": len(rounds), "clients": clients, "seconds": round(seconds, 3),
        # the round records in the lineage record itself (rounds.json in the model has the rest:
        # downlink counts, SecAgg+ steps, timings); the run's summary table shows only scalars
        "per_round": [{k: r[k] for k in PER_ROUND if k in r} for r in rounds]}
    if all("bytes_up" in r for r in rounds):  # absent with --superlink: no relays counted them
        traffic = [r["bytes_up"] + r["bytes_down"] for r in rounds]
        numbers["bytes_per_round"] = round(sum(traffic) / len(traffic))
        numbers["bytes_up_per_round"] = round(sum(r["bytes_up"] for r in rounds) / len(rounds))
    for key in ("accuracy", "mse", "loss", "epsilon"):
        if key in last:
            numbers[key] = round(float(last[key]), 6)
    numbers["server_restarts"] = sum(1 for r in log.read() if r.get("event") == "resume")
    secure = [r["secure_aggregation"] for r in rounds if "secure_aggregation" in r]
    if secure:  # what SecAgg+'s own steps (keys, shares, unmasking) cost a round
        numbers["secagg_seconds_per_round"] = round(
            sum(s["overhead_seconds"] for s in secure) / len(secure), 3)
    ctx.record(**numbers)
