"""A Flower federation on this machine: one SuperLink, one SuperNode per client, real processes.

Secure by default, as Flower documents for production (docs/federated.md):

- the SuperLink (pipeline.federated.superlink) serves TLS with the federation's certificate,
  `--enable-supernode-auth` (only registered node keys connect), its Control API behind the
  token and its ServerApps behind the SuperExec secret;
- the clients' public keys are registered before any SuperNode starts (control.Control.
  register: exactly these clients), and the registry goes into the plan;
- each SuperNode (pipeline.federated.supernode) verifies the SuperLink against the CA
  (`--root-certificates`), proves its key (`--auth-supernode-private-key`), binds its ClientAppIo
  API to 127.0.0.1 and has its warm ClientApp host take its tasks.

`insecure=True` (the spec's explicit `insecure: true`, a local rehearsal only) drops TLS and node
authentication; the Control API token, the SuperExec secrets and the ServerApp's registry (read
from each node's log: "SuperNode ID: N") stay.

Every SuperNode reaches the SuperLink through its own counting relay (pipeline.federated.wire),
so bytes per client are measured on the wire (TLS records included). Processes start in their
own sessions on free 127.0.0.1 ports and are stopped with their descendants (launch.Proc).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from baton.errors import StageError
from baton.pipeline.federated import wire
from baton.pipeline.federated.control import Control
from baton.pipeline.federated.credentials import Credentials
from baton.pipeline.federated.launch import Proc, flower_env, free_port, wait_for
from baton.pipeline.federated.superlink import TOKEN_ENV

_NODE_ID = re.compile(r"SuperNode ID: (\d+)")


class Federation(Control):
    """The SuperLink, the SuperNodes (one per client data directory) and the relays."""

    def __init__(self, work: Path, clients: dict[str, Path], credentials: Credentials,
                 insecure: bool = False, start_timeout: float = 120) -> None:
        port = free_port()
        super().__init__(work, f"127.0.0.1:{port}", credentials, insecure=insecure)
        self.clients, self.timeout, self.port = clients, start_timeout, port
        self.logs = work / "logs"
        self.relays = wire.Relays(("127.0.0.1", self.port), work / "wire.json")
        self.superlink: Proc | None = None
        self.nodes: dict[str, Proc] = {}
        self.registry: dict[str, int] = {}

    def start(self) -> None:
        self.start_superlink()
        if not self.insecure:
            self.registry = self.register({n: self.credentials.nodes[n].public_key
                                           for n in self.clients})
        for name in self.clients:
            self.start_node(name)
        for name, proc in self.nodes.items():
            wait_for(lambda p=proc: _NODE_ID.search(p.tail(20000)) is not None,
                     self.timeout, f"SuperNode {name} did not connect", proc)
        if self.insecure:  # self-registered nodes: their ids, as each one logged it
            self.registry = {name: int(_NODE_ID.findall(p.tail(20000))[-1])
                             for name, p in self.nodes.items()}

    def superlink_argv(self) -> list[str]:
        c = self.credentials
        tls = ["--insecure"] if self.insecure else [
            "--ssl-ca-certfile", str(c.ca_cert), "--ssl-certfile", str(c.server_cert),
            "--ssl-keyfile", str(c.server_key), "--enable-supernode-auth"]
        return [sys.executable, "-m", "baton.pipeline.federated.superlink", *tls,
                "--isolation", "process", "--superexec-auth-secret-file",
                str(c.superexec_secret), "--host", "127.0.0.1", "--port", str(self.port),
                "--database", str(self.work / "superlink.db"),
                "--disable-runtime-dependency-installation"]

    def start_superlink(self) -> None:
        self.superlink = Proc("superlink", self.superlink_argv(), flower_env(
            self.work / "home" / "superlink", {TOKEN_ENV: str(self.credentials.control_token)}),
            self.logs)
        link = self.superlink
        wait_for(lambda: "Application startup complete" in link.tail(20000), self.timeout,
                 "the SuperLink did not start", link)
        # uvicorn says "Application startup complete" before it binds its socket: on a loaded
        # machine the first Control API call (registering the nodes) could come before the bind
        self.wait_reachable(self.timeout)

    def node_argv(self, name: str, superlink: str) -> list[str]:
        node = self.credentials.nodes[name]
        if self.insecure:
            tls = ["--insecure"]
        elif node.private_key is None:
            raise StageError(f"federated.clients.{name}.private_key: the SuperNode of this "
                             "client runs here and needs its private key")
        else:
            tls = ["--root-certificates", str(self.credentials.ca_cert),
                   "--auth-supernode-private-key", str(node.private_key)]
        return [sys.executable, "-m", "baton.pipeline.federated.supernode", *tls,
                "--superlink", superlink, "--host", "127.0.0.1", "--port", str(free_port()),
                "--isolation", "process", "--superexec-auth-secret-file",
                str(node.superexec_secret),
                "--node-config", f"data-dir='{self.clients[name]}' client='{name}'"]

    def start_node(self, name: str) -> Proc:
        port = self.relays.relays[name].port if name in self.relays.relays else \
            self.relays.add(name)
        self.nodes[name] = Proc(f"supernode-{name}", self.node_argv(name, f"127.0.0.1:{port}"),
                                flower_env(self.work / "home" / f"node-{name}"), self.logs)
        return self.nodes[name]

    def stop(self) -> None:
        self.close()
        for proc in self.nodes.values():
            proc.stop()
        if self.superlink is not None:
            self.superlink.stop()
        self.relays.close()
