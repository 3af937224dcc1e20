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

import shutil
import time
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.context import StageContext
from baton.strategies.faults import split_fault
from baton.strategies.federated_settings import FederatedSettings
from baton.strategies.federated_settings import Privacy as Privacy
from baton.strategies.federated_settings import SecureAggregation as SecureAggregation
from baton.strategies.federated_settings import Silo as Silo
from baton.strategies.federation_files import FEDERATION_SUFFIX as FEDERATION_SUFFIX

INPUTS = {"examples": False}
OUTPUTS = ("model", "transform_graph")
CODE_DEPS = ("baton.pipeline.federated", "baton.graphs.column_kinds", "baton.graphs.tft",
             "baton.graphs.models", "baton.graphs.model_fn", "baton.graphs.objectives",
             "baton.graphs.model_outputs", "baton.graphs.nonfinite",
             "baton.pipeline.dataplane.partition")
CACHEABLE = True


# the stage's Config is the federated settings themselves (strategies.federated_settings: k8s
# reads them too, and the plan carries them to the ServerApp and ClientApps), named here as well
Config = FederatedSettings


def parse_client_fault(text: str | None, clients: int | None) -> tuple[str, int, int] | None:
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
    if clients is not None and w.index >= clients:  # None: counted from the data, later
        raise ValueError(f"inject-failure names client {w.index}; the stage has {clients} "
                         f"clients (0..{clients - 1}). Received: {text!r}")
    return ("slow" if w.how else "client", w.index, w.at)


def parse_faults(text: str | None, clients: int | None) -> list[tuple[str, int, int]]:
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
    n = None if config.by_data else config.count  # by_data: checked again when counted
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
    if config.rehearsal and not has_input:
        problems.append(f"clients: {config.clients} rehearses silos from one dataset and needs "
                        "inputs: {examples: <ingest>.examples}; or list the clients with their "
                        "own examples (clients: [{name, examples}])")
    if not config.rehearsal and has_input:
        problems.append("clients are listed with their own examples (real silos): the stage "
                        "takes no examples input")
    if importlib.util.find_spec("flwr") is None:
        problems.append("federated training needs Flower: pip install 'baton[federated]'")
    return problems


def external_inputs(config: Config, spec_dir: Path | None) -> list[Path]:
    """Silo data and the user's code are part of the stage's identity (cache key)."""
    from baton.pipeline.federated.silos import silo_path

    out: list[Path] = []
    out += [silo_path(s.examples, spec_dir) / "schema.json" for s in config.silos]
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
    if config.rehearsal and config.partition and config.partition.by:
        from baton.pipeline.federated.silos import counted

        config = counted(ctx, config)  # partition.by: one client per distinct value
    faults = parse_faults(ctx.options.inject_failure, config.count)
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
            names = [f"client-{i}" for i in range(config.count)] \
                if config.rehearsal else [s.name for s in config.silos]
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

    publish(ctx, server, RoundLog(server / "rounds.jsonl"), config.count,
            time.perf_counter() - started)


def _credentials(ctx: StageContext, config: Config, clients: list[str], directory: Path,
                 external: str | None) -> Any:
    """The spec's key material, paths resolved against its directory (credentials.for_stage)."""
    from baton.pipeline.federated import credentials as C

    def at(p: Path | None) -> Path | None:
        return None if p is None else p if Path(p).is_absolute() or ctx.spec_dir is None \
            else ctx.spec_dir / p

    def at_(p: Path) -> Path:
        return p if Path(p).is_absolute() or ctx.spec_dir is None else ctx.spec_dir / p

    silos = config.silos
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


