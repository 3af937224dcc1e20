"""`baton k8s validate FILE_OR_DIR...`: manifests checked against the real CRDs, their webhooks'
rules, Kubernetes' schemas and the restricted Pod Security Standard; every violation listed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from baton.errors import EXIT_FAILED, EXIT_OK, UsageError
from baton.pipeline.commands.k8s.generate import _Parser


def validate(argv: list[str]) -> int:
    from baton.k8s.kube_schemas import source
    from baton.k8s.validate import validate_file

    p = _Parser(prog="baton k8s validate", description="Validate manifests: TFJobs, JobSets, "
                "TrainJobs and ClusterTrainingRuntimes against their CRDs (training operator "
                "v1.9.0, JobSet v0.12.0, Trainer v2.3.0) and their admission webhooks' rules, "
                "built-in kinds against Kubernetes' schemas, every pod against the restricted "
                "Pod Security Standard, a directory's NetworkPolicies and Namespace. Exit 0 when "
                "valid, 1 with every violation listed.")
    p.add_argument("files", nargs="+", help="YAML files or directories")
    args = p.parse_args(argv)
    missing = [f for f in args.files if not Path(f).exists()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    found = [v for f in args.files for v in validate_file(f)]
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} violation(s)", file=sys.stderr)
        return EXIT_FAILED
    print(f"ok: {', '.join(args.files)} (custom resources: their CRDs and webhook rules, TFJob "
          f"v1.9.0, JobSet v0.12.0, Trainer v2.3.0; built-in kinds: {source()}; pods: the "
          "restricted Pod Security Standard)")
    return EXIT_OK
