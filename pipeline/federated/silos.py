"""The federated stage's clients and where their examples are: listed silos, or a rehearsal's
silos partitioned from one examples artifact (pipeline.dataplane.partition) into the stage's
work directory (a local federation) or `<run dir>/<stage>.federation/clients/client-<i>` (an
external one, whose SuperNodes mount them). `config` is the stage's Config, read by attribute.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.context import StageContext
from baton.strategies.federation_files import SILOS_DIR, federation_dir


def silo_path(examples: Path | str, spec_dir: Path | None) -> Path:
    p = Path(examples)
    return p if p.is_absolute() or spec_dir is None else (spec_dir / p)


def counted(ctx: StageContext, config: Any) -> Any:
    """The stage's settings with the number of clients `partition.by` makes from the examples
    input (FederatedSettings.counted: one per distinct value; a `clients` given that differs is
    an error naming both); other settings unchanged."""
    from baton.pipeline.dataplane import partition as P
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema

    part = config.partition
    if not config.rehearsal or part is None or not part.by:
        return config
    examples = ctx.inputs["examples"]
    values = P.client_names(part, ExamplesSchema.load(examples), examples, None)
    try:
        return config.counted(values)
    except ValueError as exc:
        raise StageError(f"federated.{exc}") from None


def for_stage(ctx: StageContext, config: Any, external: bool = False) -> dict[str, Path]:
    """Client name -> its examples directory: the listed silos' (checked here unless they are
    on other machines), or a rehearsal's, partitioned from the stage's examples input now."""
    from baton.pipeline.dataplane import partition as P
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema

    if not config.rehearsal:
        out = {}
        for silo in config.silos:
            path = silo_path(silo.examples, ctx.spec_dir)
            if external:  # the silo is on its SuperNode's machine, not necessarily here
                out[silo.name] = path
                continue
            if not (path / "schema.json").is_file() or not any((path / "train").glob("*")):
                raise StageError(f"federated.clients.{silo.name}: no examples at {path} "
                                 "(expected schema.json and train/ shards of an ingest run)")
            out[silo.name] = path
        return out
    examples = ctx.inputs["examples"]
    part = config.partition
    partition = part if part is not None else P.Partition(iid=True)
    schema = ExamplesSchema.load(examples)
    names = P.client_names(partition, schema, examples, config.count)  # counted() first
    root = (Path(federation_dir(ctx.run_dir, ctx.stage)) if external else ctx.work_dir) / SILOS_DIR
    # an external federation's SuperNodes were set up from `clients: N` alone (the Kubernetes
    # manifests), so its silos are client-0 ... client-N-1 whatever the partition calls them
    dirs = [f"client-{i}" for i in range(len(names))] if external else names
    if external:
        _empty_silos(root, dirs)
    else:
        shutil.rmtree(root, ignore_errors=True)
    counts = P.split(examples, [root / d for d in dirs], partition)
    ctx.log(f"partition {partition.describe()}: " + ", ".join(
        f"{d}{f' ({n})' if d != n else ''} {counts[n].get('train', 0)}/"
        f"{counts[n].get('eval', 0)}" for d, n in zip(dirs, names, strict=True))
        + " train/eval rows" + (f" in {root}" if external else ""))
    return {d: root / d for d in dirs}


def _empty_silos(root: Path, dirs: list[str]) -> None:
    """Empty each silo directory but keep the directory itself: a SuperNode pod may already
    have it mounted (a subPath is a bind mount of that very directory, and one removed and
    created again would leave the pod looking at the deleted one, waiting forever)."""
    for d in dirs:
        silo = root / d
        silo.mkdir(parents=True, exist_ok=True)
        for child in silo.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


