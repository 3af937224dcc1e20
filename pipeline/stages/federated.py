"""federated: train where the data lives, on Flower's deployment engine (docs/federated.md).

Outputs `model` and `transform_graph` in the train and transform stages' formats, so evaluate,
export, check, edge and push take them unchanged. One client is one Flower SuperNode process
that reads only its own examples directory; the server (SuperLink + Baton's ServerApp) never
opens an example: the transform's analyzers are merged from the clients' accumulators, the
model from their updates.

Clients:
- real silos: `clients: [{name: hospital-a, examples: /data/a/examples}, ...]`, each an
  examples artifact on that client's storage (no stage input);
- a rehearsal on one machine: `inputs: {examples: ingest.examples}` with `clients: N` and
  `partition: {by: <column>} | {dirichlet: <alpha>} | {iid: true}`; each part is written to
  its own client directory before training starts (pipeline.dataplane.partition).

An external federation: with `baton run --superlink HOST:PORT` (ctx.options.superlink) the
stage starts no SuperLink or SuperNode; it writes a rehearsal's silos to the stable
`<run dir>/<stage>.federation/clients/client-<i>` (schema.json last: the SuperNodes wait for it),
the plan there with the ServerApp's output directory beside it (`server/`, on the volume the
SuperLink shares), submits to that SuperLink, follows and publishes as usual. Bytes on the wire
are not counted there (no relays): the round records have no bytes fields. This is what the
Kubernetes run Job runs (k8s.federated).

Privacy: `privacy` (client-level DP, Flower's wrappers) and `secure_aggregation` (Flower's
SecAgg+: the server learns the sum of a round's updates, no single one; pipeline.federated.
secagg); settings that cannot run with SecAgg+ are config errors (exit 2) here.

Faults: a client that dies or answers after `round_timeout_s` is left out of the round, which
completes when at least `min_clients` answered; a round's messages expire after
`round_timeout_s` (the SuperLink refuses a reply to an expired one), so a late client never
trains on a round that went on without it and takes the next one. `--inject-failure
client:1@round:2` SIGKILLs client 1's SuperNode when round 2 starts; `client:1@round:2:slow`
makes it answer round 2's training `round_timeout_s` + 5 s late (alive and heartbeating, as a
slow device); `server@round:2` kills the SuperLink and its ServerApp there, restarts them and
resumes after the last completed round. A comma-separated list rehearses several in one run
(one per client, and the server).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Literal

from baton.errors import StageError
from baton.pipeline.context import StageContext
from baton.pipeline.dataplane.column_plan import TransformSettings
from baton.strategies.faults import split_fault
from baton.strategies.federation_files import FEDERATION_SUFFIX as FEDERATION_SUFFIX

INPUTS = {"examples": False}
OUTPUTS = ("model", "transform_graph")
CODE_DEPS = ("baton.pipeline.federated", "baton.graphs.column_kinds", "baton.graphs.tft_module",
             "baton.graphs.tft_engine", "baton.graphs.tft_api", "baton.graphs.tft_analyzers",
             "baton.graphs.models", "baton.graphs.model_fn", "baton.graphs.objectives",
             "baton.graphs.model_outputs", "baton.graphs.nonfinite",
             "baton.pipeline.dataplane.partition")
CACHEABLE = True


@dataclasses.dataclass(frozen=True)
class Silo:
    """A real silo: its examples on its own storage, and its SuperNode's key pair (OpenSSH EC
    keys; absent, one is generated, as in a rehearsal). `public_key` is what the SuperLink
    registers; `private_key` stays with the silo's SuperNode and is needed only where that
    SuperNode is started from this spec (`baton run` here, `baton k8s`). `claim`: the
    PersistentVolumeClaim of its examples on Kubernetes."""

    name: str
    examples: Path
    public_key: Path | None = None
    private_key: Path | None = None
    claim: str | None = None


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
class PartitionSettings:
    by: str | None = None
    dirichlet: float | None = None
    iid: bool = False
    seed: int = 0


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
class Config:
    clients: int | list[Silo] = 2
    partition: PartitionSettings | None = None
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
    optimizer: str | dict[str, Any] = "adam"
    loss: str = ""
    seed: int = 42
    # TLS on every connection and SuperNode authentication are the default; `insecure: true`
    # drops both for a local rehearsal on 127.0.0.1 only (a warning is logged)
    insecure: bool = False
    tls: TLSSettings = dataclasses.field(default_factory=TLSSettings)

    def __post_init__(self) -> None:
        n = self.clients if isinstance(self.clients, int) else len(self.clients)
        if self.insecure and (self.tls.ca_certfile or self.tls.hosts or (
                not isinstance(self.clients, int)
                and any(s.public_key or s.private_key for s in self.clients))):
            raise ValueError("insecure: true runs without TLS and node authentication, so it "
                             "takes no tls settings and no client keys; leave insecure out "
                             "to use them. Received: insecure=True with keys or tls")
        if n < 1:
            raise ValueError(f"clients must be >= 1. Received: {self.clients}")
        for name in ("rounds", "local_epochs", "batch_size", "min_clients"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1. Received: {getattr(self, name)}")
        if self.min_clients > n:
            raise ValueError(f"min_clients ({self.min_clients}) is above the number of clients "
                             f"({n}). Received: min_clients={self.min_clients}")
        if not 0 < self.fraction_fit <= 1:
            raise ValueError(f"fraction_fit must be in (0, 1]. Received: {self.fraction_fit}")
        if self.round_timeout_s <= 0 or self.learning_rate <= 0:
            raise ValueError("round_timeout_s and learning_rate must be > 0. Received: "
                             f"{self.round_timeout_s}, {self.learning_rate}")
        if not isinstance(self.clients, int):
            names = [s.name for s in self.clients]
            dup = sorted({x for x in names if names.count(x) > 1})
            if dup:
                raise ValueError(f"clients: names must be unique. Received: {dup} twice")
        if self.partition is not None and not isinstance(self.clients, int):
            raise ValueError("partition rehearses silos from one examples input; with clients "
                             "listed (real silos) leave it out")
        if self.secagg is not None:
            self._check_secagg(self.secagg, n)

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


def parse_client_fault(text: str | None, clients: int) -> tuple[str, int, int] | None:
    """`client:1@round:2` -> ("client", 1, 2) (its SuperNode SIGKILLed); `client:1@round:2:slow`
    -> ("slow", 1, 2) (it answers round 2's training `round_timeout_s` + 5 s late: the plan's
    `late_clients`, acted on by the ClientApp); `server@round:2` -> ("server", 0, 2)."""
    if not text:
        return None
    w = split_fault(text)  # the training faults' grammar (strategies.faults), other words
    if (w is None or w.when != "round" or w.at < 1 or w.how not in (None, "slow")
            or not ((w.who == "client" and w.index is not None)
                    or (w.who == "server" and w.index is None and w.how is None))):
        raise ValueError("inject-failure for a federated stage must look like "
                         "'client:1@round:2', 'client:1@round:2:slow' or 'server@round:2'. "
                         f"Received: {text!r}")
    if w.who == "server":
        return ("server", 0, w.at)
    assert w.index is not None
    if w.index >= clients:
        raise ValueError(f"inject-failure names client {w.index}; the stage has {clients} "
                         f"clients (0..{clients - 1}). Received: {text!r}")
    return ("slow" if w.how else "client", w.index, w.at)


def parse_faults(text: str | None, clients: int) -> list[tuple[str, int, int]]:
    """A comma-separated list of `parse_client_fault`'s forms, e.g. `client:1@round:1:slow,
    client:2@round:2`: several faults rehearsed in one run, one per client (or the server)."""
    faults = [f for part in (text or "").split(",") if part.strip()
              if (f := parse_client_fault(part, clients)) is not None]
    who = [(kind == "server", index) for kind, index, _ in faults]
    if len(set(who)) < len(who):
        raise ValueError("inject-failure names the same client (or the server) twice; one fault "
                         f"each. Received: {text!r}")
    return faults


def check_options(config: Config, options: Any, stage: Any, spec: Any) -> list[str]:
    n = config.clients if isinstance(config.clients, int) else len(config.clients)
    try:
        faults = parse_faults(options.inject_failure, n)
    except ValueError as exc:
        return [str(exc)]
    problems = []
    for kind, _, number in faults:
        if number > config.rounds:
            problems.append(f"inject-failure names round {number}; the stage runs rounds "
                            f"1..{config.rounds} (config.rounds). Received: "
                            f"{options.inject_failure!r}")
        if kind == "slow" and config.secagg:
            problems.append(
                "inject-failure client:N@round:R:slow delays a client's train reply, and under "
                "secure_aggregation the round is SecAgg+'s own messages; rehearse a lost client "
                f"(client:N@round:R) there. Received: {options.inject_failure!r}")
    if getattr(options, "superlink", None) and not getattr(options, "superlink_credentials",
                                                           None):
        problems.append(
            f"--superlink {options.superlink} needs --superlink-credentials DIR: the "
            "SuperLink's CA (ca.crt), its Control API token (control.token) and the clients' "
            "public keys (nodes/<client>.pub), which the stage registers before it submits")
    if config.insecure and getattr(options, "superlink", None):
        problems.append(
            "insecure: true is for a local rehearsal on 127.0.0.1; a SuperLink elsewhere "
            f"(--superlink {options.superlink}) is reached over TLS with node authentication: "
            "remove insecure from the stage's config")
    if faults and getattr(options, "superlink", None):
        problems.append(
            "inject-failure kills a SuperNode or the SuperLink this stage started, and with "
            "--superlink it starts none; rehearse faults on a local federation. Received: "
            f"{options.inject_failure!r} with --superlink {options.superlink}")
    return problems


def check_spec(config: Config, stage: Any, spec: Any) -> list[str]:
    """Rehearsal needs the examples input; silos none; the flwr extra must be installed."""
    import importlib.util

    problems = []
    has_input = "examples" in (getattr(stage, "inputs", None) or {})
    if isinstance(config.clients, int) and not has_input:
        problems.append(f"clients: {config.clients} rehearses silos from one dataset and needs "
                        "inputs: {examples: <ingest>.examples}; or list the clients with their "
                        "own examples (clients: [{name, examples}])")
    if not isinstance(config.clients, int) and has_input:
        problems.append("clients are listed with their own examples (real silos): the stage "
                        "takes no examples input")
    if importlib.util.find_spec("flwr") is None:
        problems.append("federated training needs Flower: pip install 'baton[federated]'")
    return problems


def external_inputs(config: Config, spec_dir: Path | None) -> list[Path]:
    """Silo data and the user's code are part of the stage's identity (cache key)."""
    from baton.pipeline.federated.silos import silo_path

    out: list[Path] = []
    if not isinstance(config.clients, int):
        out += [silo_path(s.examples, spec_dir) / "schema.json" for s in config.clients]
    refs = [r for r in (config.transform.preprocessing_fn, config.model, config.loss)
            if r and ":" in r]
    if refs:
        from baton.pipeline.user_code import user_code_files

        out += user_code_files(refs, spec_dir)
    return out


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.federated import silos, stage_run
    from baton.pipeline.federated.control import Control

    external = ctx.options.superlink
    faults = parse_faults(ctx.options.inject_failure, _count(config))
    if faults and external:  # check_options refuses it first; this is the stage's own guard
        raise StageError("federated: inject-failure kills processes this stage started; with "
                         f"--superlink it starts none. Received: {ctx.options.inject_failure!r}")
    if config.insecure:
        ctx.warn("insecure: true: the SuperLink and SuperNodes talk plaintext HTTP and "
                 "the SuperLink admits any SuperNode (no TLS, no node authentication); a local "
                 "rehearsal on 127.0.0.1 only, never for silos on other machines")
    secrets = ctx.work_dir / "credentials"  # private keys: removed when the stage ends
    started = time.perf_counter()
    try:
        if not external:
            clients = silos.for_stage(ctx, config)
            creds = _credentials(ctx, config, list(clients), secrets, None)
            server = stage_run.run_local(ctx, config, clients, creds, faults)
        else:
            # an external federation's names: client-<i> in a rehearsal (its SuperNodes were
            # set up from `clients: N`), else the silos'. Registered before the silos are
            # written: a SuperNode starts when its silo appears and must find its key admitted
            names = [f"client-{i}" for i in range(config.clients)] \
                if isinstance(config.clients, int) else [s.name for s in config.clients]
            creds = _credentials(ctx, config, names, secrets, external)
            control = Control(ctx.work_dir / "flwr", external, creds)
            try:
                server = stage_run.run_external(ctx, config, control, creds, names)
            finally:
                control.close()
    finally:
        shutil.rmtree(secrets, ignore_errors=True)
        # Flower's homes hold the Control API token (the CLI's credentials.yaml): like the
        # other secrets they must not become part of the stage's output (a local one's
        # under federation/, an external one's the Control's own)
        shutil.rmtree(ctx.work_dir / "federation" / "home", ignore_errors=True)
        shutil.rmtree(ctx.work_dir / "flwr", ignore_errors=True)
    from baton.pipeline.federated.follow import publish
    from baton.pipeline.federated.plan import RoundLog

    publish(ctx, server, RoundLog(server / "rounds.jsonl"), _count(config),
            time.perf_counter() - started)


def _count(config: Config) -> int:
    return config.clients if isinstance(config.clients, int) else len(config.clients)


def _credentials(ctx: StageContext, config: Config, clients: list[str], directory: Path,
                 external: str | None) -> Any:
    """The spec's key material, paths resolved against its directory (credentials.for_stage)."""
    from baton.pipeline.federated import credentials as C

    def at(p: Path | None) -> Path | None:
        return None if p is None else p if Path(p).is_absolute() or ctx.spec_dir is None \
            else ctx.spec_dir / p

    def at_(p: Path) -> Path:
        return p if Path(p).is_absolute() or ctx.spec_dir is None else ctx.spec_dir / p

    silos = [] if isinstance(config.clients, int) else config.clients
    own = C.Operator(ca_certfile=at(config.tls.ca_certfile), certfile=at(config.tls.certfile),
                     keyfile=at(config.tls.keyfile),
                     public_keys={s.name: at_(s.public_key) for s in silos if s.public_key},
                     private_keys={s.name: at_(s.private_key) for s in silos if s.private_key})
    remote = getattr(ctx.options, "superlink_credentials", None) if external else None
    if external and not remote:
        raise StageError("federated: --superlink needs --superlink-credentials DIR (the "
                         "SuperLink's CA as ca.crt, its Control API token as control.token, "
                         "each client's public key as nodes/<client>.pub)")
    return C.for_stage(directory, clients, own, list(config.tls.hosts),
                       Path(remote) if remote else None)


