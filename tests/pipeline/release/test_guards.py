"""The release gate and the check stage's comparison on non-finite values and Keras metric names.

Issue 35, findings 2 and 5: a model with `"loss": NaN` in its metrics was blessed, the check
stage printed "differs from the in-process model by nan" for outputs that were NaN on both
sides, and the gate refused the Keras metric names a model was trained with.
"""

from __future__ import annotations

import math

from baton.pipeline.release import gate as G
from baton.pipeline.release.infra import compare

NAN = float("nan")


def test_a_nan_metric_is_never_blessed_even_without_thresholds():
    d = G.decide(G.Gate(), {"accuracy": 0.98, "loss": NAN, "example_count": 66.0}, {}, None)
    assert not d["blessed"]
    assert d["failed"] == ["loss is nan: not finite"]


def test_nonfinite_outputs_are_never_blessed():
    overall = {"accuracy": 0.97, "loss": 0.1, "example_count": 66.0}
    d = G.decide(G.Gate(thresholds={"accuracy": 0.9}), overall, {}, None, nonfinite_rows=2)
    assert not d["blessed"]
    assert d["failed"] == ["the model's outputs are NaN or infinite for 2 of 66 eval rows"]
    assert G.decide(G.Gate(thresholds={"accuracy": 0.9}), overall, {}, None)["blessed"]


def test_a_nan_metric_fails_its_threshold_and_its_change():
    d = G.decide(G.Gate(thresholds={"auc": 0.5}, change={"auc": 0.1}),
                 {"auc": NAN}, {}, {"auc": 0.9})
    kinds = sorted(c["kind"] for c in d["checks"] if not c["passed"])
    assert kinds == ["change", "finite", "threshold"]


def test_the_gate_takes_keras_metric_names():
    gate = G.Gate(thresholds={"sparse_categorical_accuracy": 0.6, "AUC": 0.9})
    assert G.spec_problems(gate, []) == []
    typo = G.spec_problems(G.Gate(thresholds={"sparse_categorical_acuracy": 0.6}), [])
    assert len(typo) == 1 and "did you mean 'sparse_categorical_accuracy'" in typo[0]
    # a name only the model can report: accepted when the spec declares it, or when an own
    # model's compile() may add any
    mine = G.Gate(thresholds={"my_metric": 0.5})
    assert G.spec_problems(mine, []) and not G.spec_problems(mine, [], reported={"my_metric"})
    assert not G.spec_problems(mine, [], any_name=True)


def test_a_keras_metric_is_gated_in_the_direction_keras_records():
    overall = {"sparse_categorical_crossentropy": 0.13, "top2": 0.99, "mine": 0.3}
    directions = {"sparse_categorical_crossentropy": False, "top2": True, "mine": None}
    good = G.decide(G.Gate(thresholds={"sparse_categorical_crossentropy": 0.5, "top2": 0.9},
                           change={"sparse_categorical_crossentropy": 0.05}),
                    overall, {}, {"sparse_categorical_crossentropy": 0.2}, directions=directions)
    assert good["blessed"], good["failed"]
    worse = G.decide(G.Gate(change={"sparse_categorical_crossentropy": 0.05}),
                     overall, {}, {"sparse_categorical_crossentropy": 0.05}, directions=directions)
    assert worse["failed"] == ["sparse_categorical_crossentropy = 0.1300 vs baseline 0.0500: "
                               "worse by more than the allowed 0.05"]
    # a metric of no recorded direction: a bare number is ambiguous (Keras' EarlyStopping
    # refuses mode='auto' on it too); an explicit bound is not
    bare = G.decide(G.Gate(thresholds={"mine": 0.5}), overall, {}, None, directions=directions)
    assert bare["failed"] == ["mine: no direction is known for this metric (a user metric): "
                              "give its threshold as {min: ...} or {max: ...}"]
    explicit = G.decide(G.Gate(thresholds={"mine": G.Bound(max=0.5)}), overall, {}, None,
                        directions=directions)
    assert explicit["blessed"]


def test_check_reports_nan_outputs_as_nan():
    got = [{"probabilities": [[NAN, NAN, NAN]], "class_ids": [0]},
           {"probabilities": [[0.2, 0.3, 0.5]], "class_ids": [2]}]
    want = [{"probabilities": [[NAN, NAN, NAN]], "class_ids": [0]},
            {"probabilities": [[0.2, 0.3, 0.5]], "class_ids": [2]}]
    worst, problems = compare(got, want, 1e-4)
    assert worst == 0.0 and not math.isnan(worst)
    assert problems == ["output 'probabilities' is NaN (or infinite) for warmup requests [0], in "
                        "the fresh process as in the in-process model: the model cannot answer "
                        "those rows (missing values the transform hands on?)"]
    assert not any("by nan" in p for p in problems)
    # the served graph's fused kernels may answer numbers where the Keras model gives NaN
    one_side = [{"probabilities": [[0.1, 0.2, 0.7]], "class_ids": [0]}, got[1]]
    _, problems = compare(one_side, want, 1e-4)
    assert problems == ["output 'probabilities' is NaN (or infinite) for warmup requests [0], in "
                        "the in-process model, not in the fresh process (whose fused kernels "
                        "may turn NaN into numbers): the model cannot answer those rows "
                        "(missing values the transform hands on?)"]
