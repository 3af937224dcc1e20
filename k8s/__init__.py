"""Kubernetes for Baton: TFJob and serving manifests, validation, local emulation, submission.

Takes plain dataclasses (`k8s.options.JobOptions`), never a pipeline spec: the CLI glue
(`pipeline/commands/k8s.py`) builds the options. Modules, each importable on its own and free of
heavy imports at module level (the kubernetes client and jsonschema load inside functions):

* `options`   JobOptions / Topology / Resources / RunPolicy, refused early with the field named
* `tfjob`, `jobs`, `serving`, `federated`, `pods`   manifest builders (`federated`: a Flower
  SuperLink, one SuperNode per client, the run Job, for the clients `federation_config` reads
  from the stage's config); `render` writes a kustomize directory
* `crd`, `webhook`, `kube_schemas`, `validate`   validation against the real schemas and rules
* `tfconfig`, `emulator_pods`, `emulator`   run a TFJob locally as the training operator would;
  `emulator_federation` the federation's Deployments, Services and Jobs
* `submit`    create the manifests with the official kubernetes client
"""

from baton.k8s.errors import ManifestError, ValidationFailed, Violation
from baton.k8s.options import JobOptions, Resources, RunPolicy, Topology

__all__ = ["JobOptions", "ManifestError", "Resources", "RunPolicy", "Topology", "ValidationFailed",
           "Violation"]
