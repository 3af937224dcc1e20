"""The federation's credentials as files: generated for a rehearsal, or the operator's own.

A secure federation (the default; docs/federated.md) needs, as Flower 1.42 takes them:

- the SuperLink's TLS certificate and key and the CA that signed them
  (`--ssl-certfile/--ssl-keyfile/--ssl-ca-certfile`); every SuperNode and CLI trusts the CA
  (`--root-certificates`, the CLI's `root-certificates`);
- one EC key pair per client: the private key stays with that client's SuperNode
  (`--auth-supernode-private-key`), the public key is registered with the SuperLink before the
  run (pipeline.federated.control.Control.register), which runs with `--enable-supernode-auth`
  and so admits no other node;
- the Control API token (pipeline.federated.superlink: without it the SuperLink refuses every
  `flwr` command, `run` and `supernode register` included);
- a SuperExec secret per daemon: what proves a ServerApp or ClientApp host to the Runtime API of
  its SuperLink or SuperNode (Flower's `--superexec-auth-secret-file`).

`rehearsal()` makes all of it (k8s.federation_pki) under a directory of the run; `Operator`
material (the spec's `tls` and each silo's `public_key`/`private_key`) is checked, not copied:
the secrets Baton generates beside it are only the token and the SuperExec secrets. Private
files are written 0600 in a 0700 directory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from baton.errors import StageError
from baton.k8s import federation_pki as pki

TOKEN_FILE = "control.token"


@dataclasses.dataclass(frozen=True)
class NodeCredentials:
    """One client's SuperNode: its key pair (the private key None when the SuperNode runs on
    the silo's machine, not here) and the secret of its Runtime API."""

    public_key: Path
    private_key: Path | None
    superexec_secret: Path


@dataclasses.dataclass(frozen=True)
class Credentials:
    """Paths of everything a secure federation's processes and CLI read."""

    ca_cert: Path
    server_cert: Path | None  # None: the SuperLink is not started here (--superlink)
    server_key: Path | None
    control_token: Path
    superexec_secret: Path  # the SuperLink's
    nodes: Mapping[str, NodeCredentials]

    def token(self) -> str:
        return self.control_token.read_text().strip()


def _private(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def _public(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text)
    return path


def rehearsal(directory: Path, clients: Sequence[str],
              hosts: Sequence[str] = ()) -> Credentials:
    """A CA, the SuperLink's certificate (for `hosts` and the loopback names), a key pair
    and a SuperExec secret per client, the token: everything generated, under `directory`."""
    ca = pki.make_authority(days=7)
    server = pki.issue_server(ca, list(hosts), days=7)
    nodes = {}
    for i, name in enumerate(clients):
        keys, stem = pki.node_key_pair(), directory / "nodes" / f"{i}"
        nodes[name] = NodeCredentials(
            public_key=_public(stem.with_suffix(".pub"), keys.public_openssh),
            private_key=_private(stem.with_suffix(".key"), keys.private_openssh),
            superexec_secret=_private(stem.with_suffix(".superexec"), pki.token()))
    return Credentials(
        ca_cert=_public(directory / "ca.crt", ca.cert_pem),
        server_cert=_public(directory / "superlink.crt", server.cert_pem),
        server_key=_private(directory / "superlink.key", server.key_pem),
        control_token=_private(directory / TOKEN_FILE, pki.token()),
        superexec_secret=_private(directory / "superlink.superexec", pki.token()),
        nodes=nodes)


@dataclasses.dataclass(frozen=True)
class Operator:
    """The operator's own material, paths as the spec gives them (resolved by the caller).

    Attributes:
        ca_certfile, certfile, keyfile: the SuperLink's CA, certificate and key (`tls:`); all
            three or none (None: a CA and certificate are generated, as in a rehearsal).
        public_keys: client -> its registered OpenSSH public key (`clients[].public_key`).
        private_keys: client -> its private key, for the SuperNodes started here.
    """

    ca_certfile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    public_keys: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    private_keys: Mapping[str, Path] = dataclasses.field(default_factory=dict)


def with_operator(directory: Path, clients: Sequence[str], own: Operator,
                  hosts: Sequence[str] = ()) -> Credentials:
    """The operator's material where given (checked), generated material for the rest."""
    base = rehearsal(directory, [c for c in clients if c not in own.public_keys], hosts)
    problems = []
    ca, cert, key = base.ca_cert, base.server_cert, base.server_key
    if own.ca_certfile is not None:
        ca, cert, key = own.ca_certfile, own.certfile, own.keyfile
        for field, p in (("tls.ca_certfile", ca), ("tls.certfile", cert),
                         ("tls.keyfile", key)):
            if p is None or not Path(p).is_file():
                problems.append(f"{field}: no such file. Received: {p}")
        if not problems:
            problems += pki.check_server_certificate(
                "tls.certfile", Path(cert).read_text(), Path(ca).read_text(),  # type: ignore[arg-type]
                list(hosts))
    nodes = dict(base.nodes)
    for name, public in own.public_keys.items():
        field = f"clients.{name}.public_key"
        if not public.is_file():
            problems.append(f"{field}: no such file. Received: {public}")
            continue
        if (wrong := pki.check_public_key(field, public.read_text())) is not None:
            problems.append(wrong)
        private = own.private_keys.get(name)
        if private is not None and not private.is_file():
            problems.append(f"clients.{name}.private_key: no such file. Received: {private}")
        nodes[name] = NodeCredentials(public, private, _private(
            directory / "nodes" / f"own-{len(nodes)}.superexec", pki.token()))
    if problems:
        raise StageError("federated: " + "; ".join(problems))
    return dataclasses.replace(base, ca_cert=Path(ca), server_cert=cert, server_key=key,
                               nodes=nodes)


def remote(ca_cert: Path, token_file: Path, public_keys: Mapping[str, Path]) -> Credentials:
    """What `baton run --superlink` needs of a SuperLink it did not start: the CA that signed
    its certificate, its Control API token, and the clients' public keys to register."""
    missing = [str(p) for p in (ca_cert, token_file, *public_keys.values()) if not p.is_file()]
    if missing:
        raise StageError(f"federated: --superlink-credentials lacks {missing}")
    nodes = {n: NodeCredentials(p, None, Path()) for n, p in public_keys.items()}
    return Credentials(ca_cert, None, None, token_file, Path(), nodes)


def cli_login(home: Path, address: str, token: str) -> None:
    """Make the Flower CLI under FLWR_HOME=`home` send `token` to the SuperLink at `address`.

    The CLI keeps per-SuperLink credentials in `$FLWR_HOME/credentials.yaml` (Flower's
    FileCredentialStore) and, for an address whose authn type is `oidc`, sends the stored
    access token as `Authorization: Bearer` on every Control API call (its
    CliAccountAuthHttpInterceptor). The SuperLink's BearerTokenPlugin accepts exactly this
    token (pipeline.federated.superlink); there is no device flow behind it."""
    from flwr.cli.constant import (
        ACCESS_TOKEN_STORE_KEY,
        AUTHN_TYPE_STORE_KEY,
        REFRESH_TOKEN_STORE_KEY,
    )
    from flwr.supercore.credential_store import FileCredentialStore

    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = FileCredentialStore(home / "credentials.yaml")
    store.set(AUTHN_TYPE_STORE_KEY % address, b"oidc")
    store.set(ACCESS_TOKEN_STORE_KEY % address, token.encode())
    store.set(REFRESH_TOKEN_STORE_KEY % address, token.encode())
    os.chmod(home / "credentials.yaml", 0o600)


def for_stage(directory: Path, clients: Sequence[str], own: Operator, hosts: Sequence[str],
              remote_dir: Path | None) -> Credentials:
    """A federated stage's credentials: with `remote_dir` (`--superlink-credentials`, a
    SuperLink elsewhere) its `ca.crt`, `control.token` and `nodes/<client>.pub` (a silo's
    `public_key` from the spec wins); otherwise the operator's material where given and
    generated material for the rest, under `directory`."""
    from baton.k8s.federation_config import dns_name

    if remote_dir is not None:
        return remote(remote_dir / "ca.crt", remote_dir / TOKEN_FILE, {
            n: own.public_keys.get(n, remote_dir / "nodes" / f"{dns_name(n)}.pub")
            for n in clients})
    return with_operator(directory, clients, own, hosts)
