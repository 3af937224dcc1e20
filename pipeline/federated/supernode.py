"""`python -m baton.pipeline.federated.supernode [flower-supernode flags]`: a Flower SuperNode
with its warm ClientApp host, in one command (one container of a pod).

The flags are flower-supernode's and pass to it unchanged; this launcher requires the two that
make the host the only one allowed to take the node's tasks: `--isolation process` (the
SuperNode spawns no ClientApp process of its own) and `--superexec-auth-secret-file` (its
Runtime API admits only a caller with the secret). The SuperNode runs as a child (it dies with
this process, PR_SET_PDEATHSIG); this process imports TensorFlow and Baton's ClientApp while
the SuperNode connects, then serves its tasks (pipeline.federated.clientapp_host). When the
SuperNode exits, so does this launcher, with its code (a pod restarts them together).
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


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


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
        return 2
    if flags.host not in ("127.0.0.1", "localhost", "::1"):
        sys.stderr.write("baton supernode: the ClientAppIo (Runtime) API binds the loopback "
                         f"only. Received: --host {flags.host}\n")
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s baton-host %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll otherwise
    secret = Path(flags.superexec_auth_secret_file).read_bytes()
    node = subprocess.Popen(  # noqa: S603 - the operator's own flags
        [str(Path(sys.executable).parent / "flower-supernode"), *args],
        preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    from baton.pipeline.federated.clientapp_host import WarmClientApp

    host = WarmClientApp(f"{flags.host}:{flags.port}", secret)

    def _stop(signum: int, _frame: object) -> None:
        host.stop.set()
        if node.poll() is None:
            node.send_signal(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    def _watch() -> None:  # the SuperNode gone: the host stops too
        node.wait()
        host.stop.set()

    threading.Thread(target=_watch, daemon=True).start()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow  # noqa: F401 - warm: the first message must not pay the import

    import baton.pipeline.federated.flower_client  # noqa: F401

    logging.info("ClientApp host ready for the SuperNode's Runtime API at %s:%s",
                 flags.host, flags.port)
    host.serve()
    try:
        code = node.wait(timeout=15)
    except subprocess.TimeoutExpired:
        node.kill()
        code = node.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
