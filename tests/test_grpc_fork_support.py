"""grpcio's fork support is off in a process that imports baton before grpcio (unless the user
set it): with it on, a child forked to run a program could abort before exec (baton/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = "import os, baton, grpc; print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'))"


def _run(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    if env_value is not None:
        env["GRPC_ENABLE_FORK_SUPPORT"] = env_value
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.strip()


def test_importing_baton_turns_grpc_fork_support_off_unless_the_user_set_it() -> None:
    assert _run(None) == "false"
    assert _run("true") == "true"  # the user's own setting is kept
