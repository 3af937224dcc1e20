"""Polling a TF Serving-compatible server's model status after a push.

`GET <server>/v1/models/<name>/versions/<version>` answers
`{"model_version_status": [{"version": "3", "state": "AVAILABLE", "status": {...}}]}` on both
TensorFlow Serving and `baton serve`. The push stage reports what it saw; a server that never
loads the version is a serving problem, shown in push.json rather than hidden.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


def version_state(server: str, name: str, version: int, timeout: float = 2.0) -> dict[str, Any]:
    """The server's view of one version: {"state": ..., "error": ...}."""
    url = f"{server.rstrip('/')}/v1/models/{name}/versions/{version}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return {"state": "UNKNOWN", "error": f"HTTP {exc.code}"}
    except (OSError, ValueError) as exc:
        return {"state": "UNREACHABLE", "error": str(exc)}
    for item in body.get("model_version_status", []):
        if str(item.get("version")) == str(version):
            status = item.get("status") or {}
            return {"state": item.get("state", "UNKNOWN"),
                    "error": status.get("error_message") or None}
    return {"state": "UNKNOWN", "error": f"version {version} not listed by {url}"}


def wait_available(server: str, name: str, version: int, wait_seconds: float,
                   interval: float = 0.5) -> dict[str, Any]:
    """Poll until the version is AVAILABLE or `wait_seconds` pass; returns the last state."""
    start = time.monotonic()
    while True:
        state = version_state(server, name, version)
        state["waited_s"] = round(time.monotonic() - start, 3)
        if state["state"] == "AVAILABLE" or state["waited_s"] >= wait_seconds:
            return state
        time.sleep(interval)
