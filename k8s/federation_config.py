"""Who the federation's clients are, from a federated stage's config as the spec writes it.

`baton k8s` needs only the clients (names, and for real silos where their data is), the
SuperNodes' resources and the claim sizes; it reads them from the stage's config mapping rather
than through the stage's typed config, since `k8s` never imports `pipeline`. Everything the
manifests could not express (two clients naming the same objects, a name with nothing DNS-safe
in it, malformed resources) is refused here, naming `stages.<stage>.config.<field>`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.k8s import federation_pki as pki
from baton.k8s.errors import ManifestError
from baton.k8s.options import DNS1123_LABEL, Resources, check_quantity

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
    data_size: str = "10Gi"
    state_size: str = "1Gi"
    # the operator's SuperLink CA, certificate and key (PEM, from the spec's `tls` files);
    # None: generated with the manifests (k8s.federated.federation_keys)
    tls: tuple[str, str, str] | None = None
    tls_hosts: tuple[str, ...] = ()  # names the SuperNodes dial besides the in-cluster Service

    @classmethod
    def from_config(cls, stage: str, config: Mapping[str, Any] | None,
                    inputs: tuple[str, ...] = (), spec_dir: Path | None = None) -> Federation:
        """From the stage's config mapping as written in the spec (`clients`, `resources`,
        optional `k8s: {data_size}`, `tls`, the silos' keys, read relative to `spec_dir`);
        ManifestError names `stages.<stage>.config.<field>`."""
        config = config or {}
        where = f"stages.{stage}.config"
        if not isinstance(config, Mapping):
            raise ManifestError(where, f"must be a mapping. Received: {config!r}")
        if config.get("insecure"):
            raise ManifestError(f"{where}.insecure", "a cluster's federation runs with TLS and "
                                "SuperNode authentication; insecure: true is for a local "
                                "rehearsal on 127.0.0.1 (`baton run`) only. Received: "
                                f"{config.get('insecure')!r}")
        tls, hosts = _tls(f"{where}.tls", config.get("tls"), spec_dir)
        raw = config.get("clients")
        if isinstance(raw, bool) or raw is None or not isinstance(raw, int | list | tuple):
            raise ManifestError(f"{where}.clients", "must be a number of clients (a rehearsal: "
                                "client-0 ... client-N-1) or a list of {name, examples}. "
                                f"Received: {raw!r}")
        if isinstance(raw, int):
            if raw < 1:
                raise ManifestError(f"{where}.clients",
                                    f"a federation needs at least one client. Received: {raw!r}")
            clients = tuple(FederatedClient(f"client-{i}", f"client-{i}") for i in range(raw))
        else:
            clients = tuple(_client(f"{where}.clients[{i}]", c, spec_dir)
                            for i, c in enumerate(raw))
            if not clients:
                raise ManifestError(f"{where}.clients",
                                    f"a federation needs at least one client. Received: {raw!r}")
        seen: dict[str, str] = {}
        for i, c in enumerate(clients):
            if c.dns in seen:
                same = "" if seen[c.dns] == c.name else f" (as {seen[c.dns]!r} does)"
                raise ManifestError(f"{where}.clients[{i}].name",
                                    f"client names must be distinct; {c.name!r} names Kubernetes "
                                    f"objects '{c.dns}'{same}. Received: {[x.name for x in clients]}")
            seen[c.dns] = c.name
        res = config.get("resources")
        node_resources = None
        if res is not None:
            if not isinstance(res, Mapping):
                raise ManifestError(f"{where}.resources",
                                    f"must be a mapping of cpu, memory, gpu. Received: {res!r}")
            unknown = sorted(set(res) - {"cpu", "memory", "gpu"})
            if unknown:
                raise ManifestError(f"{where}.resources",
                                    f"unknown keys {unknown}; use cpu, memory, gpu. Received: {dict(res)!r}")
            try:
                node_resources = Resources(cpu=str(res.get("cpu", Resources.cpu)),
                                           memory=str(res.get("memory", Resources.memory)),
                                           gpu=res.get("gpu", Resources.gpu))
            except ManifestError as exc:
                raise ManifestError(f"{where}.{exc.field}", str(exc).split(": ", 1)[1]) from None
        k8s = config.get("k8s") or {}
        if not isinstance(k8s, Mapping) or set(k8s) - {"data_size", "state_size"}:
            raise ManifestError(f"{where}.k8s", "takes data_size and state_size (claim sizes). "
                                f"Received: {k8s!r}")
        sizes = {k: check_quantity(f"{where}.k8s.{k}", v) for k, v in k8s.items()}
        return cls(stage=stage, clients=clients, rehearsal=isinstance(raw, int), inputs=inputs,
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


def _tls(field: str, raw: object, spec_dir: Path | None
         ) -> tuple[tuple[str, str, str] | None, tuple[str, ...]]:
    """The operator's CA, certificate and key (all three or none) and extra host names."""
    if raw is None:
        return None, ()
    keys = ("ca_certfile", "certfile", "keyfile")
    if not isinstance(raw, Mapping) or set(raw) - {*keys, "hosts"}:
        raise ManifestError(field, f"takes ca_certfile, certfile, keyfile and hosts. "
                            f"Received: {raw!r}")
    hosts = raw.get("hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise ManifestError(f"{field}.hosts", f"must be a list of host names. Received: {hosts!r}")
    given = [k for k in keys if raw.get(k)]
    if not given:
        return None, tuple(hosts)
    if len(given) != 3:
        raise ManifestError(field, "give ca_certfile, certfile and keyfile together (the "
                            f"operator's own), or none (generated). Received: {given}")
    pem = tuple(_read(f"{field}.{k}", raw[k], spec_dir) for k in keys)
    return (pem[0], pem[1], pem[2]), tuple(hosts)


def _client(field: str, entry: object, spec_dir: Path | None = None) -> FederatedClient:
    if not isinstance(entry, Mapping):
        raise ManifestError(field, f"a silo is a mapping {{name, examples}}. Received: {entry!r}")
    unknown = sorted(set(entry) - {"name", "examples", "claim", "public_key", "private_key"})
    if unknown:
        raise ManifestError(field, f"unknown keys {unknown}; a silo takes name, examples, "
                            "public_key, private_key and (on Kubernetes) claim. Received: "
                            f"{dict(entry)!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ManifestError(f"{field}.name", f"must be a non-empty string. Received: {name!r}")
    dns = dns_name(name)
    if not dns:
        raise ManifestError(f"{field}.name", "must contain a letter or digit: it names the "
                            f"client's Kubernetes objects. Received: {name!r}")
    examples = entry.get("examples")
    if not isinstance(examples, str) or not examples.strip():
        raise ManifestError(f"{field}.examples", "the path of this client's examples directory "
                            f"on its own machine or volume. Received: {examples!r}")
    claim = entry.get("claim")
    if claim is not None and (not isinstance(claim, str) or not DNS1123_LABEL.match(claim)
                              or len(claim) > 63):
        raise ManifestError(f"{field}.claim", "must name a PersistentVolumeClaim (a DNS-1123 "
                            f"label). Received: {claim!r}")
    public = private = None
    if entry.get("public_key") is not None or entry.get("private_key") is not None:
        if entry.get("public_key") is None or entry.get("private_key") is None:
            raise ManifestError(f"{field}.private_key", "this silo's SuperNode Deployment is in "
                                "these manifests: give its public_key and private_key "
                                "together, or neither (a key pair is generated). Received: "
                                f"public_key={entry.get('public_key')!r}, "
                                f"private_key={entry.get('private_key')!r}")
        public = _read(f"{field}.public_key", entry["public_key"], spec_dir)
        private = _read(f"{field}.private_key", entry["private_key"], spec_dir)
        for key, wrong in (("public_key", pki.check_public_key(f"{field}.public_key", public)),
                           ("private_key", pki.check_key_pair(f"{field}.private_key", private,
                                                              public))):
            if wrong is not None:
                raise ManifestError(f"{field}.{key}", wrong.split(": ", 1)[1])
    return FederatedClient(name, dns, examples, claim, public, private)
