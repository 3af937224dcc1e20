"""Baton's SuperNode launcher (pipeline.federated.supernode) around Flower's SuperNode: it refuses
a node that others could take tasks from, and it brings back a SuperNode that gave up on the
SuperLink (a stand-in prints what flwr 1.42 prints, then hangs as flwr 1.42 does); its warm
ClientApp host runs no task of another app (clientapp_host.refusal)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from baton.pipeline.federated import supernode

STAND_IN = """
import pathlib, sys, time
starts = pathlib.Path(sys.argv[1])
n = int(starts.read_text() or 0) + 1 if starts.exists() else 1
starts.write_text(str(n))
if n == 1:
    print("ERROR : SSL/TLS handshake error detected.", flush=True)  # flwr's line, then alive
    time.sleep(600)
time.sleep(600)
"""


def test_a_supernode_that_gave_up_on_the_superlink_is_killed_and_started_again(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(supernode, "RETRY_S", 0.5)
    script, starts = tmp_path / "node.py", tmp_path / "starts"
    script.write_text(STAND_IN)
    stop = threading.Event()
    node = supernode.SuperNode([sys.executable, str(script), str(starts)], stop)
    watcher = threading.Thread(target=node.run, daemon=True)
    watcher.start()
    try:
        deadline = time.time() + 60
        while not (starts.exists() and starts.read_text() == "2"):
            assert time.time() < deadline, "the hung SuperNode was not started again"
            time.sleep(0.2)
        assert node.proc is not None and node.proc.poll() is None  # the second one runs
    finally:
        stop.set()
        node.signal(15)
        watcher.join(timeout=30)
    assert not watcher.is_alive() and node.starts == 2


@pytest.mark.parametrize("args, words", [
    (["--isolation", "subprocess", "--superexec-auth-secret-file", "s"],
     "needs --isolation process and --superexec-auth-secret-file"),
    (["--isolation", "process"], "needs --isolation process and --superexec-auth-secret-file"),
    (["--isolation", "process", "--superexec-auth-secret-file", "s", "--host", "0.0.0.0"],
     "the ClientAppIo (Runtime) API binds the loopback only. Received: --host 0.0.0.0"),
])
def test_a_supernode_others_could_take_tasks_from_is_refused(capsys, args, words):
    assert supernode.main(args) == 2
    assert words in capsys.readouterr().err


def _fab(components: dict[str, str] | None) -> object:
    import io
    import types
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        if components is not None:
            lines = "\n".join(f'{k} = "{v}"' for k, v in components.items())
            z.writestr("pyproject.toml", f"[tool.flwr.app.components]\n{lines}\n")
    return types.SimpleNamespace(content=buf.getvalue())


@pytest.mark.parametrize("fab_id, components, words", [
    ("baton/baton-federated", {"serverapp": "baton.pipeline.federated.flower_server:app",
                               "clientapp": "baton.pipeline.federated.flower_client:app"}, None),
    ("mallory/foreign-app", {"clientapp": "foreign_app:client"},
     "runs Baton's ClientApp only (baton/baton-federated); run 7 is app 'mallory/foreign-app'"),
    ("baton/baton-federated", {"clientapp": "foreign_app:client"},
     "names clientapp 'foreign_app:client'"),
    ("baton/baton-federated", None, "app bundle is unreadable"),
])
def test_the_clientapp_host_runs_batons_app_only(fab_id, components, words):
    """What the warm host checks before it runs a task: the run's app id and the ClientApp
    its bundle names (it never imports code from a bundle)."""
    import types

    from baton.pipeline.federated.clientapp_host import refusal

    why = refusal(types.SimpleNamespace(fab_id=fab_id, run_id=7), _fab(components))
    assert why is None if words is None else (why.startswith("refused") and words in why)
