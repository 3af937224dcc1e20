"""The pipeline on Kubeflow Pipelines and Vertex AI Pipelines (`baton kfp`, docs/kfp.md).

A spec compiles, with the kfp SDK, to KFP's intermediate representation (IR YAML): one
lightweight Python component per stage running the Baton image, whose body runs the same
`baton run SPEC --run-id R --only STAGE --runs-dir URL` a Kubernetes Job of `baton k8s` runs.
The run directory on a bucket stays the truth (its commits, manifests and content-keyed cache,
docs/artifacts.md); the KFP artifacts passed between steps are those commits' records, so KFP
draws the DAG, passes them and shows them, and a step checks that what it was handed is what
the run holds.

Modules, top to bottom: `command` (the CLI) and `local` (kfp.local, kfp.Client);
`compile` (the pipeline function and its IR); `components` (each step's component, generated);
`step` (what a step does in its pod) and `launch` (training objects a step starts and waits
on); `bundle` (the spec and the user's modules, as shipped) and `params` (the run's
parameters); `artifacts` (the records KFP passes).
"""
