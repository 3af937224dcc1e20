"""The server's side of federated training: merge what clients send, never read a row.

`federated_transform` drives the transform's analyzer phases (graphs.tft.engine.Phases) over
the clients: each phase, every client answers with its partial accumulators for that phase
(pipeline.federated.local.analyze), the server merges them with the same merge the Beam
CombineFn uses and records the values, until no analyzer is left. The result is the
`transform_graph` the transform stage would have written from the union of the clients' rows,
computed from summaries only. `ask(request)` is how a request reaches the clients and their
replies come back: Flower messages in a real run, direct calls in tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from baton.errors import StageError
from baton.pipeline.federated.local import FnSpec, label_entry, merge_labels, raw_features

Ask = Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]]


@dataclasses.dataclass
class Transform:
    schema: Any  # the clients' ExamplesSchema (column layout; splits summed)
    raw: list[tuple[str, str, tuple[int, ...]]]
    resolved: dict[int, list[Any]]
    label: dict[str, Any]
    phases: int
    built: Any  # graphs.tft.module.Built
    spec: Any  # graphs.feature_spec.FeatureSpec
    rows: dict[str, int]  # client -> train rows


def check_schemas(replies: Sequence[Mapping[str, Any]]) -> Any:
    """The clients' common column layout; StageError naming the client that differs."""
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema

    first = replies[0]
    base = ExamplesSchema.from_dict(first["schema"])
    for r in replies[1:]:
        other = ExamplesSchema.from_dict(r["schema"])
        if (other.columns, other.label, other.task) != (base.columns, base.label, base.task):
            raise StageError(f"federated: client {r['client']!r} has columns "
                             f"{[c.name for c in other.columns]} (label {other.label!r}), client "
                             f"{first['client']!r} {[c.name for c in base.columns]} "
                             f"(label {base.label!r}): every client needs the same layout")
    return base


def federated_transform(fn_spec: FnSpec, ask: Ask) -> Transform:
    from baton.graphs.tft import engine as tft_engine
    from baton.graphs.tft import module as tft_module

    replies = ask({"resolved": {}, "with_label": True})
    if not replies:
        raise StageError("federated: no client answered the analysis round")
    schema = check_schemas(replies)
    label_col = schema.column(schema.label)
    raw = raw_features(fn_spec, schema)
    raw_all = [*raw, (label_col.name, "float32" if label_col.is_numeric else "string", ())]
    label = label_entry(merge_labels([r["label"] for r in replies]), schema.label,
                        label_col.dtype, schema.task)
    rows = {str(r["client"]): int(r["rows"]) for r in replies}
    phases = tft_engine.Phases(fn_spec.source().load(), tft_engine.raw_specs(raw_all))
    while (phase := phases.next()) is not None:
        if phase.number > 1:
            replies = ask({"resolved": phases.resolved, "with_label": False})
        mine = set(phase.analyzers)
        for r in replies:
            if set(r["partials"]) != mine:
                raise StageError(f"federated: client {r['client']!r} computed analyzers "
                                 f"{sorted(r['partials'])} in phase {phase.number}, the server "
                                 f"expects {sorted(mine)}: different transform code?")
        phases.finish(phase, tft_engine.merge_all(phase, [r["partials"] for r in replies]))
    built = tft_module.build_module(fn_spec.source().load(), raw, label, phases.resolved)
    spec = tft_module.feature_spec(built, raw, label)
    return Transform(schema, raw, phases.resolved, label, phases.number, built, spec, rows)
