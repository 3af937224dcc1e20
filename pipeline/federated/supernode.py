"""`python -m baton.pipeline.federated.supernode [flower-supernode flags]`: a Flower SuperNode
with its warm ClientApp host, in one command (one container of a pod).

The flags are flower-supernode's and pass to it unchanged; this launcher requires the two that
make the host the only one allowed to take the node's tasks: `--isolation process` (the
SuperNode spawns no ClientApp process of its own) and `--superexec-auth-secret-file` (its
Runtime API admits only a caller with the secret). The SuperNode runs as a child (it dies with
this process, PR_SET_PDEATHSIG); this process imports TensorFlow and Baton's ClientApp while
the SuperNode connects, then serves its tasks (pipeline.federated.clientapp_host). The child is
Flower's own entry point with one change (pipeline.federated.supernode_child: a heartbeat that
an unexpected answer does not end, which would leave the node offline for good). A SuperNode
that ends by itself (it lost or was not yet admitted by the SuperLink: `SuperNode`) is started
again after RETRY_S, saying so; SIGTERM/SIGINT stop both, and the launcher exits with the
SuperNode's last code.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from baton.errors import EXIT_USAGE

RETRY_S = 5.0
NOT_ADMITTED = "Exit Code: 305"  # flwr's SUPERNODE_CONNECTION_ERROR (its process exits 1)
# flwr 1.42's SuperNode lines after which it is alive but no longer a node: it says it
# terminated and may hang in Python's shutdown (its signal handler raises SystemExit inside
# threading._shutdown, which ignores it); or its connection loop gave up on an SSL error (a
# TLS connection dropped by whatever stood for the SuperLink: a relay, a load balancer with
# no backend while the SuperLink restarts), which it does not retry, its Runtime API still up
GAVE_UP = ("SuperNode terminated gracefully", "SSL/TLS handshake error detected")


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class SuperNode:
    """Flower's SuperNode as a child, its output passed through, started again whenever it
    ends by itself. It ends on its own only when it lost the SuperLink: not admitted yet
    (Flower's "Exit Code: 305": its key not registered yet), or a TLS error on a connection
    the SuperLink dropped (a restarted SuperLink: Flower retries plaintext connection errors
    but gives up on "SSL/TLS handshake error" and exits 0). The warm ClientApp host stays."""

    def __init__(self, argv: list[str], stop: threading.Event) -> None:
        self.argv, self.stop = argv, stop
        self.proc: subprocess.Popen[bytes] | None = None
        self.code = 0
        self.starts = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.starts += 1
            self.proc = subprocess.Popen(  # noqa: S603 - the operator's own flags
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
            refused = False
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
                refused = refused or NOT_ADMITTED.encode() in line
                if any(g.encode() in line for g in GAVE_UP):
                    threading.Timer(3.0, self._kill_if_alive, [self.proc]).start()
            self.code = self.proc.wait()
            if self.stop.is_set():
                break
            logging.warning("the SuperNode exited (%d) %s; starting it again in %.0f s",
                            self.code, "not admitted by the SuperLink (its key not registered "
                            "yet?)" if refused else "having lost the SuperLink", RETRY_S)
            self.stop.wait(RETRY_S)
        self.stop.set()

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    @staticmethod
    def _kill_if_alive(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            logging.warning("the SuperNode gave up on the SuperLink and did not exit: "
                            "killing it")
            proc.kill()


def _flags(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--isolation", default="subprocess")
    p.add_argument("--superexec-auth-secret-file")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9094)
    return p.parse_known_args(argv)[0]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    flags = _flags(args)
    if flags.isolation != "process" or not flags.superexec_auth_secret_file:
        sys.stderr.write("baton supernode: needs --isolation process and "
                         "--superexec-auth-secret-file (the warm ClientApp host takes the "
                         f"node's tasks). Received: {' '.join(args)}\n")
        return EXIT_USAGE
    if flags.host not in ("127.0.0.1", "localhost", "::1"):
        sys.stderr.write("baton supernode: the ClientAppIo (Runtime) API binds the loopback "
                         f"only. Received: --host {flags.host}\n")
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s baton-host %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll otherwise
    secret = Path(flags.superexec_auth_secret_file).read_bytes()
    from baton.pipeline.federated.clientapp_host import WarmClientApp

    host = WarmClientApp(f"{flags.host}:{flags.port}", secret)
    # Flower's flower-supernode, its node heartbeat made to survive an unexpected answer
    node = SuperNode([sys.executable, "-m", "baton.pipeline.federated.supernode_child", *args],
                     host.stop)
    watcher = threading.Thread(target=node.run, daemon=True)  # the node gone: the host stops
    watcher.start()

    def _stop(signum: int, _frame: Any) -> None:
        host.stop.set()
        node.signal(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow  # noqa: F401 - warm: the first message must not pay the import

    import baton.pipeline.federated.flower_client  # noqa: F401

    logging.info("ClientApp host ready for the SuperNode's Runtime API at %s:%s",
                 flags.host, flags.port)
    host.serve()
    node.signal(signal.SIGTERM)
    watcher.join(timeout=15)
    if watcher.is_alive() and node.proc is not None:
        node.proc.kill()
        watcher.join(timeout=5)
    code = node.code
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
