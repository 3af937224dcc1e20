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

from baton.strategies.federated_settings import FederatedSettings


@dataclasses.dataclass(frozen=True)
class Plan:
    """The run: who takes part, where outputs go, the transform, and the stage's own settings.

    `settings` is the federated stage's Config object itself (FederatedSettings): plan.json
    holds it serialised (`to_dict`) and `load` reads it back into the same type with the same
    checks, so no setting is copied into a field of its own here."""

    clients: list[str]
    out_dir: str
    wire_path: str  # the relays' counters (processes.Federation); "": not measured
    fn: dict[str, Any]  # local.FnSpec as a dict
    settings: FederatedSettings
    search_dir: str | None = None  # the spec's directory: the user's modules are imported there
    # rehearsed slow clients (--inject-failure client:N@round:R:slow): [{client, round,
    # seconds}]; that client's ClientApp answers round R's training `seconds` late
    late_clients: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # the registry: client name -> the node id its key was registered under (control.Control.
    # register); the ServerApp talks to these nodes only (admission.Admission). Empty: any
    # node, under the name it reports (a plan from before registration existed)
    nodes: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return json.dumps({**data, "settings": self.settings.to_dict()}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        data = json.loads(text)
        return cls(**{**data, "settings": FederatedSettings.from_dict(data["settings"],
                                                                      "plan.settings")})

    def save(self, path: Path) -> Path:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls.from_json(Path(path).read_text())


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
