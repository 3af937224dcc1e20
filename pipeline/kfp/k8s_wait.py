"""A training object created on the cluster a pipeline step runs in, and waited on.

The step's pod talks to the API server as the pipeline's service account (the Role of
`launch.rbac`). It creates what the object needs (the spec's ConfigMap: replaced when an
earlier attempt left one), then the object, unless an earlier attempt of the step created it:
then it is adopted, whatever its state, so a step restarted after a preemption waits for the
training it started instead of starting it twice. It polls the object's conditions, says each
new one in the step's log, and returns when the success or the failure condition is true. A
SIGTERM to the step (the run cancelled, the pod deleted) deletes the object, its pods with it.

An API server that answers 5xx or not at all while the step polls is waited out for
`UNREACHABLE_S`; past that the step exits 129 (retryable: KFP's retry adopts the object).
No kubeconfig and no in-cluster account, or a refusal (403: the RBAC not applied), is
permanent: exit 1 with the API server's words.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from baton.errors import EXIT_PREEMPTED, EXIT_TRANSIENT

POLL_SECONDS = 10.0
UNREACHABLE_S = 300.0
EXIT_STOPPED = EXIT_PREEMPTED  # 143: the step told to stop
TIMEOUTS = (10.0, 60.0)  # connect, read (seconds): a call that hangs is an outage
EXIT_LOST = EXIT_TRANSIENT  # 129, Baton's "lost peer": retryable


def run(docs: list[dict[str, Any]], conditions: Mapping[str, tuple[str, str]],
        api_client: Any = None, poll_s: float = POLL_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic) -> tuple[int, list[str]]:
    """Create `docs` (the training object last) and wait on the object; (exit code, lines)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from baton.k8s import submit as sub

    lines: list[str] = []

    def say(text: str) -> None:
        print(f"baton kfp: {text}", flush=True)
        lines.append(text)

    if api_client is None:
        try:
            api_client = sub.load_client()
        except sub.SubmitError as exc:
            say(f"error: no access to the cluster's API server: {exc}")
            return 1, lines
    requests = sub.plan(docs)
    obj = requests[-1].kwargs
    kind, name = obj["body"]["kind"], obj["body"]["metadata"]["name"]
    where = {k: obj[k] for k in ("group", "version", "namespace", "plural")}
    custom = client.CustomObjectsApi(api_client)
    for req in requests:
        try:
            getattr(getattr(client, req.api)(api_client), req.method)(
                **req.kwargs, _request_timeout=TIMEOUTS)
            say(f"created {req.label} in {req.kwargs.get('namespace', 'the cluster')}")
        except ApiException as exc:
            if exc.status != 409:
                say(f"error: creating {req.label}: the API server answered {exc.status} {exc.reason}: "
                    f"{sub._api_message(exc)}")
                return 1, lines
            if req is requests[-1]:
                say(f"{req.label} exists (an earlier attempt of this step started it): "
                    "waiting on it")
            elif req.kwargs["body"]["kind"] == "ConfigMap":
                client.CoreV1Api(api_client).replace_namespaced_config_map(
                    req.kwargs["body"]["metadata"]["name"], req.kwargs["namespace"],
                    req.kwargs["body"], _request_timeout=TIMEOUTS)
                say(f"replaced {req.label}")
    stop: list[int] = []
    previous = _on_sigterm(lambda signum: stop.append(signum))
    success, failure = conditions[kind]
    seen: set[tuple[str, str]] = set()
    failing_since: float | None = None
    try:
        while True:
            if stop:
                custom.delete_namespaced_custom_object(**where, name=name,
                                                       propagation_policy="Foreground")
                say(f"stopped: deleted {kind}/{name} and its pods")
                return EXIT_STOPPED, lines
            try:
                current = custom.get_namespaced_custom_object(**where, name=name,
                                                              _request_timeout=TIMEOUTS)
                failing_since = None
            except ApiException as exc:
                if exc.status == 404:
                    say(f"error: {kind}/{name} is gone (deleted outside this step)")
                    return 1, lines
                if exc.status is not None and exc.status < 500 and exc.status != 429:
                    say(f"error: reading {kind}/{name}: the API server answered {exc.status} "
                        f"{exc.reason}: {sub._api_message(exc)}")
                    return 1, lines
                failing_since = _unreachable(failing_since, f"{exc.status} {exc.reason}", say,
                                             clock)
                if failing_since < 0:
                    return EXIT_LOST, lines
                sleep(poll_s)
                continue
            except (HTTPError, OSError) as exc:  # no answer: a connection refused, reset, ...
                failing_since = _unreachable(failing_since, type(exc).__name__, say, clock)
                if failing_since < 0:
                    return EXIT_LOST, lines
                sleep(poll_s)
                continue
            for cond in (current.get("status") or {}).get("conditions") or []:
                key = (str(cond.get("type")), str(cond.get("status")))
                if key not in seen:
                    seen.add(key)
                    say(f"{kind}/{name}: {key[0]}={key[1]} {cond.get('reason') or ''}: "
                        f"{cond.get('message') or ''}".rstrip(": "))
                if cond.get("status") == "True" and cond.get("type") == success:
                    return 0, lines
                if cond.get("status") == "True" and cond.get("type") == failure:
                    say(f"error: {kind}/{name} failed: {cond.get('message') or cond.get('reason')}")
                    return 1, lines
            sleep(poll_s)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _unreachable(since: float | None, why: str, say: Callable[[str], None],
                 clock: Callable[[], float]) -> float:
    """When the API server started failing (now, on the first failure), or -1 once it has
    failed for UNREACHABLE_S."""
    now = clock()
    if since is None:
        say(f"the API server is not answering ({why}): waiting up to {UNREACHABLE_S:.0f}s")
        return now
    if now - since >= UNREACHABLE_S:
        say(f"error: the API server has not answered for {now - since:.0f}s ({why}): "
            f"exiting {EXIT_LOST}, retryable (a retry adopts the running object)")
        return -1.0
    return since


def _on_sigterm(handler: Callable[[int], None]) -> Any:
    try:
        return signal.signal(signal.SIGTERM, lambda signum, _frame: handler(signum))
    except ValueError:  # not the main thread: nothing to install
        return None
