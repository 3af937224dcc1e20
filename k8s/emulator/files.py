"""`baton k8s emulate FILE...`: the manifests given as files, each object to its emulator.

The directory `baton k8s` wrote goes to k8s.emulator.directory; a federated stage's files to
k8s.emulator.federation; a training object given alone runs here: a TFJob as the training
operator would (k8s.emulator.tfjob), a JobSet as its controller would (k8s.emulator.jobset), a
TrainJob as the JobSet Trainer's controller creates from the ClusterTrainingRuntime given
beside it. Each is validated first (ValidationFailed: nothing runs).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from baton.k8s.emulator.pods import EmulationError


def manifest_documents(paths: list[str]) -> list[tuple[Path, dict]]:
    """(file, document) of every YAML file given, a directory's top-level *.yaml in name order
    (its kustomization and `alternatives/` left out)."""
    import yaml

    files: list[Path] = []
    for p in map(Path, paths):
        files += (sorted(f for f in p.glob("*.y*ml") if f.name != "kustomization.yaml")
                  if p.is_dir() else [p])
    out = []
    for f in files:
        try:
            out += [(f, d) for d in yaml.safe_load_all(f.read_text()) if isinstance(d, dict)]
        except yaml.YAMLError as exc:
            raise EmulationError(f"{f}: not YAML ({exc})") from None
    return out


def emulate_training(kind: str, docs: list[tuple[Path, dict]], volume_dir: Path, work: Path,
                     manifests_dir: Path, command: list[str] | None = None) -> int:
    """One training object among `docs`: a TFJob (`command` may replace its tensorflow
    container), a JobSet, or a TrainJob with its runtime; the emulation's exit code."""
    from baton.k8s import trainer_controller
    from baton.k8s.emulator.jobset import JobSetEmulator, JobSetOptions
    from baton.k8s.emulator.tfjob import EmulatorOptions, emulate_file
    from baton.k8s.errors import ValidationFailed
    from baton.k8s.validate import check, check_set

    if kind == "TFJob":
        path = next(p for p, d in docs if d.get("kind") == "TFJob")
        return emulate_file(path, EmulatorOptions(volume_dir=volume_dir, work_dir=work,
                                                  manifests_dir=manifests_dir, command=command))
    objects = [d for _, d in docs]
    doc: dict[str, Any] = next(d for d in objects if d.get("kind") == kind)
    check([doc])
    label = "JobSet"
    if kind == "TrainJob":
        runtime = trainer_controller.find_runtime(doc, objects)
        problems = [v for _, v in check_set([*([runtime] if runtime else []), doc])]
        if problems or runtime is None:
            raise ValidationFailed(problems)
        doc, label = trainer_controller.to_jobset(doc, runtime), "TrainJob's JobSet"
    return JobSetEmulator(doc, JobSetOptions(volume_dir=volume_dir, work_dir=work,
                                              manifests_dir=manifests_dir, stream=sys.stdout,
                                              label=label)).run()
