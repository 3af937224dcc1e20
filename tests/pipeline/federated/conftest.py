"""Fixtures of the federated tests."""

from __future__ import annotations

import pytest

from baton.pipeline.testing import run_stage


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The penguins ingest's `examples` artifact (each test file ingests once)."""
    out, _ = run_stage("ingest", {}, {}, tmp_path_factory.mktemp("ingest"))
    return out["examples"]
