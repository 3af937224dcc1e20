"""Execution cache keyed on content: stage type, code version, config and input bytes.

TFX keys its cache on artifact records, so regenerating identical data reruns everything
downstream. Here the key is built from content hashes of the inputs, so a stage reruns only
when something it reads actually changed, and a rerun that reproduces the same bytes lets every
later stage hit the cache again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from baton.pipeline import store


def code_version(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\n")
    return "sha256:" + h.hexdigest()[:32]


def cache_key(
    stage_type: str, code: str, config: Any, inputs: dict[str, str], external: dict[str, str],
    settings: Any = None,
) -> str:
    """`settings`: the stage's `run_settings` (None: it has none, and the key is the one it
    always was)."""
    parts = {"type": stage_type, "code": code, "config": config, "inputs": inputs,
             "external": external}
    if settings is not None:
        parts["settings"] = settings
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Cache:
    """An index of `key -> successful record` under `runs/<pipeline>/.cache/`."""

    def __init__(self, runs_root: Path) -> None:
        self.dir = runs_root / ".cache"

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The record for `key` if every output it names still exists unchanged."""
        path = self.dir / f"{key}.json"
        try:
            rec = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        for out in rec.get("outputs", {}).values():
            p = Path(out["path"])
            if not p.exists():
                return None
            if store.fingerprint(p) != out.get("fingerprint") and store.hash_path(p) != out["hash"]:
                return None
        return rec

    def store(self, key: str, record: dict[str, Any]) -> None:
        store.write_json_atomic(self.dir / f"{key}.json", record)
