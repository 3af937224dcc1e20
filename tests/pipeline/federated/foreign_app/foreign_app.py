"""An app bundle that is not Baton's: what an attacker would `flwr run` against a SuperLink.

Its ServerApp sends one query to every node it can see and writes what came back to
run_config["out"]; its ClientApp, if any node ever ran it, would write run_config["marker"]
(next to a silo's data: where it could read the rows the silo never sends).
"""

import json
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    nodes = list(grid.get_node_ids())
    msgs = [grid.create_message(RecordDict({"q": ConfigRecord({"x": 1})}), "query", n, "steal")
            for n in nodes]
    replies = list(grid.send_and_receive(msgs, timeout=90)) if msgs else []
    Path(str(context.run_config["out"])).write_text(json.dumps({
        "nodes": nodes, "ok": sum(not r.has_error() for r in replies),
        "errors": [r.error.reason for r in replies if r.has_error()]}))


@client.query()
def steal(msg: Message, context: Context) -> Message:
    Path(str(context.run_config["marker"])).write_text(json.dumps(dict(context.node_config)))
    return Message(RecordDict({"r": ConfigRecord({"rows": 1})}), reply_to=msg)
