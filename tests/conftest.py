"""Suite-wide guard: nothing imports the repository's folders as top-level packages.

pytest puts the checkout on sys.path (tests/ is a package), so `import pipeline` would work
here and nowhere else; the product and the tests must use `baton.pipeline`. A test after which
a module named like one of the folders is imported fails.
"""

from __future__ import annotations

import os
import sys

import pytest

FOLDERS = ("pipeline", "graphs", "strategies", "serving", "k8s")


@pytest.fixture(autouse=True)
def _no_top_level_folder_imports():
    """Checked after every test (and so per pytest-xdist worker): the test that imported one of
    the folders as a top-level package fails, named."""
    yield
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in FOLDERS)
    if leaked:
        for name in leaked:  # reported once, by the test that imported it
            del sys.modules[name]
        pytest.fail(f"imported as top-level packages (use baton.*): {leaked[:10]}")



def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker picks ports in a range of its own (BATON_PORT_RANGE, inherited
    by every process it starts): a cluster or emulator keeps its ports for its life, and a task
    restarting in one worker must not find its port taken by a cluster another worker chose it
    for meanwhile (strategies.cluster.free_ports)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or "BATON_PORT_RANGE" in os.environ:
        return
    from baton.strategies.cluster import _PRIVATE_FROM, _ephemeral_low

    index, workers = int(worker.removeprefix("gw")), int(count)
    size = (_ephemeral_low() - _PRIVATE_FROM) // workers
    low = _PRIVATE_FROM + index * size
    os.environ["BATON_PORT_RANGE"] = f"{low}-{low + size - 1}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest work first across the pytest-xdist workers (a file per worker at a time): the
    files that start clusters of processes (marked multi_worker), then those with slow tests,
    then the rest, so no worker is left alone with a long file at the end. pytest-xdist keeps
    this order only with `--no-loadscope-reorder` (the Makefile passes it); by default it sorts
    the files by their number of tests."""
    clusters = {item.path for item in items if item.get_closest_marker("multi_worker")}
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if item.path in clusters else 1 if item.path in slow else 2)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (SeaweedFS) on 127.0.0.1 for this test process, stopped at the end."""
    from baton.storage.testing import LocalS3
    from baton.strategies.cluster import free_ports

    server = LocalS3(free_ports(LocalS3.PORTS)).start()
    yield server
    server.close()


@pytest.fixture
def s3(s3_server, monkeypatch, request):
    """The S3 server's standard client variables set, and a fresh bucket: `s3://<bucket>`."""
    import re
    import secrets

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BATON_CACHE_DIR", str(request.getfixturevalue("tmp_path") / "cache"))
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return s3_server.bucket(f"{name}-{secrets.token_hex(3)}")
