"""Where an external federation's files are: one definition for the stage and the manifests.

A federated stage run against a SuperLink it did not start (`baton run --superlink`, the
Kubernetes run Job) writes a rehearsal's silos, the plan and the ServerApp's outputs under
`<run dir>/<stage>.federation/`, outside the stage's own directory (which is renamed when the
stage ends). The stage (pipeline.federated) writes there and the manifests (k8s.federated) mount
and pull from there, so the layout lives in a layer both may import: k8s never imports pipeline.
"""

from __future__ import annotations

FEDERATION_SUFFIX = ".federation"  # <run dir>/<stage>.federation
PLAN_FILE = "plan.json"  # the plan the ServerApp and the ClientApps read
SILOS_DIR = "clients"  # a rehearsal's silos: clients/<client>/


def federation_dir(run_dir: object, stage: str) -> str:
    """`<run dir>/<stage>.federation` as text (`run_dir` a path or a URL on a bucket)."""
    return f"{str(run_dir).rstrip('/')}/{stage}{FEDERATION_SUFFIX}"
