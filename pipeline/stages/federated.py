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
from baton.pipeline.dataplane.column_plan import TransformSettings, plan_columns
from baton.strategies.faults import split_fault

INPUTS = {"examples": False}
OUTPUTS = ("model", "transform_graph")
CODE_DEPS = ("baton.pipeline.federated", "baton.graphs.column_kinds", "baton.graphs.tft_module",
             "baton.graphs.tft_engine", "baton.graphs.tft_api", "baton.graphs.tft_analyzers",
             "baton.graphs.models", "baton.graphs.model_fn", "baton.graphs.objectives",
             "baton.pipeline.dataplane.partition")
CACHEABLE = True
FEDERATION_SUFFIX = ".federation"  # <run dir>/<stage>.federation: an external federation's files


@dataclasses.dataclass(frozen=True)
class Silo:
    name: str
    examples: Path


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

    def __post_init__(self) -> None:
        n = self.clients if isinstance(self.clients, int) else len(self.clients)
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
    out: list[Path] = []
    if not isinstance(config.clients, int):
        out += [_silo_path(s, spec_dir) / "schema.json" for s in config.clients]
    refs = [r for r in (config.transform.preprocessing_fn, config.model, config.loss)
            if r and ":" in r]
    if refs:
        from baton.pipeline.user_code import user_code_files

        out += user_code_files(refs, spec_dir)
    return out


def _silo_path(silo: Silo, spec_dir: Path | None) -> Path:
    p = Path(silo.examples)
    return p if p.is_absolute() or spec_dir is None else (spec_dir / p)


def federation_dir(ctx: StageContext) -> Path:
    """An external federation's files, outside the stage's temporary directory (which is renamed
    when the stage ends): `<run dir>/<stage>.federation/` (k8s.federated.federation_dir)."""
    return ctx.run_dir / f"{ctx.stage}{FEDERATION_SUFFIX}"


def _clients(ctx: StageContext, config: Config, external: bool = False) -> dict[str, Path]:
    from baton.pipeline.dataplane import partition as P
    from baton.pipeline.dataplane.schema_file import ExamplesSchema

    if not isinstance(config.clients, int):
        out = {}
        for silo in config.clients:
            path = _silo_path(silo, ctx.spec_dir)
            if external:  # the silo is on its SuperNode's machine, not necessarily here
                out[silo.name] = path
                continue
            if not (path / "schema.json").is_file() or not any((path / "train").glob("*")):
                raise StageError(f"federated.clients.{silo.name}: no examples at {path} "
                                 "(expected schema.json and train/ shards of an ingest run)")
            out[silo.name] = path
        return out
    examples = ctx.inputs["examples"]
    part = config.partition or PartitionSettings(iid=True)
    partition = P.Partition(by=part.by, dirichlet=part.dirichlet, iid=part.iid, seed=part.seed)
    schema = ExamplesSchema.load(examples)
    names = P.client_names(partition, schema, examples,
                           None if part.by else config.clients)
    if part.by and len(names) != config.clients:
        raise StageError(f"federated.partition.by {part.by!r} makes {len(names)} clients "
                         f"({names}); clients is {config.clients}")
    root = (federation_dir(ctx) if external else ctx.work_dir) / "clients"
    # an external federation's SuperNodes were set up from `clients: N` alone (the Kubernetes
    # manifests), so its silos are client-0 ... client-N-1 whatever the partition calls them
    dirs = [f"client-{i}" for i in range(len(names))] if external else names
    if external:
        _empty_silos(root, dirs)
    else:
        shutil.rmtree(root, ignore_errors=True)
    counts = P.split(examples, [root / d for d in dirs], partition)
    ctx.log(f"partition {partition.describe()}: " + ", ".join(
        f"{d}{f' ({n})' if d != n else ''} {counts[n].get('train', 0)}/"
        f"{counts[n].get('eval', 0)}" for d, n in zip(dirs, names, strict=True))
        + " train/eval rows" + (f" in {root}" if external else ""))
    return {d: root / d for d in dirs}


def _empty_silos(root: Path, dirs: list[str]) -> None:
    """Empty each silo directory but keep the directory itself: a SuperNode pod may already
    have it mounted (a subPath is a bind mount of that very directory, and one removed and
    created again would leave the pod looking at the deleted one, waiting forever)."""
    for d in dirs:
        silo = root / d
        silo.mkdir(parents=True, exist_ok=True)
        for child in silo.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.dataplane.schema_file import ExamplesSchema
    from baton.pipeline.federated.local import FnSpec
    from baton.pipeline.federated.plan import Plan, RoundLog
    from baton.pipeline.federated.processes import Control, Federation

    external = ctx.options.superlink
    clients = _clients(ctx, config, external=bool(external))
    faults = parse_faults(ctx.options.inject_failure, len(clients))
    if faults and external:  # check_options refuses it first; this is the stage's own guard
        raise StageError("federated: inject-failure kills processes this stage started; with "
                         f"--superlink it starts none. Received: {ctx.options.inject_failure!r}")
    spec_dir = str(ctx.spec_dir) if ctx.spec_dir else None
    if config.transform.preprocessing_fn:
        fn = FnSpec(preprocessing_fn=config.transform.preprocessing_fn, search_dir=spec_dir)
    else:
        first = next(iter(clients.values()))
        if not (first / "schema.json").is_file():  # only an external federation's real silos
            raise StageError(
                "federated.transform.preprocessing_fn: the column plan needs a client's "
                f"schema.json, which is not readable here ({first / 'schema.json'}) with "
                f"--superlink {external}; give transform.preprocessing_fn or make one silo's "
                "schema.json readable at its examples path. Received: no preprocessing_fn")
        fn = FnSpec(columns=plan_columns(config.transform, ExamplesSchema.load(first)))
    work = federation_dir(ctx) if external else ctx.work_dir / "federation"
    if external:  # keep the silos (the SuperNodes read them); a fresh server directory
        shutil.rmtree(work / "server", ignore_errors=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    server = work / "server"
    server.mkdir(parents=True)
    plan = Plan(
        clients=list(clients), out_dir=str(server),
        wire_path="" if external else str(work / "wire.json"),
        fn=fn.to_dict(),
        settings={"model": config.model, "model_params": dict(config.model_params),
                  "batch_size": config.batch_size, "learning_rate": config.learning_rate,
                  "optimizer": config.optimizer, "loss": config.loss, "seed": config.seed,
                  "search_dir": spec_dir},
        rounds=config.rounds, local_epochs=config.local_epochs, algorithm=config.algorithm,
        proximal_mu=config.proximal_mu, server_learning_rate=config.server_learning_rate,
        fraction_fit=config.fraction_fit, min_clients=config.min_clients,
        round_timeout_s=config.round_timeout_s, compression=config.compression,
        privacy=dataclasses.asdict(config.privacy) if config.privacy else {}, edge=config.edge,
        secure_aggregation=dataclasses.asdict(config.secagg) if config.secagg else {},
        late_clients=[{"client": list(clients)[index], "round": number,
                       "seconds": config.round_timeout_s + 5.0}
                      for kind, index, number in faults if kind == "slow"])
    plan_path = plan.save(work / "plan.json")
    log = RoundLog(server / "rounds.jsonl")
    started = time.perf_counter()
    if external:
        control = Control(ctx.work_dir / "flwr", external)
        ctx.log(f"external SuperLink at {external}: no SuperLink or SuperNode started here; "
                f"plan {plan_path}; bytes on the wire are not counted (no relays between the "
                "SuperNodes and the SuperLink), so the rounds have no bytes fields")
        try:
            control.wait_reachable(timeout=120)
            run_id = control.submit(plan_path)
            ctx.log(f"run {run_id} submitted to {external}")
            _follow(ctx, control, run_id, plan_path, log, [])
        finally:
            control.close()
        _publish(ctx, server, log, config, time.perf_counter() - started)
        return
    fed = Federation(work, clients)
    try:
        fed.start()
        ctx.log(f"{len(clients)} SuperNodes connected to the SuperLink on 127.0.0.1:{fed.port}")
        run_id = fed.submit(plan_path)
        _follow(ctx, fed, run_id, plan_path, log,
                [f for f in faults if f[0] != "slow"])  # the slow ones are the plan's
    finally:
        fed.stop()
    _publish(ctx, server, log, config, time.perf_counter() - started)


def _follow(ctx: StageContext, fed: Any, run_id: int, plan_path: Path, log: Any,
            faults: list[tuple[str, int, int]]) -> None:
    """Wait for the run; inject each fault at its round; resume after a server restart."""
    seen = 0
    names = list(getattr(fed, "clients", ()))  # a Federation's (the faults need processes)
    pending = list(faults)
    while True:
        records = log.read()
        for rec in records[seen:]:
            _say(ctx, rec)
            due = [f for f in pending
                   if rec.get("event") == "train_start" and rec.get("round") == f[2]]
            for kind, index, number in due:
                pending.remove((kind, index, number))
                if kind == "client":
                    ctx.log(f"inject-failure: SIGKILL client {names[index]}'s SuperNode")
                    fed.nodes[names[index]].kill()
                else:
                    ctx.log("inject-failure: SIGKILL the SuperLink and its ServerApp")
                    fed.superlink.kill()
                    fed.start_superlink()
                    run_id = fed.submit(plan_path)
                    ctx.log(f"SuperLink restarted; run {run_id} resumes after the last round")
        seen = len(records)
        status = fed.status(run_id)
        if status.startswith("finished"):
            if status != "finished:completed":
                detail = fed.logs_of(run_id)
                lines = [ln for ln in detail.splitlines()
                         if "Error" in ln or "error" in ln or "raise" in ln][-6:]
                raise StageError(f"federated: run {run_id} {status}: "
                                 + ("; ".join(ln.strip() for ln in lines) or detail[-1500:]))
            for rec in log.read()[seen:]:
                _say(ctx, rec)
            return
        time.sleep(2.0)


def _say(ctx: StageContext, rec: dict[str, Any]) -> None:
    if rec.get("event") == "round":
        metric = (f"accuracy {rec['accuracy']:.4f}" if "accuracy" in rec
                  else f"mse {rec['mse']:.4f}" if "mse" in rec
                  else "no evaluate reply within round_timeout_s")
        eps = f", epsilon {rec['epsilon']:.3f}" if "epsilon" in rec else ""
        if "secure_aggregation" in rec:
            sa = rec["secure_aggregation"]
            eps += (f", SecAgg+: {sa['masked_vectors']} masked vectors, "
                    f"{sa['unmasked_arrays_seen']} unmasked arrays, "
                    f"{sa['overhead_seconds']:.1f} s in its key and unmask steps")
        ctx.log(f"round {rec['round']}: {len(rec.get('clients', []))} clients "
                f"{rec.get('clients')}, loss {rec.get('loss', float('nan')):.4f}, {metric}, "
                + (f"{rec['bytes_up']:,} B up / {rec['bytes_down']:,} B down"
                   if "bytes_up" in rec else "bytes not measured")
                + f"{eps}, {rec['seconds']:.1f} s")
    elif rec.get("event") == "edge":
        for name, r in rec["clients"].items():
            key = "accuracy" if "edge_accuracy" in r else "mse"
            ctx.log(f"edge ({rec['variant']} TFLite, {rec['size_bytes']:,} B) on {name}: "
                    f"{key} {r[f'edge_{key}']:.4f} (cloud {r[f'cloud_{key}']:.4f})")
    elif rec.get("event") == "transform":
        ctx.log(f"federated transform: {rec['analyzers']} analyzers in {rec['phases']} phases "
                f"from {len(rec['rows'])} clients' summaries ({sum(rec['rows'].values())} rows "
                "never left them)")


PER_ROUND = ("round", "clients", "loss", "accuracy", "mse", "bytes_up", "bytes_down", "epsilon")


def _publish(ctx: StageContext, server: Path, log: Any, config: Config, seconds: float) -> None:
    import json

    model, graph = server / "model", server / "transform_graph"
    rounds = [r for r in log.read() if r.get("event") == "round"]
    if not model.is_dir() or not rounds:
        raise StageError("federated: no round completed; no global model is written")
    shutil.copytree(model, ctx.output("model"), dirs_exist_ok=True)
    (ctx.output("model") / "rounds.json").write_text(json.dumps(rounds, indent=1) + "\n")
    edge = [r for r in log.read() if r.get("event") == "edge"]
    if edge:
        (ctx.output("model") / "edge.json").write_text(json.dumps(edge[-1], indent=1) + "\n")
        shutil.copyfile(server / "edge" / "model.tflite", ctx.output("model") / "model.tflite")
    shutil.copytree(graph, ctx.output("transform_graph"), dirs_exist_ok=True)
    last = rounds[-1]
    numbers: dict[str, Any] = {
        "rounds": len(rounds), "clients": len(config.clients) if not isinstance(
            config.clients, int) else config.clients, "seconds": round(seconds, 3),
        # the round records in the lineage record itself (rounds.json in the model has the rest:
        # downlink counts, SecAgg+ steps, timings); the run's summary table shows only scalars
        "per_round": [{k: r[k] for k in PER_ROUND if k in r} for r in rounds]}
    if all("bytes_up" in r for r in rounds):  # absent with --superlink: no relays counted them
        traffic = [r["bytes_up"] + r["bytes_down"] for r in rounds]
        numbers["bytes_per_round"] = round(sum(traffic) / len(traffic))
        numbers["bytes_up_per_round"] = round(sum(r["bytes_up"] for r in rounds) / len(rounds))
    for key in ("accuracy", "mse", "loss", "epsilon"):
        if key in last:
            numbers[key] = round(float(last[key]), 6)
    numbers["server_restarts"] = sum(1 for r in log.read() if r.get("event") == "resume")
    secure = [r["secure_aggregation"] for r in rounds if "secure_aggregation" in r]
    if secure:  # what SecAgg+'s own steps (keys, shares, unmasking) cost a round
        numbers["secagg_seconds_per_round"] = round(
            sum(s["overhead_seconds"] for s in secure) / len(secure), 3)
    ctx.record(**numbers)
