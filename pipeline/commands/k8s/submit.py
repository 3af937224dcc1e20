"""`baton k8s submit`: manifests validated, then created on a cluster with the official kubernetes
client; nothing is sent when one is invalid.
"""

from __future__ import annotations

from pathlib import Path

from baton.errors import EXIT_OK, BatonError, UsageError
from baton.pipeline.commands.k8s.generate import _Parser


def submit(argv: list[str]) -> int:
    from baton.k8s import submit as sub
    from baton.k8s.options import DNS1123_LABEL
    from baton.k8s.validate import validate_documents

    p = _Parser(prog="baton k8s submit", description="Create the manifests on a cluster with the "
                "official kubernetes client (your kubeconfig); TFJobs via CustomObjectsApi. A "
                "directory is created in the order of its kustomization.yaml. Exit 0 when every "
                "object was created, 1 when the cluster refused or could not be reached, 2 for an "
                "invalid manifest or kubeconfig (nothing is sent).")
    p.add_argument("paths", nargs="+", help="manifest files or a directory written by `baton k8s`")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--namespace", help="override the manifests' namespace")
    p.add_argument("--dry-run", action="store_true", help="server-side dry run (dryRun=All)")
    args = p.parse_args(argv)
    if args.namespace is not None and (not DNS1123_LABEL.match(args.namespace) or len(args.namespace) > 63):
        raise UsageError(f"--namespace: must be a DNS-1123 label. Received: {args.namespace!r}")
    missing = [f for f in args.paths if not Path(f).exists()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    try:
        pairs = [pair for path in args.paths for pair in sub.collect(path)]
    except sub.ManifestSetError as exc:
        raise UsageError(str(exc)) from exc
    found = validate_documents(pairs)
    if len(found) == 1:
        raise UsageError(f"invalid manifest, nothing submitted: {found[0]}")
    if found:
        lines = "\n".join(f"  - {v}" for v in found)
        raise UsageError(f"{len(found)} manifest violations, nothing submitted:\n{lines}")
    try:
        requests = sub.plan([doc for _, doc in pairs], namespace=args.namespace, dry_run=args.dry_run)
    except sub.SubmitError as exc:
        raise UsageError(f"{exc}; nothing submitted") from exc
    try:
        api_client = sub.load_client(args.kubeconfig, args.context)
    except sub.KubeconfigError as exc:
        raise UsageError(str(exc)) from exc
    try:
        sub.submit(requests, api_client, on_created=lambda line: print(line, flush=True))
    except sub.SubmitError as exc:
        raise BatonError(str(exc)) from exc
    return EXIT_OK
