"""`python -m baton.pipeline.federated.supernode_child [flower-supernode flags]`: Flower's own
`flower-supernode` entry point, whose node heartbeat survives an unexpected answer.

Why (read in flwr 1.42's source: flwr/supernode/fleet_http_connection.py, flwr/supercore/
heartbeat.py): the SuperNode's heartbeat thread retries only a transport error or a 502/503/504.
Any other answer to one heartbeat, an HTTP 500 (the SuperLink's SQLite state answering
"database is locked" after its 5 s busy timeout) or a 4xx, raises out of the thread, which
ends. Nothing restarts it: the process goes on pulling and training, but the SuperLink hears no
heartbeat, marks the node offline 2 x 30 s later, and from then on answers every message sent
to it with "Node Unavailable" (error 5), its real replies included. One bad answer takes a
healthy client out of the federation for good, silently.

Here an unexpected answer no longer raises out of the thread: it is logged and treated as a
failed beat, which Flower's sender already retries with its own backoff (1 s doubling, at most
20 s). A 401 still ends the heartbeat and stops the node, as in Flower (its function sends
SIGINT before it raises; beating again would send SIGINT again during the shutdown).
Everything else is Flower's: `pipeline.federated.supernode` starts this module instead of the
`flower-supernode` script, with the same flags.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from logging import WARNING


def steady(beat: Callable[[], bool]) -> Callable[[], bool]:
    """`beat`, with any exception but a 401 turned into a failed beat (False: retried by the
    sender)."""
    import httpx

    def call() -> bool:
        try:
            return beat()
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code == httpx.codes.UNAUTHORIZED:
                raise  # Flower's function sent SIGINT: the node is stopping, as in Flower
            return _missed(exc)
        except Exception as exc:  # noqa: BLE001 - every failure is a missed beat, retried
            return _missed(exc)

    return call


def _missed(exc: Exception) -> bool:
    from flwr.common.logger import log  # Flower's logger: its format, its output

    log(WARNING, "Node heartbeat failed (%s: %s); retrying", type(exc).__name__, exc)
    return False


def install() -> None:
    """Make the SuperNode's heartbeat sender (flwr.supernode.fleet_http_connection's) steady."""
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supernode import fleet_http_connection

    if fleet_http_connection.HeartbeatSender is not HeartbeatSender:  # installed already
        return

    class SteadyHeartbeatSender(HeartbeatSender):
        def __init__(self, heartbeat_fn: Callable[[], bool]) -> None:
            super().__init__(steady(heartbeat_fn))

    fleet_http_connection.HeartbeatSender = SteadyHeartbeatSender  # type: ignore[misc]


def main() -> int:
    install()
    from flwr.supernode.cli import flower_supernode

    sys.argv[0] = "flower-supernode"  # its usage and errors name Flower's command
    flower_supernode()  # returns None; its errors exit through SystemExit with their code
    return 0


if __name__ == "__main__":
    sys.exit(main())
