"""Render the training benchmark results (bench/training/results/) as docs/benchmarks-training.md.

`python bench/training/report.py [--results DIR] [--out FILE]` renders from the results of the
last run without running anything; `run_bench.py` calls it after a run. Every figure in the
tables, ratios and goals comes from the result files: `single.json` (bench_single.py),
`cluster.json` (bench_cluster.py), `sweep.jsonl` (sweep_faults.py), `own_model.json`
(bench_own_model.py), `step_vs_fit.json` (bench_step_vs_fit.py) and, when the run recorded
it, `meta.json` (run_bench.py: date, load average, versions). Figures of earlier runs that no
result file holds are kept verbatim in EARLIER_RUNS, marked as such.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

FIT_SPEEDUP_GOAL = 1.5  # examples/s at least 1.5x Keras `model.fit`
INPUT_NAMES = {"rows": "per-row tf.data input",  # bench_own_model.py's two input pipelines
               "columnar": "the train stage's input pipeline"}
CALLBACK_COST_GOAL = 0.05  # the callback list costs at most 5% of the loop's examples/s
ROOF_AIM = 0.35  # 35% of the float32 matmul roof
NAMED = ("default", "wider")  # the two named models; others are extra

CLUSTER_CASES = {
    "1 process (one_device)": "1 process (one_device)",
    "2 workers mirrored fp32": "2 workers, multi-worker mirrored, fp32 all-reduce",
    "2 workers mirrored fp16 all-reduce": "2 workers, multi-worker mirrored, fp16 all-reduce",
    "2 workers + 1 PS": "2 workers + 1 PS (ClusterCoordinator)",
}

# The conditions of the run whose results are checked in, recorded by hand before run_bench.py
# wrote meta.json; shown only while the results have no meta.json.
CONDITIONS_BY_HAND = """\
- Conditions of the run the tables above were rendered from (before run_bench.py recorded
  them in meta.json): 2 CPU cores (AVX-512), no GPU, shared with other jobs; load average
  ~1.2 during the single-process benchmark and 1-7 across the runs, so absolute numbers move
  by up to 2x between runs; TF 2.21, Keras 3.15.
"""

# Hand-recorded figures of runs whose result files were not kept: history, not regenerated.
EARLIER_RUNS = """\
## From earlier runs (hand-recorded; not in bench/training/results/)

These figures were written down by hand after earlier runs; no result file holds them, so
`report.py` keeps them as they were and a new run does not change them.

- Single process, run 1 (load average ~6, other engineers' jobs running): default MLP 2.07x
  (69,668 vs 33,733 ex/s); wide MLP 1.00x (6,003 vs 6,019), 35% of a 166 GFLOP/s roof. Under
  heavy contention the wide model is compute-starved for both loops and the difference
  vanishes.
- Local clusters under heavy load: 8,568 / 7,731 / 6,035 / 7,846 ex/s for the four cases
  (1 process, fp32 all-reduce, fp16 all-reduce, PS); fp16 all-reduce was -22% against fp32
  there.
"""


def load(results: Path) -> dict[str, Any]:
    """The result files that exist in `results`, parsed."""
    out: dict[str, Any] = {}
    for name in ("single", "cluster", "meta", "own_model", "step_vs_fit", "elastic", "balance",
                 "balance_emulations", "balance_cnn", "balance_cnn_emulations", "auto_workers"):
        f = results / f"{name}.json"
        if f.exists():
            out[name] = json.loads(f.read_text())
    f = results / "sweep.jsonl"
    if f.exists():
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        out["sweep"] = {"trials": [r for r in rows if "trial" in r],
                        "summary": next((r for r in rows if "seed" in r), {})}
    return out


def _params(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k"


def _pct(fraction: float) -> str:
    p = 100 * fraction
    return f"{p:.1f}%" if p < 10 else f"{p:.0f}%"


def _pct_span(lo: float, hi: float) -> str:
    a, b = _pct(lo), _pct(hi)
    return a if a == b else f"{a[:-1]}-{b}"


def _span(values: list[str]) -> str:
    """'a' if all equal, else 'first-last' (values already formatted, in order)."""
    return values[0] if len(set(values)) == 1 else f"{values[0]}-{values[-1]}"


def _kind(row: dict) -> str:
    return row["model"].split()[1]  # "mlp default (64, 32)" -> "default"


def _label(row: dict) -> str:
    return f"MLP ({', '.join(map(str, row['hidden_units']))}) {_kind(row)}"


def _speedup(row: dict) -> float:
    """Against the faster `fit` measured (with steps_per_execution where that was measured)."""
    return row["baton_examples_per_sec"] / row["keras_fit_examples_per_sec"]


def _vs_defaults(row: dict) -> str:
    if "keras_fit_default_examples_per_sec" not in row:
        return ""
    return f" ({row['baton_examples_per_sec'] / row['keras_fit_default_examples_per_sec']:.2f}x)"


def _by_kind(single: list[dict]) -> dict[str, dict[bool, dict]]:
    out: dict[str, dict[bool, dict]] = {}
    for r in single:
        out.setdefault(_kind(r), {})[bool(r["baton_jit_compile"])] = r
    return out


def single_section(single: list[dict], meta: dict) -> list[str]:
    roof = max(r["roof_gflops"] for r in single)
    spe = sorted({r["steps_per_execution"] for r in single}, reverse=True)
    fit_jit = {r["keras_fit_jit_compile"] for r in single}
    lines = [
        "## Single process: Baton's graph loop vs Keras 3 `model.fit`",
        "",
        "`bench/training/bench_single.py`: same model (baton.graphs.models MLP over 32 numeric + "
        "2 categorical features, 4 classes), same in-memory tf.data pipeline, batch "
        f"{single[0]['batch']}, Adam. Baton runs `steps_per_execution` steps per tf.function call "
        f"({' or '.join(map(str, spe))}) under the one-device strategy with a distributed dataset, "
        "i.e. the production path of `baton.strategies.trainer`. Keras runs `model.fit` (its "
        "`jit_compile=\"auto\"` resolved to "
        f"{' / '.join(str(v) for v in sorted(fit_jit))} for these models)"
        + (" twice: with its defaults (`steps_per_execution=1`) and on its documented fast path "
           "for small models, `compile(steps_per_execution=N)` with Baton's N; the speedup is "
           "against the faster of the two (against the defaults in parentheses)."
           if any("keras_fit_spe_examples_per_sec" in r for r in single) else
           " with its defaults (`steps_per_execution=1`): this run predates measuring `fit`'s "
           "`steps_per_execution` fast path, so these ratios flatter Baton.")
        + " FLOP/s = 6 x params x examples/s; the roof is the best float32 "
        "1024x1024 matmul rate measured in the same process. Best of 3, interleaved.",
        "",
    ]
    if meta.get("load_average", {}).get("single"):
        lines += [f"Load average (1 min) before / after: {meta['load_average']['single']}.", ""]
    lines += [
        "| model | params | Baton XLA | Baton ex/s | `fit` ex/s | speedup | Baton GFLOP/s | "
        f"% of roof ({roof:.0f} GFLOP/s) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in single:
        frac = r["baton_fraction_of_roof"]
        pct = _pct(frac)
        lines.append(
            f"| {_label(r)} | {_params(r['params'])} | {'on' if r['baton_jit_compile'] else 'off'} "
            f"| {r['baton_examples_per_sec']:,} | {r['keras_fit_examples_per_sec']:,} "
            f"| **{_speedup(r):.2f}x**{_vs_defaults(r)} | {r['baton_gflops']:.1f} "
            f"| {f'**{pct}**' if frac >= ROOF_AIM else pct} |")
    kinds = _by_kind(single)
    lines += ["", "Against the issue's goals (judged without XLA, Baton's default; with XLA in "
              "parentheses):", ""]

    def goal(ok: bool, text: str) -> None:
        lines.append(f"- {'met' if ok else '**missed**'}: {text}")

    for kind in NAMED:
        rows = kinds.get(kind, {})
        if False not in rows:
            lines.append(f"- not measured: the {kind} MLP")
            continue
        off, on = rows[False], rows.get(True)
        goal(_speedup(off) >= FIT_SPEEDUP_GOAL,
             f"examples/s at least {FIT_SPEEDUP_GOAL:g}x `model.fit`, {kind} MLP: "
             f"**{_speedup(off):.2f}x**" + (f" ({_speedup(on):.2f}x)" if on else ""))
    for kind in NAMED:
        rows = kinds.get(kind, {})
        if False in rows:
            off, on = rows[False], rows.get(True)
            goal(off["baton_fraction_of_roof"] >= ROOF_AIM,
                 f"{ROOF_AIM:.0%} of the matmul roof, {kind} MLP: "
                 f"**{_pct(off['baton_fraction_of_roof'])}**"
                 + (f" ({_pct(on['baton_fraction_of_roof'])})" if on else ""))
    for kind, rows in kinds.items():
        if kind in NAMED:
            continue
        ordered = [rows[k] for k in (False, True) if k in rows]
        above = all(r["baton_fraction_of_roof"] >= ROOF_AIM for r in ordered)
        lines.append(
            f"- not a goal, the extra {kind} MLP: "
            f"{' / '.join(f'{_speedup(r):.2f}x' for r in ordered)} `model.fit`, "
            f"{' / '.join(_pct(r['baton_fraction_of_roof']) for r in ordered)} of the roof"
            + (f" (above the {ROOF_AIM:.0%} aim)" if above else ""))
    small = [r for r in single if _kind(r) in NAMED]
    big = [r for r in single if _kind(r) not in NAMED]
    if small and big:
        s_lo, s_hi = min(map(_speedup, small)), max(map(_speedup, small))
        b_lo, b_hi = min(map(_speedup, big)), max(map(_speedup, big))
        f_lo = min(r["baton_fraction_of_roof"] for r in big)
        f_hi = max(r["baton_fraction_of_roof"] for r in big)
        lines += [
            "",
            "Reading: the small models are dominated by per-step overhead, which the in-graph "
            f"multi-step loop removes ({s_lo:.1f}-{s_hi:.1f}x). The wide model is matmul-bound; "
            "there the gain comes from fewer host round trips and, with XLA, fused elementwise "
            f"ops ({b_lo:.1f}-{b_hi:.1f}x when the cores are not contended). FLOP/s utilisation "
            f"is meaningful only for the wide model: {_pct_span(f_lo, f_hi)} of the measured "
            "matmul roof. The named models cannot approach the roof at batch "
            f"{single[0]['batch']}: their layers are 32-256 wide, too narrow whatever the loop.",
        ]
    return lines + [""]


def cluster_section(cluster: list[dict], meta: dict) -> list[str]:
    first = cluster[0]
    lines = [
        "## Local clusters",
        "",
        f"`bench/training/bench_cluster.py`: MLP (256, 256), {_params(first['params'])} "
        f"parameters, global batch 256, {first['steps']} steps, synthetic data; examples/s from "
        "the chief's training loop (startup excluded). All tasks run on the same 2 cores.",
        "",
    ]
    if meta.get("load_average", {}).get("cluster"):
        lines += [f"Load average (1 min) before / after: {meta['load_average']['cluster']}.", ""]
    lines += ["| case | examples/s | all-reduce bytes/step/worker | eval acc |",
              "|---|---:|---:|---:|"]
    by_case = {r["case"]: r for r in cluster}
    for r in cluster:
        wire = ("n/a (pull/push to PS)" if "PS" in r["case"]
                else f"{r['allreduce_bytes_per_step_per_worker']:,}")
        lines.append(f"| {CLUSTER_CASES.get(r['case'], r['case'])} | "
                     f"{r['examples_per_sec']:,.0f} | {wire} | {r['eval_accuracy']:.3f} |")
    one = by_case.get("1 process (one_device)")
    fp32 = by_case.get("2 workers mirrored fp32")
    fp16 = by_case.get("2 workers mirrored fp16 all-reduce")
    lines += [
        "",
        "All-reduce bytes are computed from the gradient sizes, not measured on the wire: a ring "
        "all-reduce sends 2(n-1)/n of the gradient buffer per worker per step; fp16 halves it"
        + (f" ({fp32['allreduce_bytes_per_step_per_worker'] / 1e3:.0f} KB -> "
           f"{fp16['allreduce_bytes_per_step_per_worker'] / 1e3:.0f} KB)." if fp32 and fp16
           else "."),
    ]
    if one and fp32 and fp16:
        scale = fp32["examples_per_sec"] / one["examples_per_sec"]
        gain = fp16["examples_per_sec"] / fp32["examples_per_sec"] - 1
        lines += [
            "",
            "Honest reading: on one 2-core machine, two workers do not scale: each worker gets "
            "one core and pays for gRPC over loopback and the per-step collective, so 2 workers "
            f"reach {scale:.2f}x of one process. fp16 compression halves the bytes on the wire "
            f"but on loopback the casts cost about what the bytes save ({gain:+.0%} here); it is "
            "meant for real networks. These runs check the plumbing (TF_CONFIG, collectives, "
            "coordinator, per-worker datasets) and give a baseline, not a scaling result.",
        ]
    return lines + [""]


def sweep_section(sweep: dict) -> list[str]:
    trials, summary = sweep["trials"], sweep["summary"]
    n = len(trials)
    passed = sum(bool(t["passed"]) for t in trials)
    restarts = sorted({t["restarts"] for t in trials})
    complete = sum(t["steps"] == t["planned"] for t in trials)
    planned = sorted({t["planned"] for t in trials})
    steps = sorted({t["steps"] for t in trials if t["steps"] is not None})
    equal = sum(bool(t["weights_equal"]) for t in trials)
    seconds = sorted(t["seconds"] for t in trials)
    return [
        "## Reliability sweep",
        "",
        f"`bench/training/sweep_faults.py --trials {summary.get('trials', n)}`: 2-worker "
        f"multi-worker mirrored run ({_span([str(p) for p in planned])} steps, backups every 4 "
        "steps), worker 1 killed with SIGKILL at a random step; the launcher restarts the group "
        "from the last backup.",
        "",
        "| trials | passed | restarts per trial | completed steps = planned | final weights "
        "bitwise equal to the uninterrupted run |",
        "|---:|---:|---:|---|---|",
        f"| {n} | **{passed}** | {_span([str(r) for r in restarts])} | {complete}/{n} "
        f"({_span([str(s) for s in steps])} = {_span([str(p) for p in planned])}) "
        f"| {equal}/{n} |",
        "",
        f"Kill steps (seed {summary.get('seed', 'not recorded')}): "
        f"{', '.join(str(t['kill_step']) for t in trials)}; resumed from "
        f"{', '.join(str(t['resumed_from']) for t in trials)}. Each trial takes "
        f"{seconds[0]:.0f}-{seconds[-1]:.0f} s, most of it process start-up (TensorFlow import, "
        "collective setup) twice.",
        "",
    ]


def _ex(value: Any) -> str:
    return f"{value:,} ex/s" if value is not None else "not measured"


def _on(value: Any) -> str:
    return "not recorded" if value is None else ("on" if value else "off")


def _x(value: Any) -> str:
    return f"{value:.2f}x" if value is not None else "n/a"


def _fit_path(om: dict) -> str:
    """Which `fit` run the figure is: the fastest path when the run recorded it."""
    if "keras_fit_fastest_path" in om:
        return om["keras_fit_fastest_path"]
    return _on(om.get("keras_fit_jit_compile"))  # older runs: whether Keras' auto chose XLA


def _fit_verdict(om: dict) -> float:
    """The ratio a goal is judged on: Baton's fastest path against `fit`'s (each chosen by its
    median over the repeats, when the run recorded it; Baton's default path in older runs),
    the best-of figure, or the median of the repeats' own ratios when that is lower (a best-of
    on each side can pair one side's lucky run)."""
    key = "speedup_xla" if om.get("baton_fastest_path") == "xla" else "speedup"
    return min(om[key], om.get(f"{key}_median_of_repeats", om[key]))


def _fit_goal_text(om: dict, side: bool) -> str:
    """The figures behind one own-model goal's verdict, in words."""
    bound = (f"; bounded by its input: the dataset drawn alone ran "
             f"{om['input_ceiling_vs_fit']:.2f}x `fit`'s fastest, the most any loop reading it "
             "could reach with a model that cost nothing"
             if "input_ceiling_vs_fit" in om and _fit_verdict(om) < FIT_SPEEDUP_GOAL
             and "baton_fastest_path" in om else "")
    tail = ((f"; {om['speedup_vs_fit_side_work']:.2f}x `fit` doing the same side work"
             + (" (XLA off)" if "baton_fastest_path" in om else "") if side else "")
            + "; both validate every epoch, compiled with the same loss and optimizer" + bound
            + ")")
    if "baton_fastest_path" not in om:  # runs before both loops' paths were chosen by median
        return (f"({om['speedup']:.2f}x the bare `fit` fast path"
                + (f", median of the repeats' own ratios {om['speedup_median_of_repeats']:.2f}x "
                   "(the verdict takes the lower)" if "speedup_median_of_repeats" in om else "")
                + f"; {_x(om.get('speedup_xla'))} with "
                + (f"Baton's XLA on, against the same `fit` ({om['keras_fit_fastest_path']})"
                   if "keras_fit_fastest_path" in om else
                   f"Baton's XLA on, `fit`'s XLA {_on(om.get('keras_fit_jit_compile'))}")
                + tail)
    xla = om["baton_fastest_path"] == "xla"
    first, second = (("speedup_xla", "XLA on (`jit_compile: true`)"),
                     ("speedup", "XLA off, the default")) if xla else \
        (("speedup", "XLA off, the default"), ("speedup_xla", "XLA on (`jit_compile: true`)"))
    return (f"(Baton's fastest path, {first[1]}: {om[first[0]]:.2f}x `fit`'s fastest "
            f"({om['keras_fit_fastest_path']}), median of the repeats' own ratios "
            f"{om[first[0] + '_median_of_repeats']:.2f}x (the verdict takes the lower); "
            f"Baton's other path, {second[1]}: {om[second[0]]:.2f}x, median "
            f"{om[second[0] + '_median_of_repeats']:.2f}x" + tail)


def own_model_section(own: dict) -> list[str]:
    cb = own["callbacks"]
    rows = own["own_model"] if isinstance(own["own_model"], list) else [own["own_model"]]
    cost = cb["cost"]
    spread = cb.get("cost_per_repeat")
    cost_text = (f"{cost * 100:.1f}% slower" if cost > 0 else
                 f"{-cost * 100:.1f}% faster (within the noise of a shared machine)"
                 if cost > -0.05 else f"{-cost * 100:.1f}% faster")
    if spread:
        cost_text += (f"; median of {len(spread)} repeats, which ranged "
                      f"{min(spread) * 100:+.1f}% to {max(spread) * 100:+.1f}%")
    met_cb = cost <= CALLBACK_COST_GOAL
    side = all("keras_fit_side_work_examples_per_sec" in om for om in rows)
    return [
        "## Own model and the callback list",
        "",
        "`bench/training/bench_own_model.py`, side by side in one process, interleaved, fresh "
        "models. Examples/s over the steady state, epoch 2 to the last (tracing, in epoch 1, is "
        "out), with the eval split every epoch, a backup every epoch, TensorBoard summaries and "
        "progress on (the train stage's in-process side work; the status file is the "
        "multi-process launcher's)."
        + (f" Load average at the start: {', '.join(str(x) for x in own['load_average_start'])}."
           if own.get("load_average_start") and not own.get("load_average_starts") else "")
        + (" Run in parts, each holding the machine's benchmark lock; load average at the start "
           "of each: " + "; ".join(f"{part} {', '.join(str(x) for x in load)}"
                                   for part, load in own["load_average_starts"].items()) + "."
           if own.get("load_average_starts") else ""),
        "",
        "| case | before (side work inline) | now (Keras CallbackList) | cost |",
        "|---|---:|---:|---:|",
        f"| {cb['case']}, {cb['epochs']} epochs x {cb['examples_per_epoch']:,} | "
        f"{cb['before_examples_per_sec']:,} ex/s | {cb['callbacks_examples_per_sec']:,} ex/s | "
        f"{cost_text} |",
        "",
        *([f"Like for like: both write the chunk's TensorBoard scalars at every chunk end, as "
           f"the inline loop did. With today's default cadence (every "
           f"{cb['summary_every_steps']} steps, tf.estimator's `save_summary_steps`) the list "
           f"runs {cb['callbacks_default_examples_per_sec']:,} ex/s"
           + (f" (median cost {cb['cost_default'] * 100:+.1f}%)." if "cost_default" in cb
              else "."), ""]
          if "callbacks_default_examples_per_sec" in cb else []),
        *(["Both loops trace their backup write from the first save and write it on the "
           "training thread (the inline loop had no background backups): the comparison is of "
           "the callback list alone, not of the background writes the loop now makes "
           "(strategies.snapshot).", ""] if cb.get("backup_writes") else []),
        "| user model | Baton's loop | Baton's loop, XLA | Keras `model.fit`, its fastest path "
        "| speedup | speedup, XLA |"
        + (" `fit` + Keras' own backup and TensorBoard | speedup, like for like |" if side
           else ""),
        "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if side else ""),
        *[f"| {om['case']}, {om['epochs']} epochs x {om['examples_per_epoch']:,} | "
          f"{om['baton_examples_per_sec']:,} ex/s | "
          f"{_ex(om.get('baton_xla_examples_per_sec'))} | "
          f"{om['keras_fit_examples_per_sec']:,} ex/s ({_fit_path(om)}) | "
          f"**{om['speedup']:.2f}x**{_vs_defaults(om)} | {_x(om.get('speedup_xla'))} |"
          + (f" {om['keras_fit_side_work_examples_per_sec']:,} ex/s | "
             f"{om['speedup_vs_fit_side_work']:.2f}x |" if side else "")
          for om in rows],
        "",
        ("`fit` ex/s is the fastest of its defaults, `steps_per_execution` equal to Baton's "
         "chunk (Keras' documented fast path for small models) and the same with "
         "`jit_compile=True` (Keras' `\"auto\"` leaves XLA off for this model)"
         + (", the fastest being the path with the higher median over the repeats"
            if all("fastest_path_by" in om for om in rows) else "")
         + "; the path that won is in parentheses, the speedup against `fit`'s defaults beside "
         "the bold one. Baton's loop, XLA, compiles the whole chunk of steps as one XLA program "
         "(`jit_compile: true`, one replica)."
         if all("keras_fit_spe_xla_examples_per_sec" in om for om in rows) else
         "`fit` ex/s is the faster of its defaults and `steps_per_execution` equal to Baton's "
         "chunk (Keras' documented fast path for small models); the speedup against `fit`'s "
         "defaults is in parentheses."
         if all("keras_fit_spe_examples_per_sec" in om for om in rows) else
         "`fit` ran with its defaults (`steps_per_execution=1`) in this run; its documented fast "
         "path for small models, `steps_per_execution`, was not measured, so these ratios "
         "flatter Baton."),
        *(["The like-for-like `fit` adds `keras.callbacks.BackupAndRestore` every epoch (which "
           "saves the weights only, not the optimizer's state that Baton's backup keeps, and "
           "overwrites in place) and `keras.callbacks.TensorBoard(update_freq=100)`, with "
           "`steps_per_execution`. The bold speedup is against the bare `fit`, never this one."]
          if side else []),
        "",
        f"- Goal: the callback list costs at most {CALLBACK_COST_GOAL:.0%} of the loop's "
        f"examples/s on the default MLP: **{'met' if met_cb else 'missed'}** ({cost_text}).",
        *[f"- Goal: at least {FIT_SPEEDUP_GOAL}x Keras `model.fit` on the same user model, "
          f"batch {om.get('batch', '?')}"
          + (f", {INPUT_NAMES.get(om['input'], om['input'])}" if om.get("input") else "")
          + f": **{'met' if _fit_verdict(om) >= FIT_SPEEDUP_GOAL else 'missed'}** "
          + _fit_goal_text(om, side) + "."
          for om in rows],
        *([f"- Each side's fastest path is the one with the higher median over the "
           f"{rows[0].get('repeats', 'several')} repeats, held for every ratio (taking the "
           "faster of two paths in each repeat would pair one side's luckiest runs with the "
           "other's single run), and every other repeat ran the cases in the reverse order. "
           "XLA's compile (~1-3 s, once a run: a shorter chunk, as the epoch's 4-step tail, is "
           "padded to the 20 steps and runs the same program) falls in epoch 1 for both "
           "loops, as `fit`'s does; it is why XLA is not Baton's default: a short run spends "
           "more compiling than it saves."]
          if all("baton_fastest_path" in om for om in rows) else []),
        *(["- Each repeat's own ratio (Baton over that repeat's fastest `fit`; a repeat's runs "
           "are neighbours in time), beside the best-of figure above: "
           + "; ".join(f"batch {om.get('batch', '?')}, {INPUT_NAMES.get(om.get('input'), '?')}: "
                       f"{', '.join(f'{x:.2f}' for x in om['speedup_per_repeat'])} "
                       f"(median {om['speedup_median_of_repeats']:.2f}x)"
                       + (f", with XLA {', '.join(f'{x:.2f}' for x in om['speedup_xla_per_repeat'])}"
                          f" (median {om['speedup_xla_median_of_repeats']:.2f}x)"
                          if "speedup_xla_per_repeat" in om else "")
                       for om in rows)
           + "."] if all("speedup_per_repeat" in om for om in rows) else []),
        *(["- The dataset alone (drawn in one in-graph loop, no model) is the ceiling of any "
           "loop reading it: "
           + "; ".join(f"batch {om.get('batch', '?')}, {INPUT_NAMES.get(om.get('input'), '?')}: "
                       f"{om['input_alone_examples_per_sec']:,} ex/s, {om['input_ceiling_vs_fit']:.2f}x "
                       f"`fit`, Baton's loop at {om['baton_share_of_input']:.0%} of it"
                       for om in rows)
           + ". Per-row tf.data (one element per row, shuffled and batched) on 2 cores competes "
           "with the step for the cores; where its ceiling is near 1.5x `fit`, no loop reading "
           "it can be far above that. The train stage reads columnar chunks "
           "(graphs.input_pipeline: sliced and concatenated, no per-row work), which is what a "
           "pipeline run feeds the loop; both loops read the same dataset in each row of the "
           "table."] if all("input_alone_examples_per_sec" in om for om in rows) else
          ["- The input pipeline decides the small-model figures. Per-row tf.data (one element "
           "per row, shuffled and batched) competes with the step for the 2 cores, the more so "
           "the faster the step runs (at batch 256 it holds both loops below their columnar "
           "figures). The train stage reads columnar chunks (graphs.input_pipeline: sliced and "
           "concatenated, no per-row work), which is what a pipeline run feeds the loop; both "
           "loops read the same dataset in each row of the table."]
          if len({om.get("input") for om in rows} - {None}) > 1 else []),
        "- The machine is shared (2 cores): consecutive runs of this benchmark moved `fit` by up "
        "to 1.7x and the ratios with it; compare runs before reading one figure as a trend.",
        *(WHERE_THE_TIME_GOES if "load_average_start" in own or "load_average_starts" in own
          else WHERE_IT_WENT),
        "",
    ]


def step_section(res: dict) -> list[str]:
    """bench_step_vs_fit.py: the compiled multi-step functions alone, calls interleaved."""
    rows = res["steps"]
    out = [
        "### The steps alone",
        "",
        "`bench/training/bench_step_vs_fit.py`: the own-model example's compiled functions "
        "alone, 20 steps a call, each on its own fresh model and iterator over the same "
        "columnar dataset, called in rounds (4 calls each, the order reversed every other "
        "round) so that all see the same moments of the shared machine; milliseconds a step, "
        "the median over rounds. Keras' `train_function` (`steps_per_execution=20`) is called "
        "directly, without `fit`'s callbacks, logs and epoch bookkeeping around it, which "
        "favours `fit`."
        + (f" Load average at the start: {', '.join(str(x) for x in res['load_average_start'])}."
           if res.get("load_average_start") else ""),
        "",
        "| batch | Baton's chunk | Baton's chunk, XLA | `fit`'s function | `fit`'s function, "
        "`jit_compile` | speedup | speedup, XLA |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        m = r["ms_per_step_median"]
        out.append(f"| {r['batch']} | {m['baton']:.3f} ms | {m['baton_xla']:.3f} ms | "
                   f"{m['fit']:.3f} ms | {m['fit_xla']:.3f} ms | {r['speedup']:.2f}x | "
                   f"{r['speedup_xla']:.2f}x |")
    out += [
        "",
        "The speedups are over `fit`'s faster function. Where Baton's default chunk is near "
        "`fit`'s function (" + ", ".join(f"batch {r['batch']}: {r['speedup']:.2f}x"
                                          for r in rows) + "), both run the same kernels "
        "and the whole loop's lead is what `fit` does around its function (per epoch: a new "
        "validation iterator, its callbacks and logs) and Baton does not: a lead that shrinks "
        "as the epoch grows. The XLA chunk (one replica: the chunk's batches read first, then "
        "every step inside one XLA program) fuses the step itself, which no executor setting "
        "does (" + ", ".join(f"batch {r['batch']}: {r['speedup_xla']:.2f}x"
                             for r in rows) + ").",
        "",
    ]
    return out


# Written by hand from the profiles behind the run that recorded `load_average_start`
# (bench_chunk_vs_fit.py, TF's profiler and run metadata, timers around the loop's calls).
WHERE_THE_TIME_GOES = [
    "- Where the time goes, and what changed (profiled by hand: op counts from TensorFlow's run "
    "metadata, its profiler's trace, timers around the loop's calls). Both loops run the same "
    "~550-650 executed ops per step (Keras 3's Adam is ~20 small ops per variable in both), "
    "and at this model's size dispatching them is most of a step: the matmuls are ~15% of it. "
    "TensorFlow's single-threaded executor (graphs.executor) runs the same kernels without "
    "per-op scheduling: the bare chunk went from ~95-108k to ~155-173k ex/s at batch 32 and "
    "from ~570k to ~590-620k at 256 (`fit`'s fast path: 62-79k and 380-450k). It is picked for small "
    "models only (at most 25k parameters, no convolution): its loop body loses oneDNN's "
    "kernels, and an MLP (256, 256) ran 0.75x, the (1024, 1024, 512) one 0.43-0.65x with it.",
    "- TensorFlow's fused `ResourceApplyAdam` (one kernel per variable, the same formula) was "
    "tried in place of Keras' update: no faster here (94k vs 98k ex/s bare, and 99k vs 160k "
    "under the single-threaded executor), and it rounds `1 - beta` differently from Keras, so "
    "it is not used. XLA compiled once per step did not help either (85k at batch 32).",
    "- Batch 256, columnar input, timed around each of the loop's calls (2 runs, load ~1): an "
    "epoch (64 steps) took 42-48 ms. The four chunk calls were ~77% of it (30-33 ms, ~0.47 ms "
    "a step, ~545k ex/s bare), the eval pass 3.4-3.7 ms, the epoch-end callbacks 5.1-5.4 ms "
    "(the backup 3.1-3.9 ms of it on the training thread, the summaries ~1 ms), the chunk-end "
    "callbacks ~0.25 ms a chunk; the loop's own Python between calls under 0.1 ms a chunk. "
    "Backups are now written in the background (strategies.snapshot): the training thread "
    "copies the variables (~1 ms a save) and a backup thread writes them; the first save's "
    "write, traced, had fallen inside the timed window (~100 ms: the epoch timer runs before "
    "the backup at epoch 1's end) and now costs the training thread ~26 ms. Same process, 3 "
    "runs each: 403-423k ex/s writing on the training thread, 423-464k in the background.",
    "- Tried at batch 256 and not adopted: TensorFlow's default executor in place of the "
    "single-threaded one (356-374k vs 339-391k ex/s, equal within the noise, so `executor: "
    "auto`'s choice does not matter there); XLA compiled once per step (`jit_scope: step`, the "
    "chunk 7.8-9.0 ms with it on the single-threaded executor, 8.0-9.3 ms without; 12 ms on the "
    "default executor): every step crossed from TensorFlow's executor into XLA and back, which "
    "cost what the fusion saved. XLA now compiles the whole chunk as one program on one "
    "replica (graphs.steps, `jit_scope: chunk`: the chunk's batches read first, then XLA's own "
    "loop runs every step), which is the `XLA` column above and the steps alone below. It stays "
    "a switch (`jit_compile: true`), as Keras leaves XLA off on a CPU-only machine: its compile "
    "(~1-3 s on 2 cores, once a run) is more than a short run saves.",
    "- With XLA off, batch 256 is at the 1.5x line, not past it. Runs of the bench's batch-256 "
    "cases before this one, each best of 3 with `fit`'s faster path taken per repeat "
    "(2026-12-02/03): columnar 1.38x, 1.52x, 1.72x, 1.43x, 1.44x, 1.38x; per-row 1.21x, 1.48x, "
    "1.35x, 1.51x, 1.63x, 1.49x. The machine ran at about half its speed of the day before in "
    "the runs of 2026-12-03 afternoon (Baton's columnar loop 205-267k ex/s against 417k, `fit` "
    "143-156k against 274k, at a load average under 1.7 and no CPU steal), so read the ratios, "
    "not the rates. Why it stays near the line: the steps alone (below) show Baton's default "
    "chunk near `fit`'s own function at batch 256, the same kernels on both sides, so the "
    "loop's lead there is what `fit` does around its function each epoch; an epoch is 64 steps "
    "(~35-65 ms), of which Baton's eval (~4 ms), backup copy (~1 ms on the training thread), "
    "summaries (~1 ms) and chunk ends are ~10-20%, and on an epoch of real size that share "
    "shrinks. The bench keeps its 16,384-example epochs, as every earlier run did. The epoch's "
    "TensorBoard scalars are written in one traced call (graphs.summaries.ScalarWriter: "
    "2.0-2.4 ms an epoch before, 1.3 ms after, timed around the callback); the like-for-like "
    "callback comparison above writes the chunk scalars at every chunk end in both loops, "
    "which is why the list runs faster than the inline loop did.",
    "- Per-row tf.data input at batch 256 bounds every loop: drawn alone, with no model, it "
    "ran at 1.8x `fit` in this run (1.5x in the run before; the ceiling bullet above), and "
    "Baton's XLA loop reached 92% of it. Both loops read that same dataset; the train stage "
    "reads columnar chunks.",
]
WHERE_IT_WENT = [  # the text of the runs before the executor work
    "- Where the time goes (timed by hand around the loop's calls, batch 32, 12 epochs): the "
    "chunk calls alone (bench/training/bench_chunk_vs_fit.py, no side work) run 1.44-1.53x "
    "`fit`'s fast path at batch 32 and ~1.1x at 256. Two per-epoch costs were cut on the way: "
    "the eval pass looped over its dataset inside the `tf.function` (63 ms per eval of 4,096 "
    "examples; with the iterator made eagerly, as Keras does, 13 ms) and every backup was an "
    "eager checkpoint write (20-30 ms; traced after six saves: 3-5 ms). An epoch here is "
    "16,384 examples (64 steps at batch 256, ~0.1 s), so per-epoch work weighs far more "
    "than on a real dataset.",
]


def elastic_section(rows: list[dict]) -> list[str]:
    """bench/training/elastic.py: examples/s of each group size, the step count, the events."""
    lines = [
        "## Elastic size",
        "",
        "`bench/training/elastic.py`: the bench_cluster.py model (MLP (256, 256), global batch 256, "
        "synthetic data) on 2 multi-worker-mirrored workers with `min_workers 1`, `backup_every "
        "40`; worker:1's node is lost for good (`:lost`). Examples/s per segment are the "
        "launcher's, from the chief's status file between the first chunk end and the last "
        "report (startup, restore and tracing left out). Each emulated node keeps 1 of the 2 "
        "cores after the loss, as a lost node takes its cores with it.",
        "",
        "| case | segments: workers, resumed from, ex/s | steps / planned | events | wall s | "
        "load avg |",
        "|---|---|---:|---|---:|---|",
    ]
    for r in rows:
        segs = "; ".join(
            f"{s['workers']}w from {s['resumed_from']}: "
            + ("?" if s["examples_per_sec"] is None else f"{s['examples_per_sec']:,.0f}")
            for s in r["segments"])
        events = "; ".join(
            f"{e['kind']} at {e['step']} ({e['workers_before']}->{e['workers_after']}, resumed "
            f"{e['resumed_from']}, recomputed {e['steps_recomputed']})" for e in r["elastic"])
        load = r.get("loadavg_before", ["?"])[0]
        lines.append(f"| {r['case']} ({r['fault']}"
                     + (f", replacement after {r['replacement_after_s']:g} s"
                        if r.get("replacement_after_s") is not None else "")
                     + f") | {segs} | {r['steps']} / {r['planned_steps']}"
                     + ("" if r["exact"] else " **not exact**")
                     + f" | {events} | {r['wall_seconds']} | {load} |")
    exact = all(r["exact"] for r in rows)
    lines += ["", f"Reading: the step count is {'exact in every case' if exact else 'NOT exact'}; "
              "`steps_recomputed` counts the steps between the backup resumed from and the step "
              "reached (0 when the loss falls on a backup step or the group stopped to save). An "
              "event's step is the last one the chief had reported when the launcher saw it: "
              "a node lost inside a chunk stops the group at that chunk's start (its steps "
              "never complete without the lost worker's gradients), and an admission asks the "
              "group to save at its next chunk end and restarts from there (`resumed`)."]
    first = rows[0]["segments"]
    if len(first) >= 2 and first[0]["examples_per_sec"] and first[1]["examples_per_sec"]:
        ratio = first[1]["examples_per_sec"] / first[0]["examples_per_sec"]
        lines[-1] += f" After the loss one worker ran at {ratio:.2f}x the two workers' examples/s."
        if ratio >= 1:
            lines[-1] += (
                " On this machine two processes sharing 2 cores pay an all-reduce that costs "
                "more than the second core brings (the Local clusters table: 2 workers vs 1 "
                "process), so losing one is no slowdown here; across real nodes with a model "
                "worth distributing the ratio is expected below 1 (not measured here).")
        lines[-1] += (
            " Most of the wall time is group starts (TensorFlow's import and the collective "
            "setup), on a machine shared with other jobs (load average in the table).")
    lines.append("")
    return lines


def balance_section(bal: dict, emulations: dict | None = None, workload: str = "") -> list[str]:
    """bench_balance.py's section (report_balance.py, beside this file), with profile_step.py's
    calibration of the emulations."""
    import sys

    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from report_balance import balance_section as section

    return section(bal, emulations, workload)


def auto_workers_section(res: dict) -> list[str]:
    """bench/training/bench_auto_workers.py: the probe's table and choice, then each
    alternative trained in full, and whether the choice was right."""
    lines = [
        "## workers: auto",
        "",
        f"`bench/training/bench_auto_workers.py` ({res['started']}, load average at start "
        f"{res['load_at_start'][0]}): the train stage with `workers: auto, max_workers: 2` on "
        f"{res['model']}, {res['rows']:,} rows, global batch {res['global_batch']}, "
        f"{res['epochs']} epochs; each probe is one warm-up chunk (10 steps) plus "
        f"{res['probe_steps']} timed steps. Every case runs in a fresh process. Probe figures "
        "cover the timed window only; a full run's ex/s is the training loop's (startup "
        "excluded) and its J/example is the whole stage's energy (startup included) over the "
        "examples trained.",
        "",
        "| case | candidate | probe ex/s | probe J/example | probe s | chosen |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in res["runs"]:
        probe = r.get("probe")
        if not probe:
            continue
        for c in probe["candidates"]:
            chosen = c["workers"] == probe["chosen"]["workers"]
            lines.append(
                f"| {r['case']} ({probe['objective']}) | {c['workers']} worker"
                f"{'s' if c['workers'] > 1 else ''} ({c['strategy']}) | "
                f"{c['examples_per_sec']:,.0f} | {c['j_per_example']:.3g} | {c['wall_s']:.1f} | "
                f"{'**yes**' if chosen else ''} |")
    lines += [
        "",
        "| case | trained with | steps | ex/s (loop) | stage wall s | stage CPU s | energy J | "
        "J/example | eval acc | energy method |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in res["runs"]:
        lines.append(
            f"| {r['case']} | {r['workers']} worker{'s' if r['workers'] > 1 else ''} "
            f"({r['strategy']}) | {r['steps']} | {r['examples_per_sec']:,.0f} | "
            f"{r['stage_wall_s']} | {r['stage_cpu_s']} | {r['energy_j']:,.0f} | "
            f"{r['j_per_example']:.3g} | {r['eval_accuracy']} | {r['energy_method']} |")
    lines.append("")
    for case, v in res.get("verdict", {}).items():
        reason = next(r["probe"]["reason"] for r in res["runs"] if r["case"] == case)
        lines.append(
            f"- {case}: the probe said \"{reason}\"; in full runs the best by {v['by']} was "
            f"{v['full_run_best']} worker(s): the choice was "
            + ("**right**." if v["right"] else "**wrong**."))
    full = {r["workers"]: r for r in res["runs"] if r["case"].startswith("full-")}
    autos = [r for r in res["runs"] if "probe" in r and r["workers"] in full]
    if autos:
        extra = [f"{r['case']} {r['energy_j'] / full[r['workers']]['energy_j']:.1f}x the energy "
                 f"and {r['stage_wall_s'] / full[r['workers']]['stage_wall_s']:.1f}x the wall time"
                 for r in autos]
        ones = [c["examples_per_sec"] for r in autos for c in r["probe"]["candidates"]
                if c["workers"] == 1]
        lines += [
            "",
            "Reading: the probe's absolute examples/s are not the full run's: the probe times "
            "steady steps only, while a run's loop figure includes the first chunk's tracing and "
            "each epoch's evaluation; and on this shared machine the same candidate probed "
            f"{min(ones):,.0f} to {max(ones):,.0f} ex/s in two probes minutes apart. What the "
            "probe has to get right is the order, and the margins here are wide. Its cost is "
            "mostly the cluster candidate's startup (TensorFlow import, collective setup): "
            "against a full run of the chosen topology without probing, the auto stage took "
            + "; ".join(extra) + " (the stage's energy includes the probes). On a job this "
            "short (374 steps) the probe costs more than it can save; it is meant for runs of "
            "minutes to hours, where those seconds are small and a wrong fixed choice (here 2 "
            f"workers: {full[2]['examples_per_sec'] / full[1]['examples_per_sec']:.2f}x the "
            "speed of 1 process) is not." if 1 in full and 2 in full else "",
        ]
    lines.append("")
    return lines


def render(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    lines = ["# Training benchmarks", ""]
    intro = ("Written by `bench/training/report.py` from bench/training/results/ (the last "
             "`python bench/training/run_bench.py`). Machine: 2 CPU cores, no GPU, shared with "
             "other jobs, so absolute numbers move between runs; compare the ratios, measured side "
             "by side in one run.")
    if meta:
        intro += (f" Run {meta.get('date', '?')} on {meta.get('machine', '?')}, "
                  f"{meta.get('cpus', '?')} cores; TensorFlow {meta.get('tensorflow', '?')}, "
                  f"Keras {meta.get('keras', '?')}.")
    lines += [intro, ""]
    if results.get("single"):
        lines += single_section(results["single"], meta)
    if results.get("cluster"):
        lines += cluster_section(results["cluster"], meta)
    if results.get("sweep", {}).get("trials"):
        lines += sweep_section(results["sweep"])
    if results.get("own_model"):
        lines += own_model_section(results["own_model"])
    if results.get("step_vs_fit"):
        lines += step_section(results["step_vs_fit"])
    if results.get("elastic"):
        lines += elastic_section(results["elastic"])
    if results.get("balance"):
        lines += balance_section(results["balance"], results.get("balance_emulations"))
    if results.get("balance_cnn"):
        lines += balance_section(results["balance_cnn"], results.get("balance_cnn_emulations"),
                                 workload="an image model")
    if results.get("auto_workers"):
        lines += auto_workers_section(results["auto_workers"])
    earlier = EARLIER_RUNS if meta else EARLIER_RUNS + CONDITIONS_BY_HAND
    return "\n".join(lines) + "\n" + earlier


def write_report(results_dir: Path, out: Path) -> Path:
    out.write_text(render(load(results_dir)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=str(HERE / "results"))
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-training.md"))
    a = p.parse_args()
    print(f"wrote {write_report(Path(a.results), Path(a.out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
