"""Suite-wide guard: nothing imports the repository's folders as top-level packages.

pytest puts the checkout on sys.path (tests/ is a package), so `import pipeline` would work
here and nowhere else; the product and the tests must use `baton.pipeline`. A test after which
a module named like one of the folders is imported fails.
"""

from __future__ import annotations

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



def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files that start clusters of processes (marked multi_worker) run first: with a file per
    pytest-xdist worker, the longest files first leave no worker alone with one at the end."""
    clusters = {item.path for item in items if item.get_closest_marker("multi_worker")}
    items.sort(key=lambda item: item.path not in clusters)  # stable: order within kept
