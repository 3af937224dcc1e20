"""A spec compiled to KFP's intermediate representation (IR YAML) with the kfp SDK.

The DAG: `plan_run` first (the run id, the run's parameters applied to the spec, judged by
`baton run --check`), then one step per stage in the spec's DAG (a stage's KFP inputs are the
artifacts of the stages it reads), then `finish_run` after every stage (the run's record).
Every task has KFP's step cache off and a retry policy; a step's exit follows Baton's exit
codes (pipeline.kfp.step). Why no stage shares a pod with another: each step is the unit KFP
retries, shows and times, and a Baton stage's outputs live on the bucket, so a step costs a pod
start and the staging of its inputs, which the node cache of one pod could only save for stages
reading the same inputs one after another.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal

from baton.errors import UsageError
from baton.pipeline.kfp import components as C
from baton.pipeline.kfp.launch import ENGINES, KFP, TARGETS, VERTEX
from baton.pipeline.kfp.params import RunParam
from baton.storage import location as L

# KFP artifact roots: object stores its launcher reads and writes (minio:// is KFP's own store)
ROOT_SCHEMES = {KFP: ("s3://", "gs://", "minio://"), VERTEX: ("gs://",)}
_VERTEX_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
# standard credentials a bucket needs, taken from --credentials-secret's keys when present
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                   "AWS_ENDPOINT_URL", "AWS_REGION")
RUN_AS = 1000  # the Baton image's user (Dockerfile), as `baton k8s`'s pods


@dataclasses.dataclass(frozen=True)
class KfpOptions:
    """How a spec compiles (the flags of `baton kfp`).

    Attributes:
        engine: `kfp` (Kubeflow Pipelines 2.x) or `vertex` (Vertex AI Pipelines).
        pipeline_root: where the engine keeps its artifacts: a bucket (Vertex: gs:// only);
            a local directory only for `kfp.local` (`local=True`).
        runs_dir: Baton's runs directory (default `<pipeline_root>/runs` when that is s3:// or
            gs://); the `runs_dir` parameter changes it per run.
        image: the Baton image every step runs (default: the spec's `cluster.image`).
        retries: KFP retries of a step after a retryable exit (>= 128).
        retry_backoff_s: first wait before a retry (doubling, at most an hour).
        workers, ps, strategy: the training topology, as `baton run`'s and `baton k8s`'s flags.
        namespace: where a step creates training objects (kfp engine).
        target: kfp engine: the training object a multi-process train step creates, as `baton
            k8s --target`: `jobset` (default), `trainjob` or `tfjob`.
        queue: kfp engine: the Kueue LocalQueue the training object is admitted through.
        credentials_secret: kfp engine: a Secret whose standard keys (AWS_ACCESS_KEY_ID, ...)
            become every step's environment (Vertex steps use their service account).
        service_account: the training pods' service account (kfp engine).
        vertex_project, vertex_location, vertex_machine_type: where and on what Vertex AI runs
            a CustomJob for distributed training.
        vertex_accelerator: Vertex: the accelerator type (`NVIDIA_TESLA_T4`, ...) of the steps
            and worker pools that get the spec's GPUs.
        local: compile for `kfp.local` (local pipeline root and runs directory allowed).
    """

    engine: Literal["kfp", "vertex"] = "kfp"
    pipeline_root: str | None = None
    runs_dir: str | None = None
    image: str | None = None
    retries: int = 3
    retry_backoff_s: int = 30
    workers: int | None = None
    ps: int | None = None
    strategy: str | None = None
    namespace: str | None = None
    target: str = "jobset"
    queue: str | None = None
    credentials_secret: str | None = None
    service_account: str | None = None
    vertex_project: str | None = None
    vertex_location: str = "us-central1"
    vertex_machine_type: str = "n1-standard-4"
    vertex_accelerator: str = "NVIDIA_TESLA_T4"
    local: bool = False

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise UsageError(f"--engine: must be one of {', '.join(ENGINES)}. "
                             f"Received: {self.engine!r}")
        if self.target not in TARGETS:
            raise UsageError(f"--target: must be one of {', '.join(TARGETS)}. "
                             f"Received: {self.target!r}")
        if self.retries < 0 or self.retry_backoff_s < 0:
            raise UsageError(f"--retries and --retry-backoff must be >= 0. Received: "
                             f"{self.retries}, {self.retry_backoff_s}")


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A compiled pipeline: the kfp GraphComponent and what went into it."""

    pipeline: Any
    name: str
    params: tuple[RunParam, ...]
    root: str
    runs_dir: str
    launches: dict[str, dict[str, Any]]


def roots(options: KfpOptions) -> tuple[str, str]:
    """(pipeline root, runs dir), checked: UsageError naming the flag otherwise."""
    root = options.pipeline_root
    schemes = ROOT_SCHEMES[options.engine]
    if root is None:
        raise UsageError(f"--pipeline-root: required: the bucket where {options.engine} keeps "
                         f"the pipeline's artifacts ({', '.join(schemes)}...)")
    if not root.startswith(schemes) and not options.local:
        what = "Vertex AI Pipelines keep artifacts in Cloud Storage" \
            if options.engine == VERTEX else "KFP's launcher reads and writes object stores"
        raise UsageError(f"--pipeline-root: must be a bucket URL ({', '.join(schemes)}...): "
                         f"{what}. Received: {root!r}")
    runs = options.runs_dir
    if runs is None:
        if not L.is_remote(root) and not options.local:
            raise UsageError(f"--runs-dir: required with --pipeline-root {root}: Baton keeps "
                             "runs on s3:// or gs:// (or, for --run-local, a local directory)")
        runs = L.join(root, "runs") if L.is_remote(root) else str(Path(root).resolve() / "runs")
    if not L.is_remote(runs) and not options.local:
        raise UsageError(f"--runs-dir: the pipeline's pods share no disk: give a bucket URL "
                         f"(s3://..., gs://...). Received: {runs!r}")
    runs = L.normalize(runs, "--runs-dir")
    if not L.is_remote(runs):
        runs = str(Path(runs).resolve())
    if not L.is_remote(root) and not root.startswith("minio://"):
        root = str(Path(root).resolve())
    return root, runs


def build(spec: Any, options: KfpOptions) -> Compiled:
    """The kfp pipeline (a GraphComponent) of `spec`; UsageError (exit 2) for what cannot be
    expressed (pipeline.kfp.bundle) or a bad option, before anything is written."""
    from kfp import dsl

    from baton.pipeline.kfp import bundle as B
    from baton.pipeline.kfp import launch, params
    from baton.pipeline.plan import plan

    root, runs_dir = roots(options)
    if options.engine == VERTEX and not _VERTEX_NAME.match(spec.name):
        raise UsageError(f"{spec.where('pipeline')}: pipeline: Vertex AI needs a name of "
                         f"lower-case letters, digits and '-'. Received: {spec.name!r}")
    the_plan = plan(spec)
    B.check_expressible(spec, the_plan)
    bundle = B.from_spec(spec, the_plan)
    run_params = params.run_params(spec, the_plan.configs, runs_dir)
    image = options.image or spec.cluster.image
    launches = launch.plan(spec, the_plan, options, bundle)
    functions: set[str] = {C.PLAN, C.FINISH}
    shapes = {name: C.shape(name, spec.stage(name).inputs, the_plan.types[name].outputs,
                            functions)
              for name in the_plan.order}
    sources = {C.PLAN: C.plan_source(spec.name, run_params),
               C.FINISH: C.finish_source(spec.name, [(n, spec.stage(n).type)
                                                     for n in the_plan.order])}
    sources.update({s.function: C.stage_source(spec.name, s) for s in shapes.values()})
    comps = C.build(sources, image)
    defs = json.dumps([{"name": p.name, "type": p.type.__name__, "default": p.default,
                        "stage": p.stage, "field": p.field} for p in run_params])

    names = [p.name for p in run_params]

    def body(*channels: Any) -> None:  # kfp calls it with one channel per parameter, in order
        values = dict(zip(names, channels, strict=True))
        job = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        first = comps[C.PLAN](bundle=bundle.to_json(), param_defs=defs,
                              buckets_only=not options.local, job=job, **values)
        _settings(first, options, spec, "plan", gpu=False)
        first.set_display_name("plan")
        run_id = first.output
        tasks: dict[str, Any] = {}
        for name in the_plan.order:
            s = shapes[name]
            args = {py: tasks[ref.partition(".")[0]].outputs[_py_output(shapes, ref)]
                    for (key, py, _), ref in zip(s.inputs, spec.stage(name).inputs.values(),
                                                 strict=True)}
            task = comps[s.function](run_id=run_id, runs_dir=values["runs_dir"], job=job,
                                     launch=json.dumps(launches[name]) if name in launches
                                     else "", **args)
            _settings(task, options, spec, name, gpu=_uses_gpu(spec, name, the_plan))
            task.set_display_name(name)
            tasks[name] = task
        last = comps[C.FINISH](run_id=run_id, runs_dir=values["runs_dir"], job=job)
        last.after(*tasks.values())
        _settings(last, options, spec, "finish", gpu=False)
        last.set_display_name("finish")

    body.__name__ = re.sub(r"\W", "_", spec.name)
    body.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default,
                          annotation=p.type) for p in run_params])
    body.__annotations__ = {p.name: p.type for p in run_params}
    pipeline = dsl.pipeline(name=spec.name, description=spec.description or None,
                            pipeline_root=root)(body)
    return Compiled(pipeline, spec.name, tuple(run_params), root, runs_dir, launches)


def write(compiled: Compiled, out: str | Path) -> Path:
    """Compile to IR YAML at `out`, atomically: a file there is a whole pipeline."""
    from kfp import compiler

    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=".tmp.yaml", dir=out.parent or ".")
    os.close(fd)
    try:
        compiler.Compiler().compile(compiled.pipeline, tmp, pipeline_name=compiled.name)
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def _py_output(shapes: dict[str, C.StageShape], ref: str) -> str:
    stage, _, output = ref.partition(".")
    return next(py for name, py, _ in shapes[stage].outputs if name == output)


def _uses_gpu(spec: Any, name: str, the_plan: Any) -> bool:
    """Training and the release stages get the spec's GPUs; the data stages run on CPUs (as
    `baton k8s`'s data Job)."""
    kind = spec.stage(name).type
    return kind in ("train", "evaluate", "export", "check", "edge") and spec.cluster.resources.gpu > 0


def _settings(task: Any, options: KfpOptions, spec: Any, name: str, gpu: bool) -> None:
    """Caching, retries, resources and (kfp engine) the pod's security and credentials."""
    task.set_caching_options(False)
    task.set_retry(num_retries=options.retries, backoff_duration=f"{options.retry_backoff_s}s",
                   backoff_factor=2.0, backoff_max_duration="3600s")
    res = spec.cluster.resources
    task.set_cpu_request(str(res.cpu)).set_cpu_limit(str(res.cpu))
    task.set_memory_request(str(res.memory)).set_memory_limit(str(res.memory))
    if gpu:
        task.set_accelerator_type("nvidia.com/gpu" if options.engine == KFP
                                  else options.vertex_accelerator)
        task.set_accelerator_limit(int(res.gpu))
    if options.engine != KFP or options.local:
        return  # Vertex AI refuses Kubernetes platform settings; kfp.local ignores them
    from kfp import kubernetes

    kubernetes.set_security_context(task, run_as_user=RUN_AS, run_as_group=RUN_AS,
                                    run_as_non_root=True)
    kubernetes.add_pod_label(task, "app.kubernetes.io/part-of", spec.name)
    kubernetes.add_pod_label(task, "baton.dev/stage", name)
    if options.credentials_secret:
        kubernetes.use_secret_as_env(task, options.credentials_secret,
                                     {k: k for k in CREDENTIAL_KEYS}, optional=True)
