"""Kubernetes for Baton: the pipeline as a JobSet, a TrainJob or a TFJob; serving; validation;
local emulation; submission.

Takes plain dataclasses (`k8s.options.JobOptions`), never a pipeline spec: the CLI glue
(`pipeline/commands/k8s/`) builds the options. Modules, each importable on its own and free of
heavy imports at module level (the kubernetes client and jsonschema load inside functions):

* `options`   JobOptions / Topology / Resources / RunPolicy, refused early with the field named
* `jobset`, `trainjob`, `tfjob`, `jobs`, `serving`, `federated`, `pods`   manifest builders
  (`jobset`: the whole pipeline as one JobSet; `trainjob`: a Kubeflow Trainer v2 TrainJob and
  Baton's TensorFlow runtime; `federated`: a Flower SuperLink, SuperNodes, the run Job);
  `security` and `network` make every pod restricted and write the NetworkPolicies and
  Namespace; `render` writes a kustomize directory
* `crd`, `webhook`, `jobset_webhook`, `trainer_webhook`, `job_rules`, `kube_schemas`,
  `validate`   validation against the real CRDs, their webhooks' rules and Kubernetes' schemas;
  `trainer_controller` is what Trainer's controller makes of a TrainJob
* `emulator/` (a subpackage): `emulator.directory` runs a generated directory as `kubectl
  apply -k` would: `emulator.jobset` and `emulator.jobs` (the JobSet and Job controllers),
  `tfconfig`, `emulator.pods`, `emulator.tfjob` (a TFJob as the training operator would),
  `emulator.federation`, `emulator.serving`; `emulator.files` takes manifests given as files
* `submit`    create the manifests with the official kubernetes client
"""

from baton.k8s.errors import ManifestError, ValidationFailed, Violation
from baton.k8s.options import JobOptions, Resources, RunPolicy, Topology

__all__ = ["JobOptions", "ManifestError", "Resources", "RunPolicy", "Topology", "ValidationFailed",
           "Violation"]
