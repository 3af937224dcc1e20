"""Who the federation's clients are, from a federated stage's config as the spec writes it.

`baton k8s` needs only the clients (names, and for real silos where their data is), the
SuperNodes' resources and the claim sizes; it reads them from the stage's typed settings
(strategies.federated_settings.FederatedSettings, the stage's own Config, which lives below
pipeline so that k8s may read it). Everything the manifests could not express besides the
settings' own checks (two clients naming the same objects, a name with nothing DNS-safe in it,
malformed quantities, unreadable key files) is refused here, naming
`stages.<stage>.config.<field>`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.configs import build_config
from baton.errors import ConfigError
from baton.k8s import federation_pki as pki
from baton.k8s.errors import ManifestError
from baton.k8s.options import DNS1123_LABEL, Resources, check_quantity
from baton.strategies.federated_settings import ClaimSizes, FederatedSettings, Silo, TLSSettings

_NOT_DNS = re.compile(r"[^a-z0-9]+")


def dns_name(name: str) -> str:
    """A client name as a DNS-1123 label piece: `Hospital_A` -> `hospital-a` ('' if nothing left)."""
    return _NOT_DNS.sub("-", name.lower()).strip("-")


@dataclasses.dataclass(frozen=True)
class FederatedClient:
    """One SuperNode: the client's name (as the ServerApp reports it), its DNS-safe form, and
    where its data is: `examples` (a silo's path on its own machine) or None in a rehearsal."""

    name: str
    dns: str
    examples: str | None = None
    claim: str | None = None
    # the silo operator's own SuperNode key pair (OpenSSH text), read from the spec's
    # `public_key`/`private_key` files; None: generated with the manifests
    public_key: str | None = None
    private_key: str | None = None


@dataclasses.dataclass(frozen=True)
class Federation:
    """The federated stage of a run, as the manifests need it.

    Attributes:
        stage: the stage's name (its outputs are `<run dir>/<stage>/...`).
        clients: one per SuperNode, in the spec's order; names distinct after sanitising.
        rehearsal: `clients: N` (silos partitioned from one examples artifact on the artifacts
            claim) rather than a list of real silos, each with its own claim.
        inputs: `<stage>/<output>` paths the plan step waits for (the stage's `inputs`).
        node_resources: each SuperNode's requests (local training happens there); the
            SuperLink, which runs the ServerApp, gets the run's `JobOptions.resources`.
        data_size: the size of each silo claim that `baton k8s` writes.
    """

    stage: str
    clients: tuple[FederatedClient, ...]
    rehearsal: bool
    inputs: tuple[str, ...] = ()
    node_resources: Resources | None = None
    data_size: str = ClaimSizes.data_size
    state_size: str = ClaimSizes.state_size
    # the operator's SuperLink CA, certificate and key (PEM, from the spec's `tls` files);
    # None: generated with the manifests (k8s.federated.federation_keys)
    tls: tuple[str, str, str] | None = None
    tls_hosts: tuple[str, ...] = ()  # names the SuperNodes dial besides the in-cluster Service

    @classmethod
    def from_config(cls, stage: str, config: Mapping[str, Any] | None,
                    inputs: tuple[str, ...] = (), spec_dir: Path | None = None) -> Federation:
        """From the stage's config mapping as written in the spec: built into the stage's typed
        settings (`FederatedSettings`, the stage's own Config and checks), then `from_settings`;
        ManifestError names `stages.<stage>.config.<field>`."""
        where = f"stages.{stage}.config"
        try:
            settings = build_config(FederatedSettings, config, where)
        except ConfigError as exc:
            first = getattr(exc, "errors", [exc])[0]
            raise ManifestError(first.path or where, str(first).split(": ", 1)[-1]) from None
        return cls.from_settings(stage, settings, inputs, spec_dir)

    @classmethod
    def from_settings(cls, stage: str, settings: FederatedSettings,
                      inputs: tuple[str, ...] = (), spec_dir: Path | None = None) -> Federation:
        """From the stage's typed settings, with what only a cluster refuses: no `insecure`, a
        number of clients given, names that stay distinct as DNS labels, claims, quantities,
        the operator's TLS files and silo keys (read relative to `spec_dir`). ManifestError
        names `stages.<stage>.config.<field>`."""
        where = f"stages.{stage}.config"
        if settings.insecure:
            raise ManifestError(f"{where}.insecure", "a cluster's federation runs with TLS and "
                                "SuperNode authentication; insecure: true is for a local "
                                "rehearsal on 127.0.0.1 (`baton run`) only. Received: "
                                f"{settings.insecure!r}")
        tls, hosts = _tls(f"{where}.tls", settings.tls, spec_dir)
        if settings.clients is None:
            by = " (partition.by's distinct values: give their number)" \
                if settings.by_data else ""
            raise ManifestError(f"{where}.clients", "must be a number of clients (a rehearsal: "
                                "client-0 ... client-N-1) or a list of {name, examples}: a "
                                f"cluster's SuperNodes are written before any data is read{by}. "
                                f"Received: {settings.clients!r}")
        if settings.rehearsal:
            clients = tuple(FederatedClient(f"client-{i}", f"client-{i}")
                            for i in range(settings.count))
        else:
            clients = tuple(_client(f"{where}.clients[{i}]", s, spec_dir)
                            for i, s in enumerate(settings.silos))
        seen: dict[str, str] = {}
        for i, c in enumerate(clients):
            if c.dns in seen:
                same = "" if seen[c.dns] == c.name else f" (as {seen[c.dns]!r} does)"
                raise ManifestError(f"{where}.clients[{i}].name",
                                    f"client names must be distinct; {c.name!r} names Kubernetes "
                                    f"objects '{c.dns}'{same}. Received: {[x.name for x in clients]}")
            seen[c.dns] = c.name
        res = settings.resources
        node_resources = None
        if res is not None:
            given = {k: v for k, v in dataclasses.asdict(res).items() if v is not None}
            try:
                node_resources = Resources(**given)
            except ManifestError as exc:
                raise ManifestError(f"{where}.{exc.field}", str(exc).split(": ", 1)[1]) from None
        sizes = {k: check_quantity(f"{where}.k8s.{k}", v)
                 for k, v in dataclasses.asdict(settings.k8s).items()}
        return cls(stage=stage, clients=clients, rehearsal=settings.rehearsal, inputs=inputs,
                   node_resources=node_resources, tls=tls, tls_hosts=hosts, **sizes)


def _read(field: str, value: object, spec_dir: Path | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ManifestError(field, f"must be the path of a file. Received: {value!r}")
    path = Path(value)
    if not path.is_absolute() and spec_dir is not None:
        path = spec_dir / path
    try:
        return path.read_text()
    except OSError as exc:
        raise ManifestError(field, f"cannot read {path}: {exc.strerror or exc}. Received: "
                            f"{value!r}") from None


def _tls(field: str, tls: TLSSettings, spec_dir: Path | None
         ) -> tuple[tuple[str, str, str] | None, tuple[str, ...]]:
    """The operator's CA, certificate and key (PEM; all three or none, as TLSSettings checks)
    and the extra host names."""
    files = (tls.ca_certfile, tls.certfile, tls.keyfile)
    if tls.ca_certfile is None or tls.certfile is None or tls.keyfile is None:
        return None, tuple(tls.hosts)
    names = ("ca_certfile", "certfile", "keyfile")
    pem = tuple(_read(f"{field}.{k}", str(f), spec_dir) for k, f in zip(names, files, strict=True))
    return (pem[0], pem[1], pem[2]), tuple(tls.hosts)


def _client(field: str, silo: Silo, spec_dir: Path | None = None) -> FederatedClient:
    """A listed silo's SuperNode: a DNS-safe name, a claim name, its key pair read and checked."""
    dns = dns_name(silo.name)
    if not dns:
        raise ManifestError(f"{field}.name", "must contain a letter or digit: it names the "
                            f"client's Kubernetes objects. Received: {silo.name!r}")
    claim = silo.claim
    if claim is not None and (not DNS1123_LABEL.match(claim) or len(claim) > 63):
        raise ManifestError(f"{field}.claim", "must name a PersistentVolumeClaim (a DNS-1123 "
                            f"label). Received: {claim!r}")
    public = private = None
    if silo.public_key is not None or silo.private_key is not None:
        if silo.public_key is None or silo.private_key is None:
            raise ManifestError(f"{field}.private_key", "this silo's SuperNode Deployment is in "
                                "these manifests: give its public_key and private_key "
                                "together, or neither (a key pair is generated). Received: "
                                f"public_key={_text(silo.public_key)!r}, "
                                f"private_key={_text(silo.private_key)!r}")
        public = _read(f"{field}.public_key", str(silo.public_key), spec_dir)
        private = _read(f"{field}.private_key", str(silo.private_key), spec_dir)
        for key, wrong in (("public_key", pki.check_public_key(f"{field}.public_key", public)),
                           ("private_key", pki.check_key_pair(f"{field}.private_key", private,
                                                              public))):
            if wrong is not None:
                raise ManifestError(f"{field}.{key}", wrong.split(": ", 1)[1])
    return FederatedClient(silo.name, dns, str(silo.examples), claim, public, private)


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)
