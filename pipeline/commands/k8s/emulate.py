"""`baton k8s emulate`: manifests run as local processes, as their controllers would
(k8s.emulator): the directory `baton k8s` wrote, a TFJob, a JobSet, a TrainJob, or a federation.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from baton.errors import UsageError
from baton.pipeline.commands.k8s.generate import _Parser


def emulate(argv: list[str]) -> int:
    from baton.k8s.emulator.files import emulate_training, manifest_documents
    from baton.k8s.emulator.pods import EmulationError
    from baton.k8s.errors import ValidationFailed

    p = _Parser(prog="baton k8s emulate", description="Run manifests as local processes, as "
                "their controllers would: the directory `baton k8s` wrote (what `kubectl apply "
                "-k` runs: the data step, the training as a JobSet, a TrainJob or a TFJob, the "
                "release step, then the serving Deployment's readiness), or a TFJob, a JobSet, a "
                "TrainJob with its runtime, or a federated stage's Deployments, Services and "
                "Jobs (see docs/kubernetes.md). Exit 0 when it succeeds, 1 when it fails, 2 for "
                "an invalid manifest. SIGTERM or Ctrl-C deletes it: every pod is stopped "
                "(SIGTERM, grace period, SIGKILL), then the exit code is 143 or 130.")
    p.add_argument("manifests", nargs="+", help="the directory `baton k8s` wrote, or files: "
                   "a TFJob, a JobSet, a TrainJob and its ClusterTrainingRuntime, a federation")
    p.add_argument("--volume-dir", help="local directory for the PVC (default: WORK_DIR/volume)")
    p.add_argument("--volume", action="append", default=[], metavar="CLAIM=DIR",
                   help="federation: the local directory of one claim (a silo's data); repeat")
    p.add_argument("--work-dir", help="logs, status.json, tf_config.json (default: ./.baton-emulator/<dir name>)")
    p.add_argument("--manifests-dir", help="where mounted ConfigMaps are found (default: the manifests' dir)")
    p.add_argument("--command", help="TFJob: replace the tensorflow container's command and args")
    args = p.parse_args(argv)
    missing = [f for f in args.manifests if not Path(f).exists()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    first = Path(args.manifests[0]).resolve()
    here = first if first.is_dir() else first.parent
    work = Path(args.work_dir or Path(".baton-emulator") / here.name)
    volume_dir = Path(args.volume_dir or work / "volume").resolve()
    manifests_dir = Path(args.manifests_dir) if args.manifests_dir else None
    try:
        docs = manifest_documents(args.manifests)
        kinds = {str(d.get("kind")) for _, d in docs}
        fed = [d for _, d in docs if d.get("kind") == "Deployment"
               and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "superlink"]
        training = sorted(kinds & {"TFJob", "JobSet", "TrainJob"})
        if training and fed:
            raise UsageError(f"{', '.join(args.manifests)}: a {training[0]} and a federation; "
                             "emulate one at a time: give the training's file, or the "
                             "federation's files")
        if args.volume and not fed:
            raise UsageError("--volume is for a federation's claims; a training's claims are "
                             f"all --volume-dir. Received: --volume {args.volume[0]}")
        if args.command and (fed or "TFJob" not in kinds or len(args.manifests) > 1 or first.is_dir()):
            raise UsageError("--command replaces a TFJob file's tensorflow container; a directory, "
                             "a JobSet, a TrainJob or a federation runs its manifests' own "
                             f"commands. Received: --command {args.command!r}")
        if fed:
            return _emulate_federation(args, docs, volume_dir, work.resolve(), manifests_dir or here)
        if first.is_dir() and len(args.manifests) == 1 and (first / "kustomization.yaml").is_file():
            from baton.k8s.emulator.directory import DirOptions, emulate_directory

            return emulate_directory(first, DirOptions(volume_dir=volume_dir, work_dir=work.resolve()))
        if not training:
            raise UsageError(f"{', '.join(args.manifests)}: no TFJob, JobSet, TrainJob or "
                             f"federation (SuperLink Deployment) to emulate. Received kinds: "
                             f"{sorted(kinds)}")
        return emulate_training(training[0], docs, volume_dir, work.resolve(), manifests_dir or here,
                                command=shlex.split(args.command) if args.command else None)
    except ValidationFailed as exc:
        raise UsageError(f"{', '.join(args.manifests)}: {exc}") from exc
    except EmulationError as exc:
        raise UsageError(str(exc)) from exc


def _emulate_federation(args, docs, volume_dir: Path, work: Path, manifests_dir: Path) -> int:
    from baton.k8s.emulator.federation import FederationOptions, emulate_documents

    volumes = {}
    for item in args.volume:
        claim, sep, where = item.partition("=")
        if not sep or not claim or not where:
            raise UsageError(f"--volume must be CLAIM=DIR. Received: {item!r}")
        volumes[claim] = Path(where).resolve()
    ordered = [d for _, d in docs]
    # apply order as `baton k8s` writes it: data Job, federation, release Job (kustomization)
    ordered.sort(key=lambda d: 0 if d.get("kind") == "Deployment" else 1)
    return emulate_documents(ordered, FederationOptions(
        volume_dir=volume_dir, work_dir=work, volumes=volumes, manifests_dir=manifests_dir))
