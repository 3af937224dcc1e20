"""What the stage hands the Flower ServerApp: the plan file, and the run's round log.

The ServerApp runs in its own process (started by the SuperLink for `flwr run`), so the stage
writes everything the run needs to `plan.json` and names it in the run config. The ServerApp
appends one JSON line per event to `rounds.jsonl` (setup, transform, each round's start and
record); the stage's launcher reads it to inject faults at a round and to report.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Plan:
    clients: list[str]
    out_dir: str
    wire_path: str  # the relays' counters (processes.Federation); "": not measured
    fn: dict[str, Any]  # local.FnSpec as a dict
    settings: dict[str, Any]  # local.Settings as a dict
    rounds: int = 5
    local_epochs: int = 1
    algorithm: str = "fedavg"
    proximal_mu: float = 0.1
    server_learning_rate: float = 0.1
    fraction_fit: float = 1.0
    min_clients: int = 2
    round_timeout_s: float = 120.0
    compression: str = "none"
    privacy: dict[str, Any] = dataclasses.field(default_factory=dict)
    edge: str = "off"  # or a TFLite variant of the edge stage's converter: float, dynamic
    # stages.federated.SecureAggregation as a dict; empty: off
    secure_aggregation: dict[str, Any] = dataclasses.field(default_factory=dict)
    # rehearsed slow clients (--inject-failure client:N@round:R:slow): [{client, round,
    # seconds}]; that client's ClientApp answers round R's training `seconds` late
    late_clients: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # the registry: client name -> the node id its key was registered under (control.Control.
    # register); the ServerApp talks to these nodes only (admission.Admission). Empty: any
    # node, under the name it reports (a plan from before registration existed)
    nodes: dict[str, int] = dataclasses.field(default_factory=dict)

    def save(self, path: Path) -> Path:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls(**json.loads(Path(path).read_text()))


class RoundLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, record: dict[str, Any]) -> None:
        import time

        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"time": round(time.time(), 3), **record}) + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
