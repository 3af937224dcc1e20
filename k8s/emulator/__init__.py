"""`baton k8s emulate`: the controllers and the kubelet played on this machine, one local process
per pod, so the exact manifests `baton k8s` writes run end to end before a cluster sees them.

`directory` (`baton k8s emulate DIR`: what `kubectl apply -k` runs, in order) and `files` (the
manifests given as files, each to its emulator) > `tfjob` (the training operator), `jobset` (the
JobSet controller over `jobs`, the Job controller's rules), `federation` (Deployments, Services
and Jobs of a Flower federation) and `serving` (the serving Deployment's readiness) > `pods` (a
replica's pod as local process plans, as the kubelet would start it). Nothing is imported here:
the emulators load only when a command runs them.
"""
