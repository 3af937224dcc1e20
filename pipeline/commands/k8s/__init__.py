"""`baton k8s`: Kubernetes manifests from a pipeline spec; validate, emulate and submit them.

    baton k8s [SPEC] --out DIR [--workers N] [--ps M] [--strategy S] [--image I] [--namespace NS]
    baton k8s validate FILE_OR_DIR...
    baton k8s emulate TFJOB.yaml [--volume-dir DIR] [--work-dir DIR] [--command "CMD ..."]
    baton k8s emulate OUT_DIR | FEDERATION.yaml... [--volume CLAIM=DIR] [--volume-dir DIR]
    baton k8s submit DIR_OR_FILE... [--kubeconfig F] [--context C] [--namespace NS] [--dry-run]

A module per subcommand: `generate` (the default: the only place that knows both a PipelineSpec
and the `k8s` package; it splits the stages into data Job / training / release Job and hands
`k8s` plain dataclasses), `validate`, `emulate` and `submit` (manifests in, no spec), each
imported only when its subcommand runs.
"""

from __future__ import annotations

from importlib import import_module

from baton.pipeline.commands.k8s.generate import SUBCOMMANDS


def main(argv: list[str]) -> int:
    """A subcommand's module runs it (`emulate.emulate(argv)`); anything else is `generate`'s.
    The module names stay free in this namespace (`from ...k8s import generate` is the module)."""
    name = argv[0] if argv and argv[0] in SUBCOMMANDS else "generate"
    command = import_module(f"{__name__}.{name}")
    return getattr(command, name)(argv[1:] if name != "generate" else argv)
