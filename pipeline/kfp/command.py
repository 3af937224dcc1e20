"""`baton kfp`: the pipeline compiled for Kubeflow Pipelines or Vertex AI Pipelines; run or
submitted.

    baton kfp [SPEC] --out pipeline.yaml --pipeline-root URL [--engine kfp|vertex] [...]
    baton kfp [SPEC] --run-local [--param NAME=VALUE ...]       KFP's own local runner
    baton kfp [SPEC] --submit --host URL [--param NAME=VALUE]   kfp.Client against a KFP host

Exit codes: 0 written (run, submitted); 1 a local run failed; 2 bad usage or a spec a pipeline
cannot express (nothing is written then). docs/kfp.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from baton.errors import EXIT_OK, UsageError
from baton.strategies.factory import STRATEGIES


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="baton kfp", description="Compile a pipeline spec for Kubeflow Pipelines "
                "2.x or Vertex AI Pipelines (IR YAML, one step per stage running the Baton "
                "image), run it with kfp.local, or submit it to a KFP host. docs/kfp.md.")
    p.add_argument("spec", nargs="?", help="pipeline YAML (default: the embedded penguins pipeline)")
    p.add_argument("--out", help="write the compiled pipeline here (IR YAML); the RBAC its "
                   "training steps need goes beside it as <name>.rbac.yaml")
    p.add_argument("--engine", choices=("kfp", "vertex"), default="kfp",
                   help="Kubeflow Pipelines (default) or Vertex AI Pipelines")
    p.add_argument("--pipeline-root", metavar="URL", help="the bucket where the engine keeps "
                   "artifacts (Vertex: gs://); --run-local: a directory (default ./kfp-root)")
    p.add_argument("--runs-dir", metavar="URL", help="Baton's runs directory (default "
                   "<pipeline root>/runs; --run-local: the spec's runs_dir)")
    p.add_argument("--image", help="the Baton image the steps run (default: cluster.image)")
    p.add_argument("--retries", type=int, default=3, help="KFP retries of a step that exits "
                   "128 or more (default 3); exits 1-127 are not retried")
    p.add_argument("--retry-backoff", type=int, default=30, metavar="SECONDS",
                   help="first wait before a retry, doubling (default 30; --run-local: 0)")
    p.add_argument("--workers", type=int, help="training tasks (as for `baton run`)")
    p.add_argument("--ps", type=int, help="parameter servers (with --strategy parameter_server)")
    p.add_argument("--strategy", choices=STRATEGIES, help="tf.distribute strategy")
    p.add_argument("--namespace", help="kfp engine: where training objects are created "
                   "(default: cluster.namespace)")
    p.add_argument("--target", choices=("jobset", "trainjob", "tfjob"), default="jobset",
                   help="kfp engine: the training object a multi-worker or parameter-server "
                   "train step creates and waits on, as `baton k8s --target` (default jobset)")
    p.add_argument("--queue", help="kfp engine: the Kueue LocalQueue that admits the training "
                   "object (as `baton k8s --queue`)")
    p.add_argument("--credentials-secret", metavar="NAME", help="kfp engine: a Secret whose "
                   "keys AWS_ACCESS_KEY_ID, ... become every step's environment")
    p.add_argument("--service-account", metavar="NAME", help="kfp engine: the training pods' "
                   "service account (IRSA, Workload Identity)")
    p.add_argument("--kfp-service-account", metavar="NAME", default="pipeline-runner",
                   help="the account KFP runs the steps as, given the RBAC (default "
                   "pipeline-runner; a multi-user profile's is default-editor)")
    p.add_argument("--vertex-project", help="Vertex: the project of the CustomJob (default: "
                   "the step's own, CLOUD_ML_PROJECT_ID)")
    p.add_argument("--vertex-location", default="us-central1", help="Vertex: the region")
    p.add_argument("--vertex-machine-type", default="n1-standard-4",
                   help="Vertex: each worker pool's machine type")
    p.add_argument("--vertex-accelerator", default="NVIDIA_TESLA_T4", metavar="TYPE",
                   help="Vertex: the accelerator of steps and worker pools that get the "
                   "spec's GPUs (cluster.resources.gpu; default NVIDIA_TESLA_T4)")
    p.add_argument("--run-local", action="store_true", help="run it here with kfp.local "
                   "(SubprocessRunner: each step a subprocess)")
    p.add_argument("--submit", action="store_true", help="create a run on --host with kfp.Client")
    p.add_argument("--host", help="--submit: the KFP API endpoint (or KF_PIPELINES_ENDPOINT)")
    p.add_argument("--experiment", help="--submit: the experiment (default: Default)")
    p.add_argument("--run-name", help="--submit: the run's name")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a pipeline parameter for --run-local or --submit (run_id, runs_dir, "
                   "epochs, data_path, config='{\"train\": {...}}', ...)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if not (args.out or args.run_local or args.submit):
        raise UsageError("give --out FILE, --run-local or --submit (`baton kfp -h`)")
    if args.run_local and args.submit:
        raise UsageError("--run-local runs here and --submit on a KFP host: give one")
    out = _check_out(args.out) if args.out else None
    try:
        import kfp  # noqa: F401 - the optional extra, checked before anything else happens
    except ImportError:
        raise UsageError("baton kfp needs the kfp SDK, an optional extra: "
                         "pip install 'baton[kfp]'") from None
    from baton.pipeline.kfp import compile as K
    from baton.pipeline.spec import load_spec

    spec = load_spec(args.spec)
    local = args.run_local
    options = K.KfpOptions(
        engine=args.engine,
        pipeline_root=args.pipeline_root or ("kfp-root" if local else None),
        runs_dir=args.runs_dir or (spec.runs_dir if local else None),
        image=args.image, retries=args.retries,
        retry_backoff_s=0 if local and "--retry-backoff" not in argv else args.retry_backoff,
        workers=args.workers, ps=args.ps, strategy=args.strategy,
        namespace=args.namespace, target=args.target, queue=args.queue,
        credentials_secret=args.credentials_secret,
        service_account=args.service_account, vertex_project=args.vertex_project,
        vertex_location=args.vertex_location, vertex_machine_type=args.vertex_machine_type,
        vertex_accelerator=args.vertex_accelerator,
        local=local)
    compiled = K.build(spec, options)
    values = _values(args.param, compiled.params)
    with tempfile.TemporaryDirectory(prefix="baton-kfp-") as tmp:
        path = K.write(compiled, out or Path(tmp) / "pipeline.yaml")
        if out is not None:
            written = [str(out)]
            rbac = _rbac(compiled, spec, options, args.kfp_service_account)
            if rbac is not None:
                rbac_path = out.with_name(f"{out.stem}.rbac.yaml")
                rbac_path.write_text(rbac)
                written.append(str(rbac_path))
            print(f"wrote {', '.join(written)}: pipeline {compiled.name!r} for {args.engine}, "
                  f"{len(spec.stages)} stage step(s), root {compiled.root}, runs "
                  f"{compiled.runs_dir}" + _training_note(compiled))
        if local:
            from baton.pipeline.kfp.local import run_local

            return run_local(path, compiled.root, values)
        if args.submit:
            from baton.pipeline.kfp.local import submit

            return submit(path, args.host, values, args.experiment, args.run_name,
                          args.namespace)
    return EXIT_OK


def _check_out(out: str) -> Path:
    path = Path(out)
    if path.is_dir() or not path.name:
        raise UsageError(f"--out: {out} is a directory; give the pipeline's file name")
    if not path.parent.is_dir():
        raise UsageError(f"--out: {path.parent} is not a directory. Received: --out {out}")
    return path


def _values(pairs: list[str], params: Any) -> dict[str, Any]:
    """`--param NAME=VALUE` as the parameters' types (exit 2 naming the bad one)."""
    by_name = {p.name: p for p in params}
    values: dict[str, Any] = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or name not in by_name:
            from baton.configs import did_you_mean

            raise UsageError(f"--param: must be NAME=VALUE with NAME one of "
                             f"{', '.join(by_name)}{did_you_mean(name, by_name)}. "
                             f"Received: {pair!r}")
        kind = by_name[name].type
        try:
            values[name] = int(text) if kind is int else json.loads(text) if kind is dict else text
        except ValueError:
            raise UsageError(f"--param {name}: must be {'a whole number' if kind is int else 'a JSON object'}. "
                             f"Received: {text!r}") from None
        if kind is dict and not isinstance(values[name], dict):
            raise UsageError(f"--param {name}: must be a JSON object. Received: {text!r}")
    return values


def _rbac(compiled: Any, spec: Any, options: Any, account: str) -> str | None:
    """The Role and RoleBinding the training steps need (kfp engine with a training object)."""
    if options.engine != "kfp" or not compiled.launches:
        return None
    from baton.k8s.render import dump
    from baton.pipeline.kfp.launch import TARGETS, rbac

    namespace = options.namespace or spec.cluster.namespace
    kinds = tuple(sorted({TARGETS[launch["flags"]["target"]]
                          for launch in compiled.launches.values()}))
    return dump(rbac(namespace, account, spec.name, kinds))


def _training_note(compiled: Any) -> str:
    from baton.pipeline.kfp.launch import TARGETS

    if not compiled.launches:
        return "; training in its step"
    parts = []
    for stage, launch in compiled.launches.items():
        f = launch["flags"]
        what = "a Vertex AI CustomJob" if launch["engine"] == "vertex" else \
            f"a {TARGETS[f['target']]}"
        parts.append(f"{stage}: {what} ({f['strategy']}, workers {f['workers']}, ps {f['ps']})")
    return "; " + "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
