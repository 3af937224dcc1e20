"""Errors and violations of the k8s package.

Two kinds of trouble: a topology that cannot be expressed as manifests (refused at generation,
`ManifestError`, naming the option field), and a manifest that the API server or the training
operator would reject (`Violation`, naming the JSON path inside the manifest). Both say what was
received, so a user can fix the problem without reading our code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from baton.errors import EXIT_USAGE, BatonError


class ManifestError(BatonError, ValueError):
    """Options that no valid manifest can express; `field` names the offending option."""

    exit_code = EXIT_USAGE

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclasses.dataclass(frozen=True)
class Violation:
    """One reason a manifest would be rejected.

    Attributes:
        path: JSON path inside the document, e.g. `spec.tfReplicaSpecs.Worker.replicas`.
        message: what is wrong and what was received.
        rule: who would reject it: `schema` (the CRD / Kubernetes OpenAPI schema),
            `webhook` (the training operator's admission webhook) or `baton` (checks the operator
            applies at run time, or that make the job unrunnable).
        source: the file (and document index) the manifest came from, if any.
    """

    path: str
    message: str
    rule: str = "schema"
    source: str = ""

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.path or '<root>'}: {self.message} [{self.rule}]"


class ValidationFailed(BatonError, ValueError):
    """Raised by `k8s.validate.check` when a manifest has violations; carries all of them."""

    exit_code = EXIT_USAGE

    def __init__(self, violations: Iterable[Violation]) -> None:
        self.violations = list(violations)
        lines = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"{len(self.violations)} manifest violation(s):\n{lines}")


def json_path(parts: Iterable[object]) -> str:
    """`["spec", "containers", 0, "image"]` -> `spec.containers[0].image`."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out
