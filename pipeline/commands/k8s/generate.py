"""`baton k8s [SPEC] --out DIR`: the manifests of a pipeline spec, written as a kustomize directory.

The spec's stages split into data Job / training (JobSet, TrainJob or TFJob; or a Flower
federation) / release Job, and `k8s` is handed plain dataclasses (`job_options`): the only
place that knows both a PipelineSpec and the `k8s` package. The other subcommands (validate,
emulate, submit) take manifests, not a spec, and live beside this module.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from baton.errors import EXIT_OK, UsageError
from baton.strategies.factory import STRATEGIES

TARGETS = ("jobset", "trainjob", "tfjob")  # k8s.options.TARGETS (imported lazily there)
JOBSET = TARGETS[0]

SUBCOMMANDS = ("validate", "emulate", "submit")
_FLAG_FOR_FIELD = {
    "cluster.workers": "--workers", "cluster.ps": "--ps", "cluster.strategy": "--strategy",
    "image": "--image", "namespace": "--namespace", "run_id": "--run-id", "name": "--name",
    "cluster.chief": "--no-chief", "runs_dir": "--runs-dir", "secret": "--credentials-secret",
    "service_account": "--service-account", "target": "--target", "queue": "--queue",
    "serving_image": "--serving-image",
}


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2, flag and value named) instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _generate_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="baton k8s", description="Write Kubernetes manifests for a pipeline: the "
                "whole pipeline as a JobSet (default), a Kubeflow Trainer v2 TrainJob with its "
                "ClusterTrainingRuntime, or a TFJob between data and release Jobs; TF Serving "
                "Deployment/Service, KServe alternative, a Flower federation for a federated "
                "stage, NetworkPolicies, a restricted Namespace, kustomization.yaml. Other "
                f"subcommands: {', '.join(SUBCOMMANDS)} (`baton k8s validate -h`).")
    p.add_argument("spec", nargs="?", help="pipeline YAML (default: the embedded penguins pipeline)")
    p.add_argument("--out", required=True, help="directory to write the manifests into")
    p.add_argument("--workers", type=int, help="training tasks (as for `baton run`)")
    p.add_argument("--ps", type=int, help="parameter servers (with --strategy parameter_server)")
    p.add_argument("--strategy", choices=STRATEGIES, help="tf.distribute strategy")
    p.add_argument("--image", help="project image the pods run (see the Dockerfile)")
    p.add_argument("--namespace", help="Kubernetes namespace")
    p.add_argument("--run-id", help="run id shared by the Jobs, TFJob and serving (default: new)")
    p.add_argument("--name", help="TFJob name (default: <pipeline>-<run id>)")
    p.add_argument("--no-chief", action="store_true",
                   help="multi_worker_mirrored with Workers only (worker 0 decides success)")
    p.add_argument("--evaluator", action="store_true", help="add an Evaluator replica")
    p.add_argument("--runs-dir", metavar="URL", help="keep the run directory and the models on "
                   "a bucket (s3://BUCKET/PREFIX/runs, gs://...): no ReadWriteMany claim; models "
                   "go to <PREFIX>/models/<pipeline> (docs/kubernetes.md)")
    p.add_argument("--credentials-secret", metavar="NAME", help="with --runs-dir: a Secret "
                   "whose keys become every Baton pod's environment (AWS_ACCESS_KEY_ID, ...)")
    p.add_argument("--service-account", metavar="NAME", help="with --runs-dir: the pods' "
                   "service account, bound to a cloud identity (IRSA, Workload Identity)")
    p.add_argument("--service-account-annotation", action="append", default=[],
                   metavar="KEY=VALUE", help="write the service account with this annotation "
                   "(eks.amazonaws.com/role-arn=..., iam.gke.io/gcp-service-account=...)")
    p.add_argument("--target", choices=TARGETS, default=JOBSET,
                   help="jobset (default: JobSet v1alpha2, the whole pipeline ordered by "
                   "dependsOn), trainjob (Kubeflow Trainer v2.3 TrainJob + a "
                   "ClusterTrainingRuntime), tfjob (kubeflow.org/v1, the training operator)")
    p.add_argument("--serving-image", help="model server image (default: tensorflow/serving:"
                   "2.18.0); pinned: a tag other than latest, or a digest")
    p.add_argument("--queue", help="Kueue LocalQueue: the training object is admitted as one gang "
                   "(label kueue.x-k8s.io/queue-name)")
    return p


def object_storage(args: argparse.Namespace):  # noqa: ANN201 - a k8s.ObjectStorage or None
    """The bucket options of `baton k8s` (None: the shared volume, as before)."""
    from baton.k8s.object_storage import ObjectStorage

    if args.runs_dir is None:
        for flag in ("credentials_secret", "service_account"):
            if getattr(args, flag):
                raise UsageError(f"--{flag.replace('_', '-')} is for a run directory on a "
                                 "bucket: give --runs-dir s3://... or gs://... too")
        if args.service_account_annotation:
            raise UsageError("--service-account-annotation is for a run directory on a bucket: "
                             "give --runs-dir s3://... or gs://... too")
        return None
    pairs = []
    for item in args.service_account_annotation:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--service-account-annotation must be KEY=VALUE. Received: {item!r}")
        pairs.append((key, value))
    return ObjectStorage(args.runs_dir.rstrip("/"), args.credentials_secret, args.service_account,
                         tuple(pairs))


FEDERATED = "federated"  # the stage type whose training runs on Flower (k8s.federated)


def _split_stages(spec) -> tuple[tuple[str, ...], str | None, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(data stages, train stage or None, release stages, train inputs, release inputs).

    Training is the first `train` stage (a TFJob) and/or the `federated` stage (a Flower
    federation); the stages downstream of either run after it, in the release Job, gated on the
    outputs of it they consume.
    """
    train = [s for s in spec.stages if s.type == "train"]
    fed = [s for s in spec.stages if s.type == FEDERATED]
    where = f"spec {spec.path or '<default>'}"
    if len(fed) > 1:
        raise UsageError(f"{where}: stages {', '.join(s.name for s in fed)} are all of type "
                         f"'{FEDERATED}'; a run deploys one federation")
    if not train and not fed:
        raise UsageError(f"{where}: no stage of type 'train' (a TFJob) or '{FEDERATED}' (a Flower "
                         "federation); the cluster has nothing to train")
    train_name = train[0].name if train else None
    pivots = {s.name for s in (train[:1] + fed)}
    by_name = {s.name: s for s in spec.stages}
    after: set[str] = set(pivots)
    changed = True
    while changed:  # descendants of the training stages run after them
        changed = False
        for s in spec.stages:
            if s.name not in after and any(r.split(".")[0] in after for r in s.inputs.values()):
                after.add(s.name)
                changed = True
    data = tuple(s.name for s in spec.stages if s.name not in after)
    release = tuple(s.name for s in spec.stages if s.name in after and s.name not in pivots)
    train_inputs = tuple(sorted({r.replace(".", "/") for r in by_name[train_name].inputs.values()})) \
        if train_name else ()
    release_inputs = tuple(sorted({
        r.replace(".", "/") for n in release for r in by_name[n].inputs.values()
        if r.split(".")[0] in pivots
    }))
    return data, train_name, release, train_inputs, release_inputs


def federation(spec):
    """The spec's `federated` stage as a k8s.federated.Federation, or None.

    The stage's config is built into its typed settings (strategies.federated_settings, the
    stage's Config) with the stage's own checks; k8s reads who the clients are, where their
    data is, the SuperNodes' resources and the claims' sizes from them. ManifestError names
    `stages.<stage>.config.<field>`.
    """
    from baton.k8s.federated import Federation

    stages = [s for s in spec.stages if s.type == FEDERATED]
    if not stages:
        return None
    stage = stages[0]
    inputs = tuple(sorted({r.replace(".", "/") for r in stage.inputs.values()}))
    return Federation.from_config(stage.name, stage.config, inputs, spec_dir=spec.spec_dir)


def spec_code_files(spec) -> tuple[tuple[str, str], ...]:
    """The user's modules the pods need, as (path relative to the spec's directory, text).

    What the train stage names (model, loss, metrics, optimizer, callbacks) and user stage types
    (`type: module:function`), with every module they import from the spec's directory
    (pipeline.user_code); they ship in the spec's ConfigMap and are mounted beside the spec,
    where every replica imports them from, exactly as on this machine.
    """
    from baton.configs import build_config
    from baton.errors import SpecError
    from baton.graphs.user_refs import RefError
    from baton.pipeline.stages import train as train_stage
    from baton.pipeline.user_code import user_code_files

    refs: list[str] = []
    for stage in spec.stages:
        if ":" in stage.type:
            refs.append(stage.type)
        elif stage.type == "train":
            refs += build_config(train_stage.Config, stage.config).user_refs()
    if not refs:
        return ()
    root = spec.spec_dir.resolve()
    try:
        files = user_code_files(refs, root)
    except RefError as exc:
        raise SpecError(f"{spec.path}: {exc}") from None
    return tuple((f.relative_to(root).as_posix(), f.read_text()) for f in files)


def cluster_spec_text(spec, models_dir: str) -> str:
    """The spec YAML as shipped to the cluster: push stages publish to the shared volume.

    Relative paths in a spec resolve against the spec's directory, which in a pod is the
    read-only ConfigMap mount; the model servers read `/artifacts/models/<pipeline>` (with
    `--runs-dir` on a bucket, `<prefix>/models/<pipeline>` there). So a push stage without an
    absolute `serving_base` gets that one (the YAML is re-dumped only then).
    """
    import yaml

    text = spec.path.read_text() if spec.path else spec.to_yaml()
    data = yaml.safe_load(text)
    changed = False
    for stage in data.get("stages") or []:
        if stage.get("type") == "push":
            config = stage.setdefault("config", {}) or {}
            stage["config"] = config
            if not str(config.get("serving_base", "")).startswith("/"):
                config["serving_base"] = models_dir
                changed = True
    return yaml.safe_dump(data, sort_keys=False) if changed else text


def job_options(spec, args: argparse.Namespace):
    """A PipelineSpec plus flags -> k8s.JobOptions (ManifestError names the field)."""
    from baton.configs import build_config
    from baton.k8s import placement
    from baton.k8s.options import JobOptions, Resources, Topology
    from baton.pipeline.stages import train as train_stage
    from baton.pipeline.store import new_run_id

    cluster = spec.cluster
    if cluster.workers == "auto" and args.workers is None:
        raise UsageError(
            f"{spec.where('cluster')}: cluster.workers: auto probes local clusters only; a "
            "cluster's training object has a fixed replica count: give cluster.workers: N or --workers N. "
            "Received: workers='auto'")
    data, train, release, train_inputs, release_inputs = _split_stages(spec)
    res = cluster.resources
    storage = object_storage(args)
    probe = JobOptions(pipeline=spec.name, run_id="probe", storage=storage)
    spec_text = cluster_spec_text(spec, probe.models_dir)
    stage = next((s for s in spec.stages if s.name == train), None)  # None: federated only
    # the replicas the pods will resolve (commands.task): flags, then the train config, then
    # the spec's cluster section; from `cluster:` and the flags alone, a spec giving its
    # topology in the train config got a TFJob shaped otherwise than its replicas ran
    shape = (train_stage.topology(_replica_config(stage), _flag_options(args), cluster)
             if stage else None)
    opts = JobOptions(
        pipeline=spec.name,
        run_id=args.run_id or new_run_id(),
        image=args.image or cluster.image,
        namespace=args.namespace or cluster.namespace,
        topology=Topology(
            strategy=args.strategy or (shape.strategy if shape else cluster.strategy),
            workers=args.workers if args.workers is not None else (
                shape.workers if shape else cluster.workers),
            ps=args.ps if args.ps is not None else (shape.ps if shape else cluster.ps),
            chief=0 if args.no_chief else 1,
            evaluator=args.evaluator,
        ),
        resources=Resources(cpu=str(res.cpu), memory=str(res.memory), gpu=int(res.gpu)),
        replica_resources=cluster.replica_resources,
        batch_size=build_config(train_stage.Config, stage.config).batch_size if stage else None,
        name=args.name,
        target=args.target,
        queue=args.queue,
        **({"serving_image": args.serving_image} if args.serving_image is not None else {}),
        spec_text=spec_text,
        code_files=spec_code_files(spec) if spec.path else (),
        data_stages=data, train_stage=train or "train", tfjob=train is not None,
        release_stages=release,
        train_inputs=train_inputs, release_inputs=release_inputs, storage=storage,
    )
    placement.check_batch(opts)  # the global batch must divide over the GPUs asked for
    return opts


# what the train stage's batch check (against this machine's inventory) prefixes its problem with
_LOCAL_BATCH_CHECK = "config.batch_size:"


def _replica_config(stage):  # noqa: ANN001, ANN202 - a StageSpec -> train.Config
    """The train config a replica checks and runs (TrainSettings.for_replica)."""
    from baton.configs import build_config
    from baton.pipeline.stages import train as train_stage

    return build_config(train_stage.Config, stage.config).for_replica()


def _flag_options(args: argparse.Namespace):  # noqa: ANN202 - a RunOptions
    from baton.pipeline.context import RunOptions

    return RunOptions(strategy=args.strategy, workers=args.workers, ps=args.ps)


def check_train(spec, args: argparse.Namespace) -> None:
    """The train stage's own `check_options`, as `baton run` runs it with the same flags: a
    spec the stage refuses (`balance: auto` or `jit_compile: true` under parameter_server, a
    topology that contradicts itself) exits 2 here, with `baton run`'s message, instead of
    failing in every replica of the TFJob after the pods started.

    The config is the one a replica checks (commands.task): a TFJob has a fixed replica count,
    so `workers: auto`, `min_workers` and `max_workers` (the local launcher's) are dropped.
    The batch is left to `placement.check_batch`, which checked it against the pods' resources:
    the stage's own batch check reads the inventory of this machine, which says nothing about
    the cluster's nodes.
    """
    from baton.pipeline.stages import train as train_stage

    train = _split_stages(spec)[1]
    if train is None:
        return  # a federated stage only: no TFJob
    stage = spec.stage(train)
    problems = [f"stage {stage.name!r}: {p}" for p in
                train_stage.check_options(_replica_config(stage), _flag_options(args), stage,
                                          spec)
                if not p.startswith(_LOCAL_BATCH_CHECK)]
    if len(problems) == 1:
        raise UsageError(problems[0])
    if problems:
        raise UsageError("\n  - ".join([f"{len(problems)} problems:", *problems]))


def _check_out(out: str) -> None:
    """--out must be a directory or not exist yet (nor any file stand where a directory goes)."""
    path = Path(out)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "exists and is not a directory" if p == path else f"is inside {p}, a file"
                raise UsageError(f"--out: {out} {what}; give a directory (it is created if missing)")
            return


def generate(argv: list[str]) -> int:
    from baton.k8s.errors import ManifestError, ValidationFailed
    from baton.k8s.render import write_manifests
    from baton.pipeline.spec import load_spec

    args = _generate_parser().parse_args(argv)
    for option in ("--out", "--image", "--namespace", "--name", "--run-id", "--queue",
                   "--serving-image"):
        text = getattr(args, option[2:].replace("-", "_"))
        if text is not None and not text.strip():  # not "unset": an empty value is a mistake
            raise UsageError(f"{option}: must not be empty. Received: {text!r}")
    _check_out(args.out)
    spec = load_spec(args.spec)
    try:
        check_train(spec, args)
        opts = job_options(spec, args)
        fed = federation(spec)
        from baton.k8s.render import build_all

        build_all(opts, fed)  # what no manifest can express (a name too long...) is refused here
    except ManifestError as exc:
        raise UsageError(_where(exc, args, spec)) from exc
    try:
        written = write_manifests(opts, args.out, federation=fed)
    except ValidationFailed as exc:
        raise UsageError(f"generated manifests do not validate:\n{exc}") from exc
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write {exc.filename or ''}: {exc.strerror or exc}") from exc
    _note_min_workers(spec)
    if opts.queue and opts.target == "tfjob":
        print("note: Kueue's TFJob integration (kubeflow.org/tfjob) is off by default and on its "
              "way out; with --queue, prefer --target jobset or trainjob (docs/kubernetes.md)",
              file=sys.stderr)
    if opts.namespace == "default":
        print("note: namespace.yaml labels the namespace 'default' to enforce the restricted Pod "
              "Security Standard, which applies to every pod there; give --namespace for a "
              "namespace of its own", file=sys.stderr)
    print(f"wrote {len(written)} files to {args.out}: {_summary(opts, fed)}, run id {opts.run_id}")
    return EXIT_OK


def _where(exc, args: argparse.Namespace, spec) -> str:  # noqa: ANN001 - a ManifestError
    """The flag (when given) or spec field a ManifestError is about, and its message."""
    flag = _FLAG_FOR_FIELD.get(exc.field)
    value = getattr(args, flag.lstrip("-").replace("-", "_"), None) if flag else None
    given = value is not None and value is not False
    if exc.field == "name" and not given:
        where = ("the job name <pipeline>-<run id> (give a shorter --name, --run-id or pipeline "
                 "name)")
    elif exc.field == "image" and not given:
        where = f"spec {spec.path or '<default penguins>'}: cluster.image (or --image)"
    else:
        where = f"{flag}" if given else f"spec {spec.path or '<default penguins>'}: {exc.field}"
    return f"{where}: {str(exc).split(': ', 1)[1]}"


def _summary(opts, fed) -> str:
    from baton.k8s import federated

    parts = []
    topo = ", ".join(f"{k} x{v}" for k, v in opts.topology.replica_counts().items())
    if opts.tfjob and opts.target == "tfjob" or (opts.tfjob and fed is not None):
        parts.append(f"TFJob {opts.job_name} ({topo})")
    elif opts.tfjob and opts.target == "trainjob":
        parts.append(f"TrainJob {opts.job_name} on ClusterTrainingRuntime "
                     f"{opts.job_name}-tensorflow (data, {topo}, release)")
    elif opts.tfjob:
        parts.append(f"JobSet {opts.job_name} (data, {topo}, release, in order)")
    if fed is not None:
        kind = "rehearsal" if fed.rehearsal else "silos"
        parts.append(f"federation {fed.stage} (SuperLink {federated.superlink_address(opts)}, "
                     f"SuperNode x{len(fed.clients)} {kind}: "
                     f"{', '.join(c.name for c in fed.clients)}; run Job {federated.run_job_name(opts)})")
    return "; ".join(parts)


def _note_min_workers(spec) -> None:
    """min_workers has no TFJob field: say so rather than drop it silently."""
    from baton.configs import build_config
    from baton.pipeline.stages import train as train_stage

    values = [spec.cluster.min_workers] + [
        build_config(train_stage.Config, s.config).min_workers for s in spec.stages
        if s.type == "train"]
    given = [v for v in values if v is not None]
    if given:
        print(f"note: min_workers={given[0]} is not in the manifests: the training object has a "
              "fixed replica count (a TFJob's elasticPolicy exists for PyTorchJob only; JobSet's "
              "elastic scaling is behind a feature gate), so on Kubernetes a lost worker pod is "
              "re-created under its restart policy and the job waits for it; min_workers "
              "applies to `baton run`'s local cluster", file=sys.stderr)
