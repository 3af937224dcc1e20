"""`python -m baton.pipeline.federated.superlink [flower-superlink flags]`: Flower 1.42's
SuperLink with its Control API locked by a token and its Runtime API by the SuperExec secret.

Why a launcher rather than `flower-superlink` itself (read in flwr 1.42's source:
flwr/superlink/main.py, config_loader.py, cli/flower_superlink.py; and its docs): the SuperLink
serves its Fleet API (the SuperNodes), Control API (`flwr run`, `flwr supernode register`, ...)
and Runtime API (where a ServerApp process takes its task) on one HTTP port, so whoever can
reach the SuperNodes' port reaches the other two.

- Control API: authentication is a `ControlAuthnPlugin` in the SuperLink's configuration. The
  only one besides the NoOp (which admits everyone) is Flower Enterprise's OIDC plugin:
  `FLWR_OIDC_ENABLED=1` on the open-source build exits with "OIDC account authentication is
  unavailable in this Flower distribution". Open, anyone could `flwr run` any app bundle (its
  ServerApp runs on the SuperLink, its ClientApp next to every silo's data) or register a node
  of their own. This launcher parses the same flags with Flower's own parser and swaps the
  NoOp plugin for `BearerTokenPlugin`: a Control API call is served only with
  `Authorization: Bearer <token>` (the file named by `BATON_CONTROL_TOKEN_FILE`); the routes
  Flower leaves open for logging in get nothing from it. The Flower CLI sends the token from
  its credential store (credentials.cli_login), Baton's Control client adds it itself.
- Runtime API: Flower checks `--superexec-auth-secret-file` only with `--isolation process`
  (in `subprocess` mode it is "ignored"), so with Flower's default anyone could take a run's
  ServerApp task before the SuperLink's own SuperExec does. With `--isolation process` and a
  secret, this launcher starts Flower's `flower-superexec` itself (what `subprocess` mode does,
  plus the secret, TLS-verified against `--ssl-ca-certfile`).

Without `--insecure` (a local rehearsal) the launcher refuses (exit 2) to start a SuperLink
that leaves any of these open: no token, no `--enable-supernode-auth` (any SuperNode could
join), or no `--isolation process` with a secret (anyone could take the ServerApp's tasks).

Everything else is Flower's: its flags, its FastAPI app, its uvicorn server.
"""

from __future__ import annotations

import hmac
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flwr.common.constant import (
    ACCESS_TOKEN_KEY,
    NOOP_ACCOUNT_NAME,
    NOOP_FLWR_AID,
    REFRESH_TOKEN_KEY,
)
from flwr.supercore.auth.typing import (
    AccountAuthCredentials,
    AccountAuthLoginDetails,
    AccountInfo,
)
from flwr.supercore.error import ApiErrorCode, FlowerError
from flwr.supercore.utils import get_metadata_str
from flwr.superlink.auth_plugin import ControlAuthnPlugin

from baton.errors import EXIT_USAGE

TOKEN_ENV = "BATON_CONTROL_TOKEN_FILE"


class BearerTokenPlugin(ControlAuthnPlugin):
    """Admit a Control API request only with the federation's token (constant-time compare).

    The account is Flower's NoOp account, as without authentication, so runs and nodes keep the
    owner they always had; only an anonymous caller is new: refused (HTTP 401)."""

    def __init__(self, token: str) -> None:
        if len(token) < 32:
            raise ValueError(f"{TOKEN_ENV}: the Control API token must be at least 32 "
                             f"characters. Received: {len(token)}")
        self._token = token.encode()

    def _valid(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self._token)

    @staticmethod
    def _account() -> AccountInfo:
        return AccountInfo(flwr_aid=NOOP_FLWR_AID, account_name=NOOP_ACCOUNT_NAME)

    def get_login_details(self) -> AccountAuthLoginDetails | None:
        return None  # no device flow: the token is handed out with the federation's secrets

    def validate_tokens_in_metadata(self, metadata: Sequence[tuple[str, str | bytes]]
                                    ) -> tuple[bool, AccountInfo | None]:
        ok = self._valid(get_metadata_str(metadata, ACCESS_TOKEN_KEY))
        return ok, self._account() if ok else None

    def get_auth_tokens(self, device_code: str) -> AccountAuthCredentials | None:
        raise FlowerError(ApiErrorCode.NO_ACCOUNT_AUTH,
                          "This SuperLink takes a bearer token; it has no login flow.")

    def refresh_tokens(self, metadata: Sequence[tuple[str, str | bytes]]
                       ) -> tuple[Sequence[tuple[str, str | bytes]] | None, AccountInfo | None]:
        if not self._valid(get_metadata_str(metadata, REFRESH_TOKEN_KEY)):
            return None, None
        token = self._token.decode()
        return [(ACCESS_TOKEN_KEY, token), (REFRESH_TOKEN_KEY, token)], self._account()


def superexec_command(host: str, port: int, secret_file: str, ca_certfile: str | None,
                      insecure: bool) -> list[str]:
    """Flower's SuperExec for this SuperLink's ServerApps, proving `secret_file`."""
    host = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host in ("::", "[::]") \
        else host
    tls = ["--insecure"] if insecure else ["--root-certificates", str(ca_certfile)]
    return [str(Path(sys.executable).parent / "flower-superexec"), *tls,
            "--runtime-api-address", f"{host}:{port}", "--superexec-auth-secret-file",
            secret_file, "--parent-pid", str(os.getpid())]


def open_doors(parsed: Any, environ: Mapping[str, str]) -> list[str]:
    """What a TLS SuperLink started with these flags would leave open (empty: nothing): its
    Control API without the token, any SuperNode admitted, its Runtime API (the ServerApp's
    tasks) without the SuperExec secret. Only `--insecure` (a local rehearsal) may."""
    out = []
    if not environ.get(TOKEN_ENV):
        out.append(f"{TOKEN_ENV} is not set: a SuperLink with TLS keeps its Control API "
                   "behind a token")
    if not parsed.enable_supernode_auth:
        out.append("--enable-supernode-auth is missing: any SuperNode could join")
    if parsed.isolation != "process" or not parsed.superexec_auth_secret_file:
        out.append("needs --isolation process and --superexec-auth-secret-file: anyone could "
                   "take the ServerApp's tasks")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Run the SuperLink (blocks until it is stopped)."""
    import importlib

    # the module, not the function of the same name that flwr.superlink.cli exports
    fs: Any = importlib.import_module("flwr.superlink.cli.flower_superlink")
    args = list(sys.argv[1:] if argv is None else argv)
    sys.argv = ["flower-superlink", *args]
    parsed = fs._parse_args_run_superlink().parse_args(args)
    config = fs._parse_superlink_lifespan_config()  # Flower's own checks and messages
    refused = [] if config.insecure else open_doors(parsed, os.environ)
    if refused:
        sys.stderr.write("baton superlink: " + "; ".join(refused) + ". Received: "
                         + " ".join(args) + "\n")
        sys.exit(EXIT_USAGE)
    token_file = os.environ.get(TOKEN_ENV)
    if token_file:
        config.authn_plugin = BearerTokenPlugin(Path(token_file).read_text().strip())
    child = None
    if config.isolation == "process" and parsed.superexec_auth_secret_file:
        child = subprocess.Popen(superexec_command(  # noqa: S603 - our own argv
            config.host, config.port, parsed.superexec_auth_secret_file,
            config.ssl_ca_certfile, config.insecure))
    try:
        fs._run_superlink_http_api(lifespan_config=config)
    finally:
        if child is not None:
            child.terminate()


if __name__ == "__main__":
    main()
