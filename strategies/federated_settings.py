"""The federated stage's settings: one object from the spec to the ClientApp and the manifests.

`FederatedSettings` is the federated stage's `Config` (the pipeline builds it from the spec's
`config:` with `baton.configs.build_config`), what `baton k8s` reads its clients, claims and
resources from (k8s.federation_config), and what the plan carries to the ServerApp and the
ClientApps (`to_dict`/`from_dict`, the same typed checks on the way back). It lives in
strategies, beside the train stage's `TrainSettings`, because pipeline and k8s may both import
strategies while k8s may not import pipeline; like TrainSettings it holds no TensorFlow and no
Flower. A federation's aggregation is a Flower *strategy* (FedAvg, FedProx, FedAdam, wrapped for
privacy), which is what `algorithm`, `privacy` and `secure_aggregation` choose.

Every check of the settings' own values is here (`__post_init__`, raised as the spec's config
is built, the field named); what needs more (the run's flags, the data, the cluster) stays with
the stage (pipeline.stages.federated) and the manifests (k8s.federation_config).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from baton.configs import SettingsData
from baton.errors import ConfigError
from baton.graphs.transform_settings import TransformSettings

# `clients` left out: two clients, unless `partition.by` gives one per distinct value (counted
# from the data when the stage runs: `counted`)
DEFAULT_CLIENTS = 2


@dataclasses.dataclass(frozen=True)
class Silo:
    """A real silo: its examples on its own storage, and its SuperNode's key pair (OpenSSH EC
    keys; absent, one is generated, as in a rehearsal). `public_key` is what the SuperLink
    registers; `private_key` stays with the silo's SuperNode and is needed only where that
    SuperNode is started from this spec (`baton run` here, `baton k8s`). `claim`: the
    PersistentVolumeClaim of its examples on Kubernetes."""

    name: str
    # a path (relative to the spec's directory) or a bucket URL (s3://...: a Path folds its //)
    examples: str
    public_key: Path | None = None
    private_key: Path | None = None
    claim: str | None = None

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigError("name", f"must be a non-empty string. Received: {self.name!r}")
        if not self.examples.strip():
            raise ConfigError("examples", "the path of this client's examples directory on its "
                              f"own machine or volume. Received: {self.examples!r}")


@dataclasses.dataclass(frozen=True)
class TLSSettings:
    """The SuperLink's TLS material, the operator's own: the CA every SuperNode trusts, the
    SuperLink's certificate (its subjectAltName must name 127.0.0.1, where its SuperExec dials
    it, and every address the SuperNodes dial) and key. Left out, a CA and certificate are
    generated for the run; `hosts` adds names to a generated certificate."""

    ca_certfile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    hosts: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        given = [f for f in ("ca_certfile", "certfile", "keyfile") if getattr(self, f)]
        if given and len(given) != 3:
            raise ValueError("tls: give ca_certfile, certfile and keyfile together (the "
                             f"operator's own), or none (generated). Received: {given}")


@dataclasses.dataclass(frozen=True)
class Partition:
    """How a rehearsal splits its one examples input into silos: `by` a column (one client per
    distinct value), `dirichlet` (alpha: the non-IID benchmark split) or `iid`; one of them.
    The spec's `partition:` and what pipeline.dataplane.partition splits by, one class."""

    by: str | None = None
    dirichlet: float | None = None
    iid: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        chosen = [k for k, v in (("by", self.by), ("dirichlet", self.dirichlet),
                                 ("iid", self.iid or None)) if v is not None]
        if len(chosen) != 1:
            raise ValueError("partition takes exactly one of by: <column>, dirichlet: <alpha> "
                             f"or iid. Received: {chosen or 'none'}")
        if self.dirichlet is not None and not self.dirichlet > 0:
            raise ValueError(f"partition.dirichlet must be > 0. Received: {self.dirichlet}")

    def describe(self) -> str:
        if self.by is not None:
            return f"by {self.by}"
        return f"dirichlet({self.dirichlet})" if self.dirichlet is not None else "iid"


@dataclasses.dataclass(frozen=True)
class Privacy:
    clip_norm: float
    noise_multiplier: float = 1.0
    delta: float = 1e-5

    def __post_init__(self) -> None:
        if not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0. Received: {self.clip_norm}")
        if self.noise_multiplier < 0 or not 0 < self.delta < 1:
            raise ValueError(f"noise_multiplier must be >= 0 and delta in (0, 1). Received: "
                             f"{self.noise_multiplier}, {self.delta}")


@dataclasses.dataclass(frozen=True)
class SecureAggregation:
    """Flower's SecAgg+ settings (`secure_aggregation: true` takes these defaults).

    num_shares and reconstruction_threshold are counts (int) or fractions (float) as Flower
    reads them: 1.0 shares each client's secrets with every other sampled client (plain SecAgg,
    right for the 2-10 clients of a silo federation); a threshold of 0.67 of the shares lets a
    round survive a third of its clients dropping out after they sent keys, while fewer than
    that many colluding clients (with the server) learn nothing about one client's update.
    clipping_range bounds each coordinate of a client's update (trained - received weights,
    scaled by its examples / the largest client's) before it is quantized to
    quantization_range levels; the masked sums live modulo 2**32."""

    num_shares: int | float = 1.0
    reconstruction_threshold: int | float = 0.67
    clipping_range: float = 8.0
    quantization_range: int = 2**22

    def __post_init__(self) -> None:
        for name in ("num_shares", "reconstruction_threshold"):
            v = getattr(self, name)
            if isinstance(v, float) and not 0 < v <= 1:
                raise ValueError(f"secure_aggregation.{name} as a fraction must be in (0, 1]. "
                                 f"Received: {v}")
        if isinstance(self.num_shares, int) and self.num_shares < 3:
            raise ValueError("secure_aggregation.num_shares as a count must be at least 3 "
                             f"(Flower's SecAgg+), or a fraction like 1.0. Received: "
                             f"{self.num_shares}")
        if isinstance(self.reconstruction_threshold, int) and (
                self.reconstruction_threshold < 2 or isinstance(self.num_shares, int)
                and self.reconstruction_threshold >= self.num_shares):
            raise ValueError("secure_aggregation.reconstruction_threshold as a count must be at "
                             "least 2 and below num_shares. Received: "
                             f"{self.reconstruction_threshold} (num_shares {self.num_shares})")
        if not self.clipping_range > 0 or not 0 < self.quantization_range < 2**31:
            raise ValueError("secure_aggregation.clipping_range must be > 0 and "
                             "quantization_range in (0, 2**31). Received: "
                             f"{self.clipping_range}, {self.quantization_range}")


@dataclasses.dataclass(frozen=True)
class NodeResources:
    """Each SuperNode pod's requests and limits on Kubernetes (`baton k8s`; local training
    happens there). A field left out takes k8s.options.Resources' default; `resources` left out
    altogether: the run's `cluster.resources`. Checked as quantities by the manifests."""

    cpu: str | float | None = None
    memory: str | None = None
    gpu: int | None = None


@dataclasses.dataclass(frozen=True)
class ClaimSizes:
    """`k8s:` the sizes of the claims `baton k8s` writes: each real silo's data claim and the
    SuperLink's state claim (checked as quantities by the manifests)."""

    data_size: str = "10Gi"
    state_size: str = "1Gi"


@dataclasses.dataclass(frozen=True)
class FederatedSettings(SettingsData):
    """The federated stage's settings (docs/federated.md has the table)."""

    # a number (a rehearsal from the stage's examples input) or the real silos; left out: 2
    clients: int | list[Silo] | None = None
    partition: Partition | None = None
    rounds: int = 5
    local_epochs: int = 1
    algorithm: Literal["fedavg", "fedprox", "fedadam"] = "fedavg"
    proximal_mu: float = 0.1  # fedprox
    server_learning_rate: float = 0.1  # fedadam's eta
    fraction_fit: float = 1.0
    min_clients: int = 2
    round_timeout_s: float = 120.0
    compression: Literal["none", "fp16", "int8"] = "none"
    privacy: Privacy | None = None
    # Flower's SecAgg+: the server sees only the sum of the round's updates (docs/federated.md)
    secure_aggregation: bool | SecureAggregation = False
    # release the final model to the clients as the edge stage's TFLite variant, measured on
    # each client's eval rows beside the cloud model
    edge: Literal["off", "float", "dynamic"] = "off"
    transform: TransformSettings = dataclasses.field(default_factory=TransformSettings)
    # the model settings the train stage takes (a built-in's hyperparameters in model_params)
    model: str = "mlp"
    model_params: dict[str, Any] = dataclasses.field(default_factory=dict)
    batch_size: int = 32
    learning_rate: float = 0.01
    # "": the model's compile() optimizer if it has one, else adam (as the train stage's)
    optimizer: str | dict[str, Any] = ""
    loss: str = ""
    seed: int = 42
    # TLS on every connection and SuperNode authentication are the default; `insecure: true`
    # drops both for a local rehearsal on 127.0.0.1 only (a warning is logged)
    insecure: bool = False
    tls: TLSSettings = dataclasses.field(default_factory=TLSSettings)
    # on Kubernetes only (`baton k8s`): each SuperNode's resources and the claims' sizes
    resources: NodeResources | None = None
    k8s: ClaimSizes = dataclasses.field(default_factory=ClaimSizes)

    def __post_init__(self) -> None:
        if self.by_data:  # the count comes from the data: `counted` checks it then
            n = None
        else:
            n = self.count
        if self.insecure and (self.tls.ca_certfile or self.tls.hosts or any(
                s.public_key or s.private_key for s in self.silos)):
            raise ValueError("insecure: true runs without TLS and node authentication, so it "
                             "takes no tls settings and no client keys; leave insecure out "
                             "to use them. Received: insecure=True with keys or tls")
        if n is not None and n < 1:
            raise ConfigError("clients", "a federation needs at least one client. Received: "
                              f"{self.clients!r}")
        for name in ("rounds", "local_epochs", "batch_size", "min_clients"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {getattr(self, name)}")
        if n is not None and self.min_clients > n:
            raise ValueError(f"min_clients ({self.min_clients}) is above the number of clients "
                             f"({n}). Received: min_clients={self.min_clients}")
        if not 0 < self.fraction_fit <= 1:
            raise ValueError(f"fraction_fit must be in (0, 1]. Received: {self.fraction_fit}")
        if self.round_timeout_s <= 0 or self.learning_rate <= 0:
            raise ValueError("round_timeout_s and learning_rate must be > 0. Received: "
                             f"{self.round_timeout_s}, {self.learning_rate}")
        if isinstance(self.clients, list):
            names = [s.name for s in self.clients]
            for i, name in enumerate(names):
                if name in names[:i]:
                    raise ConfigError(f"clients[{i}].name", f"client names must be distinct; "
                                      f"{name!r} is given twice. Received: {names}")
        if self.partition is not None and isinstance(self.clients, list):
            raise ValueError("partition rehearses silos from one examples input; with clients "
                             "listed (real silos) leave it out")
        if self.secagg is not None and n is not None:
            self._check_secagg(self.secagg, n)

    @property
    def by_data(self) -> bool:
        """`partition.by` with `clients` left out: one client per distinct value of the column,
        a count only the data knows (`counted` settles it when the stage runs)."""
        return self.clients is None and self.partition is not None and bool(self.partition.by)

    @property
    def count(self) -> int:
        """How many clients: `clients` as a number, the silos listed, or the default."""
        if self.by_data:
            raise ValueError("the number of clients follows from partition.by's values in the "
                             "data; settle it with `counted` first")
        if self.clients is None:
            return DEFAULT_CLIENTS
        return self.clients if isinstance(self.clients, int) else len(self.clients)

    def counted(self, values: list[str]) -> FederatedSettings:
        """These settings with `clients` set to the number of `partition.by`'s distinct
        `values` (all the checks run again with it); `clients` given and a different number is
        a ConfigError naming the field, the values and the number received."""
        if self.partition is None or not self.partition.by:
            return self
        if self.clients is not None and self.clients != len(values):
            raise ConfigError("clients", f"partition.by {self.partition.by!r} makes one client "
                              f"per distinct value, {len(values)} ({values}); leave clients "
                              f"out or give {len(values)}. Received: clients={self.clients!r}")
        return dataclasses.replace(self, clients=len(values))

    @property
    def silos(self) -> list[Silo]:
        """The real silos listed (none in a rehearsal)."""
        return self.clients if isinstance(self.clients, list) else []

    @property
    def rehearsal(self) -> bool:
        """Silos partitioned from the stage's one examples input, not real silos listed."""
        return not isinstance(self.clients, list)

    @property
    def secagg(self) -> SecureAggregation | None:
        """The SecAgg+ settings, or None when secure aggregation is off."""
        if isinstance(self.secure_aggregation, SecureAggregation):
            return self.secure_aggregation
        return SecureAggregation() if self.secure_aggregation else None

    def _check_secagg(self, sa: SecureAggregation, n: int) -> None:
        """The combinations SecAgg+ cannot run, refused before any stage starts."""
        if self.compression != "none":
            raise ValueError("secure_aggregation masks and sums integer-quantized updates "
                             "itself; compressed (fp16/int8) updates cannot be summed under the "
                             f"masks: set compression: none. Received: compression="
                             f"{self.compression!r}")
        if self.algorithm == "fedadam":
            raise ValueError("secure_aggregation runs FedAvg's (or FedProx's) weighted mean; "
                             "fedadam's server optimizer is not wired to it. Received: "
                             f"algorithm={self.algorithm!r}")
        if n < 2 or self.min_clients < 2:
            raise ValueError("secure_aggregation needs at least 2 clients in every round (the "
                             "sum of one update is that update): Received: clients="
                             f"{n}, min_clients={self.min_clients}")
        for name in ("num_shares", "reconstruction_threshold"):
            v = getattr(sa, name)
            if isinstance(v, int) and v > n:
                raise ValueError(f"secure_aggregation.{name} ({v}) is above the number of "
                                 f"clients ({n}). Received: {name}={v}")
        if n * sa.quantization_range >= 2**32:
            raise ValueError("secure_aggregation: clients x quantization_range must stay below "
                             "2**32 (the masks' modulus) or the sum overflows. Received: "
                             f"quantization_range={sa.quantization_range} with {n} clients")

    def for_clients(self) -> FederatedSettings:
        """These settings as the ClientApps are sent them: without what is the operator's alone
        (the silos' paths and key files, the TLS files, the cluster's resources and sizes); the
        silos become their count. The same type, read back with `from_dict`."""
        return dataclasses.replace(self, clients=self.count, tls=TLSSettings(), resources=None,
                                   k8s=ClaimSizes())

