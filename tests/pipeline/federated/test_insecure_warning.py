"""`insecure: true` warns the operator, at WARNING level and under `--quiet` too (which
silences progress only): the rehearsal drops TLS and SuperNode authentication (issue 33)."""

from __future__ import annotations

import logging

import pytest

from baton.pipeline.context import RunOptions
from baton.pipeline.testing import run_stage


class _Stop(Exception):
    pass


@pytest.mark.parametrize("insecure", [True, False])
def test_insecure_true_warns_even_when_quiet(tmp_path, monkeypatch, insecure):
    from baton.pipeline.federated import silos

    def stop(*_a, **_k):  # the federation itself is not what is tested here
        raise _Stop

    monkeypatch.setattr(silos, "for_stage", stop)
    warned: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = warned.append  # type: ignore[method-assign]
    logger = logging.getLogger("baton.stage")
    logger.addHandler(handler)
    try:
        with pytest.raises(_Stop):
            run_stage("federated", {"clients": 2, "insecure": insecure}, {"examples": tmp_path},
                      tmp_path / "root", options=RunOptions(quiet=True))
    finally:
        logger.removeHandler(handler)
    said = [r.getMessage() for r in warned if r.levelno == logging.WARNING]
    if insecure:
        assert any("insecure: true" in m and "plaintext" in m and "127.0.0.1" in m
                   for m in said), said
    else:
        assert not said, said
