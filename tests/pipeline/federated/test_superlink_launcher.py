"""Baton's SuperLink launcher (pipeline.federated.superlink) refuses, with exit 2 and the
missing flag named, a TLS SuperLink that leaves a door open: the Control API without the
token (anyone could `flwr run` a bundle or register a key), SuperNode authentication off (any
node could join), or the Runtime API without the SuperExec secret (anyone could take the
ServerApp's tasks). Flower alone starts each of these (it only warns)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("flwr")

from baton.pipeline.federated import superlink  # noqa: E402


@pytest.fixture
def creds(tmp_path):
    from baton.pipeline.federated.credentials import rehearsal

    return rehearsal(tmp_path / "creds", ["client-0"])


def _argv(creds, tmp_path, auth=True, isolation="process", secret=True) -> list[str]:
    return ["--ssl-ca-certfile", str(creds.ca_cert), "--ssl-certfile", str(creds.server_cert),
            "--ssl-keyfile", str(creds.server_key),
            *(["--enable-supernode-auth"] if auth else []), "--isolation", isolation,
            *(["--superexec-auth-secret-file", str(creds.superexec_secret)] if secret else []),
            "--host", "127.0.0.1", "--port", "1", "--database", str(tmp_path / "l.db")]


@pytest.fixture
def served(monkeypatch):
    """Stands in for Flower's server: a SuperLink the launcher lets through is recorded here
    instead of serving (and blocking the test)."""
    import importlib

    fs = importlib.import_module("flwr.superlink.cli.flower_superlink")
    started: list = []
    monkeypatch.setattr(fs, "_run_superlink_http_api",
                        lambda lifespan_config: started.append(lifespan_config))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(superlink.subprocess, "Popen", lambda *a, **k: _NoChild())
    return started


class _NoChild:
    def terminate(self) -> None:
        pass


@pytest.mark.parametrize("change, words", [
    ({"token": False}, "BATON_CONTROL_TOKEN_FILE is not set"),
    ({"auth": False}, "--enable-supernode-auth is missing: any SuperNode could join"),
    ({"isolation": "subprocess"}, "needs --isolation process and --superexec-auth-secret-file"),
    ({"secret": False}, "needs --isolation process and --superexec-auth-secret-file"),
])
def test_a_superlink_with_an_open_door_is_refused(tmp_path, creds, served, monkeypatch, capsys,
                                                  change, words):
    if change.pop("token", True):
        monkeypatch.setenv(superlink.TOKEN_ENV, str(creds.control_token))
    else:
        monkeypatch.delenv(superlink.TOKEN_ENV, raising=False)
    with pytest.raises(SystemExit) as exc:
        superlink.main(_argv(creds, tmp_path, **change))
    assert exc.value.code == 2
    assert words in capsys.readouterr().err
    assert served == []


def test_the_secure_superlink_starts_with_the_token_plugin(tmp_path, creds, served,
                                                           monkeypatch):
    monkeypatch.setenv(superlink.TOKEN_ENV, str(creds.control_token))
    superlink.main(_argv(creds, tmp_path))
    assert len(served) == 1 and isinstance(served[0].authn_plugin, superlink.BearerTokenPlugin)


def test_an_insecure_rehearsal_superlink_starts(tmp_path, served, monkeypatch):
    monkeypatch.delenv(superlink.TOKEN_ENV, raising=False)
    superlink.main(["--insecure", "--host", "127.0.0.1", "--port", "1",
                    "--database", str(tmp_path / "l.db")])
    assert len(served) == 1
