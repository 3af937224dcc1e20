"""The Control API side of a federation: register its clients, submit its run, follow it.

`Control` talks to a SuperLink at HOST:PORT (this machine's, `processes.Federation`, or one
`baton run --superlink` names: the Kubernetes Service) over TLS, verifying the federation's CA,
with the Control API token on every call (pipeline.federated.superlink locks the API with it).
With `insecure` (an explicit `insecure: true` rehearsal) it speaks plaintext, token included.

- `register(keys)`: exactly the spec's clients become the SuperLink's registered nodes: each
  client's public key is registered (Flower's RegisterNode, what `flwr supernode register`
  calls) or found registered (a SuperLink that kept its database), and any other node is
  unregistered; the answer, client name -> node id, goes into the plan, and the ServerApp talks
  to those node ids only (pipeline.federated.admission).
- `submit(plan)`: `flwr run` of Baton's app bundle (the CLI carries the token from the
  credential store credentials.cli_login wrote), the run id back.
- `status(run)`, `logs_of(run)`: what the stage follows, in-process for status (a `flwr ls`
  process costs a Python start and ~4 s of CPU each 2 s poll).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.errors import StageError
from baton.pipeline.federated.credentials import Credentials, cli_login
from baton.pipeline.federated.launch import bin_path, flower_env

APP_PYPROJECT = """\
[project]
name = "baton-federated"
version = "1.0.0"
description = "Baton's federated training (ServerApp and ClientApp live in the baton package)"
dependencies = []

[tool.flwr.app]
publisher = "baton"

[tool.flwr.app.components]
serverapp = "baton.pipeline.federated.flower_server:app"
clientapp = "baton.pipeline.federated.flower_client:app"

[tool.flwr.app.config]
baton-plan = ""
"""
APP_ID = "baton/baton-federated"  # publisher/name: what a SuperNode's ClientApp host accepts
CONNECTION = "baton"


class BearerToken:
    """A Control API client interceptor: `Authorization: Bearer <token>` on every call."""

    def __init__(self, token: str) -> None:
        self._header = {"Authorization": f"Bearer {token}"}

    def intercept(self, context: Any, call_next: Any) -> Any:
        from flwr.supercore.interceptors.http.utils import add_headers

        add_headers(context.request, self._header)
        return call_next(context)


class Control:
    """The Flower CLI's view of a SuperLink at `address` (HOST:PORT of its Control API).
    Nothing is started: the SuperLink may be this machine's (Federation) or another one's."""

    def __init__(self, work: Path, address: str, credentials: Credentials,
                 insecure: bool = False) -> None:
        self.work, self.address, self.credentials = work, address, credentials
        self.insecure = insecure
        self._client: Any = None  # Flower's Control API client, opened on first use

    def wait_reachable(self, timeout: float) -> None:
        """Until the SuperLink accepts a TCP connection at `address` (StageError after `timeout`)."""
        host, _, port = self.address.rpartition(":")
        deadline = time.time() + timeout
        while True:
            try:
                socket.create_connection((host.strip("[]"), int(port)), 5).close()
                return
            except OSError as exc:
                if time.time() > deadline:
                    raise StageError(f"federated: no SuperLink answers at {self.address} within "
                                     f"{timeout:.0f} s ({exc})") from None
                time.sleep(1.0)

    # ------------------------------------------------------------------ the CLI
    def _cli_home(self) -> Path:
        home = self.work / "home" / "cli"
        if not (home / "config.toml").is_file():
            home.mkdir(parents=True, exist_ok=True)
            tls = ("insecure = true\n" if self.insecure else
                   f'root-certificates = "{self.credentials.ca_cert.resolve()}"\n')
            (home / "config.toml").write_text(
                f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                f'address = "{self.address}"\n{tls}')
            cli_login(home, self.address, self.credentials.token())
        return home

    def _flwr(self, *args: str, timeout: float = 120) -> str:
        home = self._cli_home()
        try:
            proc = subprocess.run([bin_path("flwr"), *args], env=flower_env(home),
                                  capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise StageError(f"federated: flwr {args[0]} got no answer from the SuperLink at "
                             f"{self.address} within {timeout:.0f} s") from exc
        if proc.returncode != 0:
            raise StageError(f"federated: flwr {args[0]} failed ({proc.returncode}): "
                             f"{(proc.stdout + proc.stderr)[-1500:]}")
        return proc.stdout

    def submit(self, plan_path: Path | str) -> int:
        app = self.work / "app"
        app.mkdir(parents=True, exist_ok=True)
        (app / "pyproject.toml").write_text(APP_PYPROJECT)
        res = self._flwr("run", str(app), CONNECTION, "--format", "json", "--run-config",
                         f'baton-plan="{plan_path}"')
        try:
            return int(json.loads(res[res.index("{"):])["run-id"])
        except (ValueError, KeyError) as exc:
            raise StageError(f"federated: flwr run gave no run id: {res[-1500:]}") from exc

    def logs_of(self, run_id: int) -> str:
        try:
            return self._flwr("log", str(run_id), CONNECTION, "--show", timeout=60)
        except (StageError, subprocess.TimeoutExpired):
            return ""

    # ------------------------------------------------------------------ in-process calls
    def _control(self) -> Any:
        """The Control API client, kept for the run (one HTTP connection; a restarted
        SuperLink listens at the same address and the client reconnects)."""
        if self._client is None:
            from flwr.cli.cli_client_interceptor import CliClientHttpInterceptor
            from flwr.supercore.control import ControlHttpClient
            from flwr.supercore.interceptors.http.runtime_version import (
                RuntimeVersionHttpInterceptor,
            )

            self._client = ControlHttpClient.from_server_address(
                server_address=self.address, insecure=self.insecure,
                root_certificates=(None if self.insecure
                                   else self.credentials.ca_cert.read_bytes()),
                interceptors=[CliClientHttpInterceptor(),
                              RuntimeVersionHttpInterceptor(component_name="flwr CLI"),
                              BearerToken(self.credentials.token())])
        return self._client

    def _call(self, what: str, fn: Any, request: Any) -> Any:
        try:
            return fn(request)
        except Exception as exc:  # noqa: BLE001 - Flower's HTTP errors; a restart in progress
            raise StageError(f"federated: the SuperLink at {self.address} refused or did not "
                             f"answer {what}: {exc}") from exc

    def register(self, public_keys: Mapping[str, Path]) -> dict[str, int]:
        """Exactly `public_keys`' clients registered (see the module); name -> node id."""
        from flwr.proto.control_pb2 import (
            ListNodesRequest,
            RegisterNodeRequest,
            UnregisterNodeRequest,
        )

        wanted = {name: public_key_bytes(path) for name, path in public_keys.items()}
        client = self._control()
        listed = self._call("ListNodes", client.ListNodes, ListNodesRequest())
        known = {bytes(n.public_key): int(n.node_id) for n in listed.nodes_info
                 if not n.unregistered_at}
        out: dict[str, int] = {}
        for name, key in wanted.items():
            if key in known:
                out[name] = known[key]
                continue
            res = self._call(f"RegisterNode for client {name!r}", client.RegisterNode,
                             RegisterNodeRequest(public_key=key, name=_node_name(name)))
            out[name] = int(res.node_id)
        keep = set(out.values())
        for node_id in set(known.values()) - keep:
            self._call(f"UnregisterNode {node_id}", client.UnregisterNode,
                       UnregisterNodeRequest(node_id=node_id))
        return out

    def status(self, run_id: int) -> str:
        """The run's status as `flwr ls` prints it ("running", "finished:completed", ...)."""
        from flwr.proto.control_pb2 import ListRunsRequest

        res = self._call(f"for run {run_id}", self._control().ListRuns,
                         ListRunsRequest(run_id=run_id))
        for run in res.run_dict.values():
            st = run.status
            return f"{st.status}:{st.sub_status}" if st.sub_status else str(st.status)
        return ""

    def close(self) -> None:
        """Close the Control API client, if one was opened."""
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None


def _node_name(client: str) -> str:
    """A node name Flower accepts (it validates them): the client's, made safe."""
    import re

    return re.sub(r"[^A-Za-z0-9_-]+", "-", client).strip("-")[:63] or "client"


def public_key_bytes(path: Path) -> bytes:
    """The OpenSSH EC public key at `path` as Flower registers it (its public_key_to_bytes)."""
    from cryptography.hazmat.primitives import serialization
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes

    try:
        key = serialization.load_ssh_public_key(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise StageError(f"federated: cannot read the public key {path}: {exc}") from exc
    return public_key_to_bytes(key)  # type: ignore[arg-type]
