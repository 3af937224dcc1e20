"""The federation's credentials: generated or the operator's own, one Secret per pod.

`federation_keys` checks the operator's CA and certificate (the Service's and 127.0.0.1's names
in it) or generates them (k8s.federation_pki), with a Control API token, the SuperExec secrets
and each client's key pair; `build_secrets` gives each pod only what it needs.
"""

from __future__ import annotations

import base64
import dataclasses

from baton.k8s import federation_pki as pki
from baton.k8s.errors import ManifestError
from baton.k8s.federation_config import Federation
from baton.k8s.federation_names import (
    CLIENT_LABEL,
    node_secret_name,
    run_secret_name,
    superlink_name,
    superlink_secret_name,
)
from baton.k8s.options import JobOptions


@dataclasses.dataclass(frozen=True)
class FederationKeys:
    """Everything the federation's Secrets hold (text): the CA, the SuperLink's certificate
    and key, the Control API token, the SuperExec secrets, each client's key pair."""

    ca_cert: str
    server_cert: str
    server_key: str
    control_token: str
    superexec_secret: str
    nodes: dict[str, pki.NodeKeyPair]  # client dns name -> its key pair
    node_secrets: dict[str, str]  # client dns name -> its SuperExec secret


def superlink_hosts(opts: JobOptions, fed: Federation) -> list[str]:
    """The names a SuperNode may dial: the Service's in-cluster DNS names, then `tls.hosts`."""
    name, ns = superlink_name(opts), opts.namespace
    return [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}", name,
            *fed.tls_hosts]


def federation_keys(opts: JobOptions, fed: Federation) -> FederationKeys:
    """The operator's material where the spec gives it (checked: the certificate must be the
    CA's and name the Service and 127.0.0.1), generated material for the rest."""
    hosts = superlink_hosts(opts, fed)
    if fed.tls is not None:
        ca, cert, key = fed.tls
        problems = pki.check_server_certificate(f"stages.{fed.stage}.config.tls.certfile",
                                                cert, ca, [hosts[0], *fed.tls_hosts])
        if problems:
            raise ManifestError(f"stages.{fed.stage}.config.tls.certfile",
                                "; ".join(p.split(": ", 1)[1] for p in problems))
    else:
        authority = pki.make_authority()
        server = pki.issue_server(authority, hosts)
        ca, cert, key = authority.cert_pem, server.cert_pem, server.key_pem
    nodes = {c.dns: (pki.NodeKeyPair(c.private_key, c.public_key)
                     if c.private_key and c.public_key else pki.node_key_pair())
             for c in fed.clients}
    return FederationKeys(ca, cert, key, pki.token(), pki.token(), nodes,
                          {c.dns: pki.token() for c in fed.clients})


def _secret(opts: JobOptions, name: str, labels: dict[str, str], data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": opts.namespace, "labels": labels},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def build_secrets(opts: JobOptions, fed: Federation, keys: FederationKeys) -> list[dict]:
    """One Secret per pod, each with only what that pod needs: the SuperLink's certificate,
    key, token and SuperExec secret; a SuperNode's CA, private key and SuperExec secret; the
    run Job's CA, token and the public keys it registers (nodes/<client>.pub)."""
    out = [_secret(opts, superlink_secret_name(opts), opts.labels("superlink"), {
        "ca.crt": keys.ca_cert, "tls.crt": keys.server_cert, "tls.key": keys.server_key,
        "control.token": keys.control_token, "superexec.secret": keys.superexec_secret})]
    for c in fed.clients:
        out.append(_secret(opts, node_secret_name(opts, c),
                           {**opts.labels("supernode"), CLIENT_LABEL: c.dns}, {
                               "ca.crt": keys.ca_cert,
                               "node.key": keys.nodes[c.dns].private_openssh,
                               "superexec.secret": keys.node_secrets[c.dns]}))
    out.append(_secret(opts, run_secret_name(opts), opts.labels("federated-run"), {
        "ca.crt": keys.ca_cert, "control.token": keys.control_token,
        **{f"{c.dns}.pub": keys.nodes[c.dns].public_openssh for c in fed.clients}}))
    return out


