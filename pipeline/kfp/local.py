"""A compiled pipeline run by KFP's own code: here with `kfp.local`, or on a KFP host.

`run_local` loads the IR YAML back with the SDK (`kfp.components.load_component_from_file`) and
runs it with `kfp.local`'s SubprocessRunner: KFP's orchestrator walks the DAG, resolves the
parameters and the artifacts passed between steps, applies each task's retry policy, and runs
every step's component in a subprocess of this Python (the Baton image's interpreter on a
cluster; here this environment's, where Baton and kfp are installed). `submit` creates a run on
a Kubeflow Pipelines host with `kfp.Client`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from baton.errors import EXIT_FAILED, EXIT_OK, BatonError, UsageError


def run_local(pipeline_yaml: Path, pipeline_root: str, arguments: dict[str, Any],
              caching: bool = False) -> int:
    """Run the compiled pipeline with kfp.local; 0 when it succeeded, 1 when a step failed
    (kfp.local has printed every step's log, Baton's message in the failed step's).

    `caching` turns kfp.local's step cache on; the compiled tasks keep theirs off, as on a
    cluster (docs/kfp.md), so it changes nothing unless a task turned it on.
    """
    from kfp import components, local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=pipeline_root,
               raise_on_error=True, enable_caching=caching)
    pipeline = components.load_component_from_file(str(pipeline_yaml))
    try:
        pipeline(**arguments)
    except RuntimeError as exc:  # kfp.local: "Pipeline ... finished with status FAILURE ..."
        print(f"baton kfp: {exc}", flush=True)
        return EXIT_FAILED
    return EXIT_OK


def submit(pipeline_yaml: Path, host: str | None, arguments: dict[str, Any],
           experiment: str | None, run_name: str | None, namespace: str | None) -> int:
    """Create a run of the compiled pipeline on the KFP API at `host` (kfp.Client; a bearer
    token from KF_PIPELINES_TOKEN when the endpoint wants one). The step cache setting of the
    compiled tasks (off) is kept: `enable_caching` is not passed, which would override it."""
    import kfp

    host = host or os.environ.get("KF_PIPELINES_ENDPOINT")
    if not host:
        raise UsageError("--submit: give --host URL (the KFP API endpoint) or set "
                         "KF_PIPELINES_ENDPOINT")
    try:
        client = kfp.Client(host=host, namespace=namespace or "kubeflow",
                            existing_token=os.environ.get("KF_PIPELINES_TOKEN"))
        result = client.create_run_from_pipeline_package(
            str(pipeline_yaml), arguments=arguments, run_name=run_name,
            experiment_name=experiment, namespace=namespace)
    except Exception as exc:  # noqa: BLE001 - the client's HTTP and API errors, said in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BatonError(f"--submit {host}: {type(exc).__name__}: {first}") from None
    print(f"submitted run {result.run_id} to {host}", flush=True)
    return EXIT_OK
