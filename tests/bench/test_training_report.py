"""bench/training/report.py renders docs/benchmarks-training.md from the result files alone."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location(
        "bench_training_report", ROOT / "bench" / "training" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def single_row(kind, hidden, jit, ours, fit, params, fraction):
    return {"model": f"mlp {kind} ({', '.join(map(str, hidden))})", "baton_jit_compile": jit,
            "keras_fit_jit_compile": False, "hidden_units": list(hidden), "params": params,
            "batch": 128, "steps_per_execution": 50, "baton_examples_per_sec": ours,
            "keras_fit_examples_per_sec": fit, "speedup": round(ours / fit, 2),
            "baton_gflops": 1.0, "keras_fit_gflops": 0.5, "roof_gflops": 100.0,
            "baton_fraction_of_roof": fraction}


@pytest.fixture
def results(tmp_path):
    single = [
        single_row("default", (64, 32), False, 30_000, 10_000, 5540, 0.02),
        single_row("default", (64, 32), True, 33_000, 10_000, 5540, 0.4),
        single_row("wider", (256, 256), False, 12_000, 10_000, 79556, 0.1),
        single_row("wide", (1024, 1024, 512), False, 5_000, 4_000, 1626820, 0.5),
    ]
    cluster = [
        {"case": "1 process (one_device)", "examples_per_sec": 20000.0, "steps": 100,
         "params": 79556, "eval_accuracy": 0.95, "allreduce_bytes_per_step_per_worker": 0},
        {"case": "2 workers mirrored fp32", "examples_per_sec": 10000.0, "steps": 100,
         "params": 79556, "eval_accuracy": 0.9612, "allreduce_bytes_per_step_per_worker": 318224},
        {"case": "2 workers mirrored fp16 all-reduce", "examples_per_sec": 9000.0, "steps": 100,
         "params": 79556, "eval_accuracy": 0.96, "allreduce_bytes_per_step_per_worker": 159112},
        {"case": "2 workers + 1 PS", "examples_per_sec": 9500.0, "steps": 100, "params": 79556,
         "eval_accuracy": 0.94, "allreduce_bytes_per_step_per_worker": 0},
    ]
    trial = {"ok": True, "restarts": 1, "steps": 32, "planned": 32, "weights_equal": True,
             "passed": True}
    sweep = [{**trial, "trial": 0, "kill_step": 5, "resumed_from": 4, "seconds": 21.4},
             {**trial, "trial": 1, "kill_step": 9, "resumed_from": 8, "seconds": 30.6,
              "weights_equal": False, "passed": False},
             {"seed": 7, "trials": 2, "failures": 1}]
    (tmp_path / "single.json").write_text(json.dumps(single))
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sweep))
    return tmp_path


def test_tables_ratios_and_goals_come_from_the_results(report, results):
    text = report.render(report.load(results))
    assert "| MLP (64, 32) default | 5.5k | off | 30,000 | 10,000 | **3.00x** | 1.0 | 2.0% |" in text
    assert "| MLP (64, 32) default | 5.5k | on | 33,000 | 10,000 | **3.30x** | 1.0 | **40%** |" in text
    assert "% of roof (100 GFLOP/s)" in text and "batch 128" in text
    assert "- met: examples/s at least 1.5x `model.fit`, default MLP: **3.00x** (3.30x)" in text
    assert "- **missed**: examples/s at least 1.5x `model.fit`, wider MLP: **1.20x**" in text
    assert "- **missed**: 35% of the matmul roof, default MLP: **2.0%** (40%)" in text
    assert "- not a goal, the extra wide MLP: 1.25x `model.fit`, 50% of the roof (above" in text
    assert ("| 2 workers, multi-worker mirrored, fp32 all-reduce | 10,000 | 318,224 | 0.961 |"
            in text)
    assert "| 2 workers + 1 PS (ClusterCoordinator) | 9,500 | n/a (pull/push to PS) |" in text
    assert "(318 KB -> 159 KB)" in text and "reach 0.50x of one process" in text
    assert "(-10% here)" in text and "100 steps" in text
    assert "| 2 | **1** | 1 | 2/2 (32 = 32) | 1/2 |" in text
    assert "Kill steps (seed 7): 5, 9; resumed from 4, 8. Each trial takes 21-31 s" in text


def test_earlier_runs_are_kept_and_marked(report, results):
    text = report.render(report.load(results))
    head, earlier = text.split("## From earlier runs (hand-recorded; not in")
    assert "69,668 vs 33,733" in earlier and "8,568 / 7,731 / 6,035 / 7,846" in earlier
    assert "69,668" not in head
    assert "load average\n  ~1.2" in earlier  # no meta.json: the hand-recorded conditions
    (results / "meta.json").write_text(json.dumps({
        "date": "2026-01-02 03:04", "machine": "x86_64", "cpus": 2, "tensorflow": "2.21.0",
        "keras": "3.15.0", "load_average": {"single": "0.8 / 1.1", "cluster": "1.1 / 1.9"}}))
    text = report.render(report.load(results))
    assert "Run 2026-01-02 03:04 on x86_64, 2 cores; TensorFlow 2.21.0, Keras 3.15.0." in text
    assert "Load average (1 min) before / after: 0.8 / 1.1." in text
    assert "~1.2" not in text and "69,668 vs 33,733" in text


def test_checked_in_document_is_the_rendering_of_the_checked_in_results(report):
    results = report.load(ROOT / "bench" / "training" / "results")
    assert report.render(results) == (ROOT / "docs" / "benchmarks-training.md").read_text()


def test_own_model_section_states_both_goals_from_the_results(report, results):
    own = {"callbacks": {"case": "default MLP (64, 32)", "epochs": 6, "examples_per_epoch": 16384,
                         "before_examples_per_sec": 10_000, "callbacks_examples_per_sec": 9_400,
                         "cost": 0.06},
           "own_model": [{"case": "examples/own_model", "epochs": 6, "examples_per_epoch": 16384,
                          "batch": 32, "baton_examples_per_sec": 12_000,
                          "keras_fit_examples_per_sec": 4_000, "speedup": 3.0},
                         {"case": "examples/own_model b256", "epochs": 6,
                          "examples_per_epoch": 16384, "batch": 256, "baton_examples_per_sec": 5_000,
                          "keras_fit_examples_per_sec": 4_000, "speedup": 1.25}]}
    (results / "own_model.json").write_text(json.dumps(own))
    text = report.render(report.load(results))
    assert "| default MLP (64, 32), 6 epochs x 16,384 | 10,000 ex/s | 9,400 ex/s | 6.0% slower |" in text
    assert "examples/s on the default MLP: **missed** (6.0% slower)" in text
    assert ("| examples/own_model, 6 epochs x 16,384 | 12,000 ex/s | not measured | 4,000 ex/s "
            "(not recorded) | **3.00x** | n/a |") in text
    assert ("on the same user model, batch 32: **met** (3.00x the bare `fit` fast path; n/a with "
            "Baton's XLA on") in text
    assert ("on the same user model, batch 256: **missed** (1.25x the bare `fit` fast path; n/a "
            "with Baton's XLA on") in text
    assert "like for like" not in text  # no side-work run recorded: no column for it
    # with the like-for-like run recorded, its ratio is shown beside the bare one, never instead
    for om, side in zip(own["own_model"], (2_000, 4_000), strict=True):
        om.update(keras_fit_side_work_examples_per_sec=side,
                  speedup_vs_fit_side_work=round(om["baton_examples_per_sec"] / side, 2))
    own["callbacks"]["cost_per_repeat"] = [0.06, -0.02, 0.1]
    (results / "own_model.json").write_text(json.dumps(own))
    text = report.render(report.load(results))
    assert "| **3.00x** | n/a | 2,000 ex/s | 6.00x |" in text
    assert "batch 256: **missed** (1.25x the bare `fit` fast path" in text
    assert "1.25x `fit` doing the same side work" in text
    assert "median of 3 repeats, which ranged -2.0% to +10.0%" in text


def _balance_runs(bench):
    q, sig = "worker:1@speed:0.6:2ms:quota", "worker:1@speed:0.5:10ms:signals"

    def run(mode, slowdown, ex, acc, rep, rates=None):
        return {"case": f"{mode}-{rep}", "balance": mode, "slowdown": slowdown or "none",
                "emulation": bench._emulation(slowdown), "examples_per_sec": ex,
                "steady_examples_per_sec": ex * 1.05, "eval_accuracy": acc,
                "final_batch": [4096, 4096], "rows_per_sec": rates, "rebalances": 0,
                "global_batch": 8192, "load_after": 1.0, "repeat": rep,
                "running_fraction": 0.5 if slowdown == sig else None}

    runs = []
    for rep, (q_auto, s_auto) in enumerate([(60.0, 62.0), (56.0, 70.0), (58.0, 60.0)]):
        runs += [run("off", None, 100.0, 0.98, rep), run("auto", None, 95.0 + rep, 0.98, rep),
                 run("off", q, 40.0, 0.98, rep), run("auto", q, q_auto, 0.97, rep, [80.0, 32.0]),
                 run("off", sig, 50.0, 0.98, rep),
                 run("auto", sig, s_auto, 0.97, rep, [80.0, 40.0])]
    return runs, q, sig


def _balance_file(bench, runs):
    return {"invocations": [{"started": "2026-12-03 08:00", "load_at_start": [1.0, 1.0, 1.0],
                             "batches": "8192:400"}],
            "cpu_count": 2, "model": "mlp", "epochs": 4, "slowdowns": ["a", "b"],
            "batches": [{"global_batch": 8192, "steps": 400}], "headline_batch": 8192,
            "runs": runs, "summary": bench.summarise(runs)}


@pytest.fixture
def bench_balance():
    spec = importlib.util.spec_from_file_location(
        "bench_balance", ROOT / "bench" / "training" / "bench_balance.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_balance_section_gives_medians_of_rounds_and_every_run(
        report, results, bench_balance):
    runs, q, sig = _balance_runs(bench_balance)
    (results / "balance.json").write_text(json.dumps(_balance_file(bench_balance, runs)))
    text = report.render(report.load(results))
    # not calibrated: the balancer's rates nearest to half (signals, 40/80) decide
    assert "on signals@0.5:10ms (not calibrated" in text
    # medians of three rounds: signals auto 62 (of 62, 70, 60) over off 50
    assert "**missed**: examples/s with `balance: auto` >= 1.4x `off`" in text
    assert ("**1.24x** (the lower of the ratio of medians 1.24x and the median of the 3 rounds' "
            "own ratios 1.24x; steady 1.24x)") in text
    assert "quota@0.6:2ms: auto 58 vs off 40 ex/s (**1.45x** [1.50, 1.40, 1.45]" in text
    assert "at full speed auto 96 vs off 100 ex/s (**0.96x** [0.95, 0.96, 0.97]" in text
    assert text.count("| 8192 | 2 | auto |") == 3  # every run of round 2 is listed
    assert "worker:1 let run 0.50 of the time" in text  # the launcher's count, signals only
    assert "worker:1 let run - of the time" in text


def test_the_balance_verdict_rests_on_the_least_favourable_emulation_at_half_speed(
        report, results, bench_balance):
    runs, q, sig = _balance_runs(bench_balance)
    (results / "balance.json").write_text(json.dumps(_balance_file(bench_balance, runs)))
    calib = {q: {"speed": 0.51, "best_split": {"x": 0.67, "step_ms": 80.0,
                                               "passes_ms": [70.0, 69.0], "stall_ms": 10.0}},
             sig: {"speed": 0.49, "best_split": {"x": 0.65, "step_ms": 90.0,
                                                 "passes_ms": [70.0, 72.0], "stall_ms": 18.0}}}
    (results / "balance_emulations.json").write_text(json.dumps(calib))
    text = report.render(report.load(results))
    # both within 0.05 of half speed: the smaller ratio (signals, 1.24x against 1.45x) decides
    assert "on signals@0.5:10ms (measured at 0.49 of worker:0's speed; the least favourable" in text
    assert "**missed**: examples/s with `balance: auto` >= 1.4x `off`" in text
    assert "| `worker:1@speed:0.6:2ms:quota` | 0.510 | 0.67 | 80.0 | 70.0 / 69.0 | 10.0 |" in text
    calib[sig]["speed"] = 0.40  # now only the quota is near half
    (results / "balance_emulations.json").write_text(json.dumps(calib))
    text = report.render(report.load(results))
    assert "on quota@0.6:2ms (measured at 0.51" in text
    assert "- met: examples/s with `balance: auto` >= 1.4x `off`" in text


def test_the_balance_verdict_states_the_most_any_split_gives_under_its_emulation(
        report, results, bench_balance):
    """From the calibration's in-graph chunk: `off` over the best fixed split. Below the goal
    it says no split reaches it; without `step_off` in the calibration it says nothing."""
    runs, q, sig = _balance_runs(bench_balance)
    (results / "balance.json").write_text(json.dumps(_balance_file(bench_balance, runs)))
    calib = {sig: {"speed": 0.49, "measured": "2026-12-03 10:10",
                   "best_split": {"x": 0.7, "step_ms": 94.0, "passes_ms": [80.0, 64.0],
                                  "stall_ms": 14.0},
                   "ms_per_step": [{"step_off": 117.5}, {"step_off": 118.0}]}}
    (results / "balance_emulations.json").write_text(json.dumps(calib))
    text = report.render(report.load(results))
    assert ("- the most any split gives under signals@0.5:10ms on this workload (profile_step.py, "
            "the chunk in-graph, 2026-12-03 10:10): `off` 118.0 ms a step over 94.0 ms at the "
            "best fixed split tried (w0 on 0.7 of the rows) = **1.26x**, against the loop's "
            "1.24x in its own runs: under this emulation no split reaches the goal") in text
    calib[sig]["ms_per_step"] = [{"step_off": 150.0}, {"step_off": 140.0}]  # 1.60x: no claim
    (results / "balance_emulations.json").write_text(json.dumps(calib))
    text = report.render(report.load(results))
    assert "= **1.60x**\n" in text
    del calib[sig]["ms_per_step"]
    (results / "balance_emulations.json").write_text(json.dumps(calib))
    assert "the most any split gives" not in report.render(report.load(results))


def test_the_balance_verdict_takes_the_lower_of_the_two_readings_of_the_rounds(
        report, results, bench_balance):
    """The ratio of the medians and the median of the rounds' own ratios differ when one
    round ran on a faster host: the verdict takes the lower, as the own-model goals do."""
    runs, q, sig = _balance_runs(bench_balance)
    for r in runs:  # signals, off 50, 60, 50 and auto 62, 70, 72: the rounds' ratios 1.24,
        # 1.17, 1.44 (median 1.24); the medians 70 over 50 (1.40)
        if r["slowdown"] == sig and r["balance"] == "off" and r["repeat"] == 1:
            r["examples_per_sec"] = 60.0
        if r["slowdown"] == sig and r["balance"] == "auto" and r["repeat"] == 2:
            r["examples_per_sec"] = 72.0
    (results / "balance.json").write_text(json.dumps(_balance_file(bench_balance, runs)))
    text = report.render(report.load(results))
    assert ("**missed**: examples/s with `balance: auto` >= 1.4x `off` with one worker at half "
            "speed: **1.24x** (the lower of the ratio of medians 1.40x and the median of the 3 "
            "rounds' own ratios 1.24x") in text


def test_an_image_model_round_gets_its_own_section_and_verdict(
        report, results, bench_balance):
    runs, q, sig = _balance_runs(bench_balance)
    (results / "balance.json").write_text(json.dumps(_balance_file(bench_balance, runs)))
    cnn = _balance_file(bench_balance, [r for r in runs if r["slowdown"] == sig])
    cnn["model"] = "cnn on 32x32x3 images"
    (results / "balance_cnn.json").write_text(json.dumps(cnn))
    text = report.render(report.load(results))
    assert "## Heterogeneous workers: `balance: auto` vs `off` (bench_balance.py)\n" in text
    assert "(bench_balance.py, an image model)" in text
    assert text.count("Goals (issue 14)") == 2
    assert "cnn on 32x32x3 images" in text
    assert text.count("Earlier figures (recorded by hand") == 1  # the MLP's, once


def test_profile_step_judges_an_emulation_by_its_speed_and_the_stall_at_the_best_split():
    spec = importlib.util.spec_from_file_location(
        "profile_step", ROOT / "bench" / "training" / "profile_step.py")
    prof = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prof)
    workers = [
        {"ms_per_step": {"pass": 50.0, "step_auto@0.6": 100.0, "pass@0.6": 60.0,
                         "step_auto@0.7": 90.0, "pass@0.7": 70.0}},
        {"ms_per_step": {"pass": 100.0, "step_auto@0.6": 101.0, "pass@0.6": 80.0,
                         "step_auto@0.7": 90.5, "pass@0.7": 60.0}},
    ]
    out = prof.summarise(workers, [0.6, 0.7])
    assert out["speed"] == 0.5  # worker:1's pass rate over worker:0's on the same rows
    # the later of the two chunk ends, less the longer pass at that split
    assert out["splits"]["0.6"] == {"step_ms": 101.0, "passes_ms": [60.0, 80.0], "stall_ms": 21.0}
    assert out["best_split"] == {"x": 0.7, "step_ms": 90.5, "passes_ms": [70.0, 60.0],
                                 "stall_ms": 20.5}


def test_own_model_section_names_fits_fastest_path_and_the_load(report, results):
    """A run that timed `fit` with XLA too says which `fit` path the figure is, and the load."""
    om = {"case": "examples/own_model", "epochs": 6, "examples_per_epoch": 16384, "batch": 256,
          "baton_examples_per_sec": 6_000, "keras_fit_examples_per_sec": 4_000, "speedup": 1.5,
          "keras_fit_spe_examples_per_sec": 3_500, "keras_fit_spe_xla_examples_per_sec": 4_000,
          "keras_fit_fastest_path": "steps_per_execution + jit_compile"}
    own = {"load_average_start": [0.5, 0.7, 1.1],
           "callbacks": {"case": "default MLP (64, 32)", "epochs": 6, "examples_per_epoch": 16384,
                         "before_examples_per_sec": 10_000, "callbacks_examples_per_sec": 9_900,
                         "cost": 0.01},
           "own_model": [om]}
    (results / "own_model.json").write_text(json.dumps(own))
    text = report.render(report.load(results))
    assert "4,000 ex/s (steps_per_execution + jit_compile) | **1.50x**" in text
    assert "the same with `jit_compile=True`" in text
    assert "Load average at the start: 0.5, 0.7, 1.1." in text
    assert "batch 256: **met** (1.50x the bare `fit` fast path" in text
    own["load_average_starts"] = {"callbacks": [1.0, 1.0, 1.0], "rows": [8.0, 4.0, 3.0]}
    (results / "own_model.json").write_text(json.dumps(own))
    text = report.render(report.load(results))
    assert "load average at the start of each: callbacks 1.0, 1.0, 1.0; rows 8.0, 4.0, 3.0." in text


def test_own_model_goal_rests_on_each_sides_fastest_path_chosen_by_median(report, results):
    """A run that recorded both of Baton's paths is judged on the one with the higher median
    against `fit`'s fastest, the lower of its best-of and median ratios; the other path is
    shown beside it."""
    om = {"case": "examples/own_model", "epochs": 6, "examples_per_epoch": 16384, "batch": 256,
          "repeats": 5, "baton_examples_per_sec": 5_200, "keras_fit_examples_per_sec": 4_000,
          "keras_fit_fastest_path": "steps_per_execution", "speedup": 1.3,
          "speedup_per_repeat": [1.3, 1.2, 1.25], "speedup_median_of_repeats": 1.25,
          "baton_xla_examples_per_sec": 8_000, "speedup_xla": 2.0,
          "speedup_xla_per_repeat": [2.0, 1.9, 1.8], "speedup_xla_median_of_repeats": 1.9,
          "baton_fastest_path": "xla"}
    own = {"callbacks": {"case": "default MLP (64, 32)", "epochs": 6, "examples_per_epoch": 16384,
                         "before_examples_per_sec": 10_000, "callbacks_examples_per_sec": 9_900,
                         "cost": 0.01},
           "own_model": [om]}

    def render():
        (results / "own_model.json").write_text(json.dumps(own))
        return report.render(report.load(results))

    text = render()
    assert ("batch 256: **met** (Baton's fastest path, XLA on (`jit_compile: true`): 2.00x "
            "`fit`'s fastest (steps_per_execution), median of the repeats' own ratios 1.90x "
            "(the verdict takes the lower); Baton's other path, XLA off, the default: 1.30x, "
            "median 1.25x; both validate") in text
    assert "1.30, 1.20, 1.25 (median 1.25x), with XLA 2.00, 1.90, 1.80 (median 1.90x)" in text
    assert "higher median over the 5 repeats" in text
    om["speedup_xla_median_of_repeats"] = 1.45  # the lower of the two readings decides
    assert "batch 256: **missed** (Baton's fastest path, XLA on" in render()
    om["input_ceiling_vs_fit"] = 1.51  # a missed goal names the input's own ceiling
    assert ("optimizer; bounded by its input: the dataset drawn alone ran 1.51x `fit`'s "
            "fastest, the most any loop reading it could reach") in render()
    om.update(baton_fastest_path="default", speedup=1.6, speedup_median_of_repeats=1.55)
    assert ("batch 256: **met** (Baton's fastest path, XLA off, the default: 1.60x `fit`'s "
            "fastest (steps_per_execution), median of the repeats' own ratios 1.55x") in render()


def test_the_steps_alone_section_comes_from_its_result_file(report, results):
    rows = [{"batch": b, "ms_per_step_median": {"baton": base, "baton_xla": base / 2,
                                                "fit": base * 1.1, "fit_xla": base * 1.2},
             "speedup": 1.1, "speedup_xla": 2.2} for b, base in ((32, 0.3), (256, 0.6))]
    (results / "step_vs_fit.json").write_text(json.dumps({"load_average_start": [0.1, 0.2, 0.3],
                                                          "steps": rows}))
    text = report.render(report.load(results))
    assert "### The steps alone" in text
    assert "| 256 | 0.600 ms | 0.300 ms | 0.660 ms | 0.720 ms | 1.10x | 2.20x |" in text
    assert "(batch 32: 1.10x, batch 256: 1.10x)" in text
    assert "Load average at the start: 0.1, 0.2, 0.3." in text
