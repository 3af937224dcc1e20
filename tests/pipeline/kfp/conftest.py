"""The kfp tests import the user modules of the specs they compile (as `baton kfp` does):
each test starts without those of an earlier test's directory."""

from __future__ import annotations

import sys

import pytest

USER_MODULES = ("numsource", "numstages", "numhelper", "penguin_model", "penguin_layers")


@pytest.fixture(autouse=True)
def _fresh_user_modules():
    yield
    for name in USER_MODULES:
        sys.modules.pop(name, None)
