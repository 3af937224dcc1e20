"""How the federated stage runs a federation: here (`run_local`: a SuperLink and SuperNodes on
127.0.0.1, pipeline.federated.processes) or against a SuperLink elsewhere (`run_external`, for
`baton run --superlink`, the Kubernetes run Job): register the clients, write the plan with
their registry, submit, follow. `config` is the stage's Config
(pipeline.stages.federated.Config), read by attribute.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.context import StageContext
from baton.pipeline.dataplane.transform.column_plan import plan_columns
from baton.pipeline.federated import silos
from baton.strategies.federation_files import PLAN_FILE, federation_dir


def server_dir(work: Path, fresh: bool) -> Path:
    """`work/server`, the ServerApp's output directory, empty; with `fresh`, all of `work`
    too (a local federation's; an external one keeps its silos, which SuperNodes read)."""
    shutil.rmtree(work if fresh else work / "server", ignore_errors=True)
    (work / "server").mkdir(parents=True)
    return work / "server"


def run_local(ctx: StageContext, config: Any, clients: dict[str, Path], creds: Any,
           faults: list[tuple[str, int, int]]) -> Path:
    """The federation on this machine: start it, plan with its registry, submit, follow."""
    from baton.pipeline.federated.follow import follow
    from baton.pipeline.federated.plan import RoundLog
    from baton.pipeline.federated.processes import Federation

    fn = fn_spec(ctx, config, clients, None)
    work = ctx.work_dir / "federation"
    server = server_dir(work, fresh=True)
    fed = Federation(work, clients, creds, insecure=config.insecure)
    try:
        fed.start()
        ctx.log(f"{len(clients)} SuperNodes connected to the SuperLink on 127.0.0.1:{fed.port} ("
                + ("plaintext, any node admitted" if config.insecure else
                   f"TLS, node authentication: registered node ids {fed.registry}") + ")")
        plan_path = write_plan(config, clients, work, fn, ctx, faults, fed.registry,
                          wire_path=str(work / "wire.json"))
        run_id = fed.submit(plan_path)
        follow(ctx, fed, run_id, plan_path, RoundLog(server / "rounds.jsonl"),
               [f for f in faults if f[0] != "slow"])  # the slow ones are the plan's
    finally:
        fed.stop()
    return server


def run_external(ctx: StageContext, config: Any, control: Any, creds: Any,
              names: list[str]) -> Path:
    """A SuperLink elsewhere (`--superlink`): register the clients, then write the silos
    and the plan, submit and follow."""
    from baton.pipeline.federated.follow import follow
    from baton.pipeline.federated.plan import RoundLog

    ctx.log(f"external SuperLink at {control.address}: no SuperLink or SuperNode started "
            "here; bytes on the wire are not counted (no relays between the SuperNodes and "
            "the SuperLink), so the rounds have no bytes fields")
    control.wait_reachable(timeout=120)
    registry = control.register({n: creds.nodes[n].public_key for n in names})
    ctx.log(f"registered {len(registry)} SuperNode keys (exactly the spec's clients): "
            f"{registry}")
    clients = silos.for_stage(ctx, config, external=True)
    fn = fn_spec(ctx, config, clients, control.address)
    # outside the stage's temporary directory, which is renamed when the stage ends
    work = Path(federation_dir(ctx.run_dir, ctx.stage))
    server = server_dir(work, fresh=False)
    if ctx.bucket is None:
        plan_path = write_plan(config, clients, work, fn, ctx, [], registry, wire_path="")
        run_id = control.submit(plan_path)
        ctx.log(f"run {run_id} submitted to {control.address} (plan {plan_path})")
        follow(ctx, control, run_id, plan_path, RoundLog(server / "rounds.jsonl"), [])
        return server
    # a bucket: the SuperNodes and the ServerApp share no volume with this pod (on_bucket)
    from baton.pipeline.federated import on_bucket
    from baton.storage import location as L
    from baton.storage import objects
    from baton.storage.pull import pull

    url = L.join(ctx.bucket.url, work.name)
    out = L.join(url, "server")
    objects.delete_tree(out)  # an earlier attempt's outputs are not this run's
    write_plan(config, clients, work, fn, ctx, [], registry, wire_path="", out_dir=out)
    plan_url = on_bucket.share(work, url)
    run_id = control.submit(plan_url)
    ctx.log(f"run {run_id} submitted to {control.address} (plan {plan_url})")
    follow(ctx, control, run_id, plan_url,
           on_bucket.BucketRoundLog(L.join(out, "rounds.jsonl")), [])
    pull(out, server)  # the ServerApp's outputs, published as the stage's below
    return server


def fn_spec(ctx: StageContext, config: Any, clients: dict[str, Path],
             external: str | None) -> Any:
    from baton.pipeline.dataplane.records.schema_file import ExamplesSchema
    from baton.pipeline.federated.local import FnSpec

    spec_dir = str(ctx.spec_dir) if ctx.spec_dir else None
    if config.transform.preprocessing_fn:
        return FnSpec(preprocessing_fn=config.transform.preprocessing_fn, search_dir=spec_dir)
    first = next(iter(clients.values()))
    if not (first / "schema.json").is_file():  # only an external federation's real silos
        raise StageError(
            "federated.transform.preprocessing_fn: the column plan needs a client's "
            f"schema.json, which is not readable here ({first / 'schema.json'}) with "
            f"--superlink {external}; give transform.preprocessing_fn or make one silo's "
            "schema.json readable at its examples path. Received: no preprocessing_fn")
    return FnSpec(columns=plan_columns(config.transform, ExamplesSchema.load(first)))


def write_plan(config: Any, clients: dict[str, Path], work: Path, fn: Any, ctx: StageContext,
               faults: list[tuple[str, int, int]], registry: dict[str, int],
               wire_path: str, out_dir: str | None = None) -> Path:
    """`work/plan.json`: everything the ServerApp needs, the clients' registry included."""
    from baton.pipeline.federated.plan import Plan

    plan = Plan(
        clients=list(clients), out_dir=out_dir or str(work / "server"), wire_path=wire_path,
        fn=fn.to_dict(), settings=config,
        search_dir=str(ctx.spec_dir) if ctx.spec_dir else None,
        late_clients=[{"client": list(clients)[index], "round": number,
                       "seconds": config.round_timeout_s + 5.0}
                      for kind, index, number in faults if kind == "slow"],
        nodes=dict(registry))
    return plan.save(work / PLAN_FILE)


