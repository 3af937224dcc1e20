"""A warm ClientApp host: one long-lived process runs every message of one SuperNode.

Flower 1.42 runs a ClientApp task by starting `flwr-clientapp`, which serves one message and
exits (flwr/supernode/runtime/run_clientapp.py), so each train and evaluate message paid a
Python start, TensorFlow's import, the client's data read, its transform and its model build:
93 s a round at 8 clients on 2 cores, where training is about a second
(docs/benchmarks-federated.md). Flower's answer for other task types is warm executors
(Kubernetes pods, for agent/model/connector tasks only). For ClientApps it offers the seam this
uses: a SuperNode started with `--isolation process` spawns nothing and waits for an outside
process to take its tasks from its Runtime API (AcquireTask, HMAC-signed with
`--superexec-auth-secret-file`), as Flower's own `flower-superexec` would.

`WarmClientApp` is that outside process, for Baton's ClientApp only: it takes a task, pulls the
message and context with Flower's own calls (run_clientapp.pull_task_input, push_message,
push_task_output; heartbeats as flwr-clientapp sends them) and calls
`flower_client.app` in this process, whose caches (`_LOCAL`: the client's data, its transformed
splits, its built and traced model) now live from message to message. It never installs or
imports code from a run's app bundle: a task of any other app (another FAB's `flwr run`, even one
that names itself Baton's but points at other components) gets an error reply, "refused", and
nothing of it runs here.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import tomllib
import zipfile
from typing import Any

from baton.pipeline.federated.control import APP_ID

ACQUIRE = "/flwr.proto.Runtime/AcquireTask"
CLIENTAPP = "baton.pipeline.federated.flower_client:app"
log = logging.getLogger("baton.federated.host")


def refusal(run: Any, fab: Any) -> str | None:
    """Why a task of this run is not Baton's ClientApp (None: it is)."""
    if run.fab_id != APP_ID:
        return (f"refused: this SuperNode runs Baton's ClientApp only ({APP_ID}); run "
                f"{run.run_id} is app {run.fab_id or '<unnamed>'!r}")
    try:
        with zipfile.ZipFile(io.BytesIO(fab.content)) as z:
            components = tomllib.loads(z.read("pyproject.toml").decode())["tool"]["flwr"][
                "app"]["components"]
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        return f"refused: run {run.run_id}'s app bundle is unreadable ({exc})"
    if components.get("clientapp") != CLIENTAPP:
        return (f"refused: run {run.run_id}'s bundle names clientapp "
                f"{components.get('clientapp')!r}; this SuperNode runs {CLIENTAPP}")
    return None


class WarmClientApp:
    """Takes the ClientApp tasks of the SuperNode whose Runtime API is at `address`."""

    def __init__(self, address: str, secret: bytes | None, poll_s: float = 0.2) -> None:
        from flwr.supercore.interceptors import (
            RuntimeVersionHttpInterceptor,
            SuperExecAuthHttpInterceptor,
        )
        from flwr.supercore.retry import make_simple_http_retry_invoker
        from flwr.supercore.runtime import RuntimeHttpClient

        self.address, self.poll_s = address, poll_s
        self.stop = threading.Event()
        self.served = 0
        interceptors: list[Any] = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
        if secret:
            interceptors.append(SuperExecAuthHttpInterceptor(master_secret=secret,
                                                             protected_methods={ACQUIRE}))
        # the Runtime API is the SuperNode's, on 127.0.0.1 (its --host): plain HTTP, never
        # leaving this machine (the pod); the secret is what admits this process. Retries
        # give up after a few seconds: `serve` asks again itself, so a restarted SuperNode's
        # first task is taken within a second, not after Flower's backoff of up to 20 s
        retry = make_simple_http_retry_invoker()
        retry.max_time = 3.0
        self._acquirer = RuntimeHttpClient.from_server_address(
            server_address=address, insecure=True, root_certificates=None,
            interceptors=interceptors, retry_invoker=retry)

    def serve(self) -> None:
        """Take and run tasks until `stop` is set."""
        from flwr.proto.runtime_pb2 import AcquireTaskRequest
        from flwr.supercore.constant import TaskType

        request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
        while not self.stop.is_set():
            try:
                res = self._acquirer.AcquireTask(request)
            except Exception as exc:  # noqa: BLE001 - the SuperNode (re)starting
                log.debug("AcquireTask: %s", exc)
                self.stop.wait(1.0)
                continue
            if res.HasField("task") and res.token:
                try:
                    self.run_task(res.token)
                except Exception:  # noqa: BLE001 - one task lost; the host serves the next
                    log.exception("task %s", res.task.task_id)
                continue  # the next message is often queued already: ask again at once
            self.stop.wait(self.poll_s)
        self._acquirer.close()

    def run_task(self, token: str) -> None:
        """One message, as flwr-clientapp would run it, in this process."""
        from flwr.app import Message
        from flwr.app.error import Error
        from flwr.common.constant import ErrorCode, SubStatus
        from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
        from flwr.supercore.interceptors import (
            RuntimeTokenHttpInterceptor,
            RuntimeVersionHttpInterceptor,
        )
        from flwr.supercore.retry import make_simple_http_retry_invoker
        from flwr.supercore.runtime import RuntimeHttpClient
        from flwr.supernode.runtime.run_clientapp import (
            pull_task_input,
            push_message,
            push_task_output,
        )

        from baton.pipeline.federated.flower_client import app

        client = RuntimeHttpClient.from_server_address(
            server_address=self.address, insecure=True, root_certificates=None,
            interceptors=[RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                          RuntimeTokenHttpInterceptor(token)],
            retry_invoker=make_simple_http_retry_invoker())
        heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
        heartbeat.start()
        message = context = reply = None
        status, details = SubStatus.FAILED, "ClientApp task failed"
        started = time.perf_counter()
        try:
            message, context, run, fab = pull_task_input(client)
            why = refusal(run, fab)
            if why is not None:
                log.warning("%s", why)
                details = why
                reply = Message(Error(code=ErrorCode.LOAD_CLIENT_APP_EXCEPTION, reason=why),
                                reply_to=message)
            else:
                reply = app(message=message, context=context)
                status, details = SubStatus.COMPLETED, ""
        except Exception as exc:  # noqa: BLE001 - reported to the server as Flower does
            log.exception("ClientApp raised")
            details = f"{type(exc)}:<'{exc}'>"
            if message is not None:
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      reason=details), reply_to=message)
        finally:
            try:
                if reply is not None and context is not None:
                    push_message(client, reply, context)
                push_task_output(client, context, status, details)
            except Exception:  # noqa: BLE001 - the task expires on the SuperNode's side
                log.exception("could not push the reply")
            heartbeat.stop()
            client.close()
        self.served += 1
        kind = message.metadata.message_type if message is not None else "?"
        log.info("served %s in %.2f s (%s)", kind, time.perf_counter() - started, status)
