"""`baton transform SPEC --dry-run`: the preprocessing_fn on a sample, the stage's errors, in
seconds (ingest runs first when no run has examples yet)."""

from __future__ import annotations

from pathlib import Path

from tests.pipeline.test_e2e import baton

SPEC = """\
pipeline: dry
stages:
  - {name: ingest, type: ingest}
  - name: transform
    type: transform
    inputs: {examples: ingest.examples}
    config: {preprocessing_fn: "pre:preprocessing_fn"}
"""
GOOD = """\
import tensorflow as tf
import baton.tft as tft

def preprocessing_fn(inputs):
    mass = tf.where(tf.math.is_nan(inputs["body_mass_g"]), 0.0, inputs["body_mass_g"])
    return {"mass_z": tft.scale_to_z_score(mass - tft.min(mass)),
            "island_id": tft.compute_and_apply_vocabulary(inputs["island"], num_oov_buckets=1)}
"""
BAD = """\
import baton.tft as tft

def preprocessing_fn(inputs):
    return {"v": tft.compute_and_apply_vocabulary(inputs["body_mass_g"])}
"""


def _write(d: Path, module: str, spec: str = SPEC) -> None:
    (d / "spec.yaml").write_text(spec)
    (d / "pre.py").write_text(module)


def test_dry_run_runs_ingest_first_then_prints_analyzers_and_rows(tmp_path):
    _write(tmp_path, GOOD)
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--rows", "50", "--show", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "transform.preprocessing_fn pre:preprocessing_fn on 50 train rows" in out
    assert "3 analyzers in 2 phases" in out  # min, then z-score of x - min; the vocabulary
    assert "phase 2, analyzer 1 (moments)" in out and "(vocabulary): [" in out
    assert "island_id: int64 [], ids 0..3" in out
    assert out.count("\n  in:  ") == 2 and "  out: mass_z=" in out
    runs = list((tmp_path / "runs" / "dry").glob("2*/ingest/examples"))
    assert len(runs) == 1  # ingest ran once, as a run; transform did not
    assert not list((tmp_path / "runs" / "dry").glob("2*/transform"))

    again = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--show", "0")
    assert again.returncode == 0 and "on 278 train rows" in again.stdout  # all of train
    assert len(list((tmp_path / "runs" / "dry").glob("2*/ingest/examples"))) == 1  # reused
    assert "warning:" not in again.stdout  # the label left out

    # a label the function changes (TFX pipelines often encode it) is said to be unused
    _write(tmp_path, GOOD.replace('num_oov_buckets=1)}', 'num_oov_buckets=1),\n'
                                  '            "species": tft.compute_and_apply_vocabulary('
                                  'inputs["species"])}'))
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--show", "0")
    assert res.returncode == 0, res.stderr[-3000:]
    assert ("warning: output 'species' is the label, changed by the preprocessing_fn; Baton "
            "encodes the raw label itself") in res.stdout
    _write(tmp_path, GOOD.replace('num_oov_buckets=1)}', 'num_oov_buckets=1),\n'
                                  '            "species": inputs["species"]}'))
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--show", "0")
    assert res.returncode == 0 and "warning:" not in res.stdout  # passed through


def test_dry_run_shows_the_stages_error_and_bad_usage_exits_2(tmp_path):
    _write(tmp_path, BAD)
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run")
    assert res.returncode == 1
    assert ("transform.preprocessing_fn pre:preprocessing_fn: tracing: ValueError: "
            "tft.vocabulary: expected tf.string or integer but got float32") in res.stderr
    assert "pre.py, line 4)" in res.stderr
    # an output check (a dtype tf.Transform's feature specs do not hold) is raised by the dry
    # run too, before any data pass
    _write(tmp_path, "import tensorflow as tf\n\ndef preprocessing_fn(inputs):\n"
                     "    return {'v': tf.cast(inputs['year'], tf.float64)}\n")
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run")
    assert res.returncode == 1
    assert ("pre:preprocessing_fn: building the transform: Feature 'v' had invalid dtype "
            "float64" in res.stderr) and "line" not in res.stderr.split("invalid dtype")[1]
    # an output that drops or adds rows is the stage's applying error, whatever --show says
    # (one process per case: each imports TensorFlow, and the suite is CPU-bound)
    for body, rows, show in (('inputs["year"][:5]', 5, "0"),
                             ('tf.concat([inputs["year"]] * 2, 0)', 200, "8")):
        _write(tmp_path, f"import tensorflow as tf\n\ndef preprocessing_fn(inputs):\n"
                         f"    return {{'x': tf.cast({body}, tf.float32)}}\n")
        res = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--rows", "100",
                    "--show", show)
        assert res.returncode == 1, (body, show, res.stdout[-2000:], res.stderr[-2000:])
        assert (f"pre:preprocessing_fn: applying: output 'x' has {rows} rows for a batch "
                "of 100: outputs keep the batch dimension") in res.stderr, res.stderr[-2000:]
        assert "Traceback" not in res.stderr
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--rows", "0")
    assert res.returncode == 2 and "--rows must be >= 1" in res.stderr


def test_a_preprocessing_fn_that_does_not_import_is_a_spec_error_before_any_stage(tmp_path):
    _write(tmp_path, "import baton.tft as tft\n\ndef preprocessing_fn(inputs)\n    return {}\n")
    res = baton(tmp_path, "run", "spec.yaml")
    assert res.returncode == 2
    assert "config.preprocessing_fn:" in res.stderr and "pre.py, line 3" in res.stderr
    assert not (tmp_path / "runs").exists()
    _write(tmp_path, "def something_else(inputs):\n    return {}\n")
    res = baton(tmp_path, "run", "spec.yaml")
    assert res.returncode == 2 and "preprocessing_fn" in res.stderr


def test_dry_run_of_the_built_in_column_kinds_shows_their_preprocessing_fn(tmp_path):
    """The column kinds are a preprocessing_fn (graphs.column_kinds): the dry run shows it."""
    kinds = ('    config: {columns: {island: {kind: hash, buckets: 4}, '
             'body_mass_g: {kind: bucketize, buckets: 3}, year: {kind: drop}}}\n')
    _write(tmp_path, GOOD, SPEC.replace('    config: {preprocessing_fn: "pre:preprocessing_fn"}\n',
                                        kinds))
    res = baton(tmp_path, "transform", "spec.yaml", "--dry-run", "--rows", "100", "--show", "1")
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "transform.columns on 100 train rows" in out
    assert "5 analyzers in 1 phase," in out  # 3 z-scores, the sex vocabulary, the quantiles
    assert "island: int64 [], ids 0..4" in out and "body_mass_g: int64 [], ids 0..3" in out
    assert "year" not in out.split("outputs:")[1].split("row 0")[0]
