"""Suite-wide guard: nothing imports the repository's folders as top-level packages.

pytest puts the checkout on sys.path (tests/ is a package), so `import pipeline` would work
here and nowhere else; the product and the tests must use `baton.pipeline`. Any module named
like one of the folders that was imported during the session fails the run.
"""

from __future__ import annotations

import sys

import pytest

FOLDERS = ("pipeline", "graphs", "strategies", "serving", "k8s")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in FOLDERS)
    if leaked:
        sys.stderr.write(f"\nimported as top-level packages (use baton.*): {leaked[:10]}\n")
        session.exitstatus = 1
