"""`baton transform SPEC --dry-run [--rows N] [--show K] [--stage NAME]`: a preprocessing_fn on
a sample, in seconds, before any Beam pipeline runs.

The spec's transform stage (the one with `preprocessing_fn:`, else the first; its built-in
column kinds are a preprocessing_fn too, graphs.column_kinds) is run eagerly on the first N
train rows of its examples. Its analyzers are computed in memory, on those rows, in the same
phases the stage runs, and with the same graph code (graphs.tft.engine, graphs.tft.module). The
command prints each analyzer's values and, for the first K rows, every output feature beside the
raw inputs. This is the answer to tf.Transform's "passes my unit test, fails in Beam": the same
errors the stage would raise (a missing column, a vocabulary of floats, an output that is not a
batch) show here, naming the function and the line.

The examples come from the newest run of the spec that has them. With no run yet, the stages
upstream of transform (usually ingest) run first, as `baton run` would, and are cached from then
on. Exit 0, 1 for an error in the function or the data, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from baton.errors import EXIT_OK, UsageError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="baton transform",
        description="Run the spec's preprocessing_fn eagerly on a sample of train rows: its "
                    "analyzers, its outputs beside the inputs and the stage's errors, in seconds.")
    p.add_argument("spec", help="the pipeline spec (YAML)")
    p.add_argument("--dry-run", action="store_true", required=True,
                   help="run the preprocessing_fn eagerly on a sample (the only mode; "
                        "`baton run SPEC --only <stage>` runs the stage)")
    p.add_argument("--rows", type=int, default=1000, help="train rows the analyzers see "
                   "(default 1000)")
    p.add_argument("--show", type=int, default=5, help="rows printed (default 5)")
    p.add_argument("--stage", help="the transform stage, when the spec has several")
    return p


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or EXIT_OK)
    if args.rows < 1 or args.show < 0:
        raise UsageError(f"--rows must be >= 1 and --show >= 0. Received: --rows {args.rows}, "
                         f"--show {args.show}")
    from baton.pipeline.plan import plan as make_plan
    from baton.pipeline.spec import load_spec

    spec = load_spec(args.spec)
    plan = make_plan(spec)
    name = _stage(plan, args.stage)
    examples = _examples(plan, name)
    print(dry_run(plan.configs[name], spec.spec_dir, examples, args.rows, args.show, name))
    return EXIT_OK


def _stage(plan: Any, wanted: str | None) -> str:
    names = [n for n in plan.order if plan.spec.stage(n).type == "transform"]
    if wanted is not None:
        if wanted not in names:
            raise UsageError(f"--stage: no transform stage {wanted!r}; transform stages: {names}")
        return wanted
    with_fn = [n for n in names if getattr(plan.configs[n], "preprocessing_fn", None)]
    if len(with_fn) == 1:
        return with_fn[0]
    if not names:
        raise UsageError("the spec has no transform stage")
    if not with_fn:
        return names[0]  # its column kinds
    raise UsageError(f"the spec has several transform stages with a preprocessing_fn {with_fn}: "
                     "name one with --stage")


def _examples(plan: Any, name: str) -> Path:
    """The stage's examples input from the newest run that has it; else run upstream first."""
    from baton.pipeline import lineage
    from baton.pipeline.context import RunOptions
    from baton.pipeline.runner import run_pipeline, runs_root_for

    src, output = plan.upstream(name)["examples"]
    root = runs_root_for(plan, None)
    runs = sorted((p for p in root.iterdir() if (p / "run.json").is_file()), reverse=True) \
        if root.is_dir() else []
    for run in runs:
        rec = lineage.read(run / src)
        if rec is not None and output in rec.get("outputs", {}):
            return run / src / output
    result = run_pipeline(plan, RunOptions(quiet=True), only=plan.upstream_closure([src]) | {src})
    if not result.ok:
        failed = next(r for r in result.stages if r.status == "failed")
        raise UsageError(f"stage {failed.name!r} (upstream of {name!r}) failed: {failed.error}")
    return result.run_dir / src / output


def dry_run(config: Any, spec_dir: Path, examples: Path, rows: int, show: int,
            stage: str) -> str:
    """The report: analyzer values, then the first `show` rows' inputs and outputs.
    `config`: the transform stage's Config (its preprocessing_fn, else its column kinds)."""

    from baton.graphs.column_kinds import ColumnsFn
    from baton.graphs.tft import engine as tft_engine
    from baton.graphs.tft import module as tft_module
    from baton.graphs.user_refs import RefError, import_ref
    from baton.pipeline.dataplane.records.reader import raw_columns, read_batches
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema, shard_files
    from baton.pipeline.stages.transform import UserErrors, plan_columns

    schema = ExamplesSchema.load(examples)
    ref = config.preprocessing_fn
    if ref is not None:
        where = f"{stage}.preprocessing_fn {ref}"
        try:
            fn = import_ref(ref, spec_dir, what="preprocessing_fn")
        except RefError as exc:
            from baton.errors import StageError

            raise StageError(f"{where}: {exc}") from None
        features = list(schema.features)
    else:
        where = f"{stage}.columns"
        fn = ColumnsFn(plan_columns(config, schema), where)
        features = [c for c in schema.features if c.name in fn.plan]
    columns = list(schema.columns)
    batch = _sample(read_batches, shard_files(examples, "train"), columns, rows, raw_columns)
    label = schema.label
    label_col = schema.column(label)
    raw_feats = [(c.name, "float32" if c.is_numeric else "string", tuple(c.shape))
                 for c in features]
    raw_all = [*raw_feats, (label, "float32" if label_col.is_numeric else "string", ())]
    started = time.perf_counter()
    phases = tft_engine.Phases(fn, tft_engine.raw_specs(raw_all))
    lines = []
    while True:
        with UserErrors(f"{where}: tracing"):
            phase = phases.next()
        if phase is None:
            break
        with UserErrors(f"{where}: analyzer phase {phase.number}"):
            phases.finish(phase, tft_engine.merge_all(phase, [phase.accumulate(batch)]))
        for k, req in sorted(phase.analyzers.items()):
            lines.append(f"  phase {phase.number}, analyzer {k} ({req.kind}): "
                         f"{_short(phases.resolved[k])}")
    vocab = sorted({bytes(v).decode("utf-8", "replace") for v in batch[label] if v}) \
        if not label_col.is_numeric else []
    with UserErrors(f"{where}: building the transform"):
        built = tft_module.build_module(
            fn, raw_feats, {"name": label, "dtype": label_col.dtype, "task": schema.task,
                            "vocabulary": vocab}, phases.resolved)
    with UserErrors(f"{where}: applying"):
        out = {k: _rows(v) for k, v in built.module.transform_features(
            {n: batch[n] for n, _, _ in raw_feats}).items()}
        n = len(batch[label])
        tft_module.check_rows(out, n)
    seconds = time.perf_counter() - started
    head = [f"{where} on {n} train rows of {examples}: "
            f"{_count(len(phases.resolved), 'analyzer')} in {_count(phases.number, 'phase')}, "
            f"{seconds:.2f}s (analyzers computed on these rows only)",
            "", "analyzers:", *(lines or ["  (none)"]), "", "outputs:"]
    note = tft_module.label_note(built, label)
    if note is not None:
        head[1:1] = [note]
    for name, info in built.outputs.items():
        ids = f", ids {info['min']}..{info['max']}" if "max" in info else ""
        kind = f" {info['encoding']}" if info.get("encoding", "dense") != "dense" else ""
        head.append(f"  {name}: {info['dtype']}{kind} {info['shape']}{ids}")
    for i in range(min(show, n)):
        head += ["", f"row {i}:",
                 "  in:  " + ", ".join(f"{k}={_value(batch[k][i])}" for k, _, _ in raw_all),
                 "  out: " + ", ".join(f"{k}={_value(v[i])}" for k, v in out.items())]
    return "\n".join(head)


def _sample(read_batches: Any, files: list[Path], columns: list[Any], rows: int,
            raw_columns: Any) -> dict[str, Any]:
    import numpy as np

    parts: list[dict[str, Any]] = []
    left = rows
    for f in files:
        for b in read_batches(f, columns, min(left, 65_536)):
            parts.append(raw_columns(b.slice(0, left), columns))
            left -= min(left, len(b))
            if not left:
                break
        if not left:
            break
    if not parts:
        raise UsageError(f"the examples have no train rows ({files[0].parent if files else ''})")
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _short(values: list[Any]) -> str:
    import numpy as np

    shown = []
    for v in values:
        a = np.asarray(v)
        if a.dtype == object:
            items = [bytes(t).decode("utf-8", "replace") for t in a.reshape(-1)[:8]]
            more = f" (+{a.size - 8} more)" if a.size > 8 else ""
            shown.append(json.dumps(items) + more)
        else:
            shown.append(np.array2string(a, precision=5, threshold=8, separator=", "))
    return "; ".join(shown)


def _rows(v: Any) -> Any:
    """An applied output as something indexable by row: a numpy array, or a ragged or sparse
    output's rows as lists (tft_module.check_rows counts them the same way)."""
    import tensorflow as tf

    if isinstance(v, tf.SparseTensor):
        v = tf.RaggedTensor.from_sparse(tf.sparse.reorder(v)) if v.shape.rank == 2 else v
    if isinstance(v, tf.RaggedTensor):
        return _Listed(v.to_list())
    if isinstance(v, tf.SparseTensor):  # more than 2 dimensions: each row's (index, value)s
        rows: list[list[Any]] = [[] for _ in range(int(v.dense_shape[0]))]
        for idx, val in zip(v.indices.numpy().tolist(), v.values.numpy().tolist(), strict=True):
            rows[idx[0]].append((tuple(idx[1:]), val))
        return _Listed(rows)
    return v.numpy()


class _Listed(list):  # noqa: FURB189 - a list with the `shape` check_rows reads
    @property
    def shape(self) -> tuple[int]:
        return (len(self),)


def _value(v: Any) -> str:
    import numpy as np

    if isinstance(v, list):
        return json.dumps(v, default=lambda b: b.decode("utf-8", "replace")
                          if isinstance(b, bytes) else str(b))
    if isinstance(v, bytes):
        return repr(v.decode("utf-8", "replace"))
    a = np.asarray(v)
    if a.ndim:
        return np.array2string(a, precision=4, threshold=6, separator=",")
    return f"{a.item():.6g}" if a.dtype.kind == "f" else str(a.item())
