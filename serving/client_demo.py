"""Start `baton serve` as a subprocess, wait for AVAILABLE, predict once, stop it.

The demo (`make demo`) and the end-to-end tests use this instead of copying subprocess
plumbing: the server binds free ports (`--bind_free_ports`) and reports them through
`--ports_file`, so nothing ever races for a fixed port, and the child is always
stopped with SIGTERM (then SIGKILL) by its pid, never by name.

    python -m baton.serving.client_demo --model_base_path=DIR --model_name=penguins \\
        --instance '{"bill_length_mm": 39.1, ...}'
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from baton.errors import EXIT_OK


class ServerProcess:
    """A `python -m baton.serving` child on free ports; use as a context manager."""

    def __init__(self, model_name: str, model_base_path: str, extra_flags: Sequence[str] = (),
                 timeout: float = 120.0, python: str = sys.executable):
        self._dir = tempfile.mkdtemp(prefix="baton-serve-")
        self.ports_file = os.path.join(self._dir, "ports.json")
        self.log_path = os.path.join(self._dir, "server.log")
        self.args = [python, "-m", "baton.serving", f"--model_name={model_name}",
                     f"--model_base_path={model_base_path}", "--bind_free_ports",
                     f"--ports_file={self.ports_file}", *extra_flags]
        self.model_name = model_name
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.rest_port = self.grpc_port = None

    def start(self) -> ServerProcess:
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env)
        deadline = time.monotonic() + self.timeout
        while not os.path.exists(self.ports_file):
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"server not listening after {self.timeout}s:\n{self.log()}")
            time.sleep(0.05)
        with open(self.ports_file) as f:
            ports = json.load(f)
        self.rest_port, self.grpc_port = ports["rest"], ports["grpc"]
        self.wait_available(deadline)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}/v1/models/{self.model_name}"

    def wait_available(self, deadline: float) -> None:
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    states = [s["state"] for s in json.load(r)["model_version_status"]]
                if "AVAILABLE" in states:
                    return
            except (urllib.error.URLError, OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"model {self.model_name} not AVAILABLE:\n{self.log()}")
            time.sleep(0.1)

    def predict(self, instances: list, signature_name: str = "") -> dict:
        body: dict[str, Any] = {"instances": instances}
        if signature_name:
            body["signature_name"] = signature_name
        req = urllib.request.Request(self.url + ":predict", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM by pid, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def demo(model_base_path: str, model_name: str, instance: dict, out=sys.stdout) -> dict:
    """Serve, print one REST prediction for `instance`, stop. Returns the prediction."""
    with ServerProcess(model_name, model_base_path) as server:
        result = server.predict([instance])
        print(f"POST {server.url}:predict {json.dumps({'instances': [instance]})}", file=out)
        print(json.dumps(result, indent=2), file=out)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model_base_path", required=True)
    p.add_argument("--model_name", default="penguins")
    p.add_argument("--instance", required=True, help="one JSON object of raw features")
    a = p.parse_args(argv)
    demo(a.model_base_path, a.model_name, json.loads(a.instance))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
