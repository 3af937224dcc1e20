"""Baton: a TensorFlow production pipeline framework.

This module is the public API: every name in `__all__` is supported and documented in
docs/api.md; everything else under `baton.*` is internal and may change. Names are resolved
lazily (PEP 562), so `import baton` costs nothing and `baton --help` stays instant: TensorFlow,
Beam and YAML load only when the code that needs them runs.

    from baton import stage, StageContext, StageError

    @stage(inputs={"examples": True}, outputs=("report",))
    def summarize(ctx: StageContext, config: dict) -> dict: ...
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from baton._version import __version__

# grpcio's fork support (on by default) restarts gRPC's poller thread in a child forked to run
# a program; Python's subprocess then closes the poller's epoll descriptor before exec, and the
# child aborts (SIGABRT, "epoll_wait error: Bad file descriptor") before its program starts.
# Baton forks only to exec (its task supervisor, SuperNodes, local servers) once a process may
# hold gRPC (Flower, KFP, TF Serving clients), so it turns that support off unless the user
# set it: a parameter server spawned that way died at start 1 time in ~200 (2 in 400 spawns
# measured; 0 in 400 with it off). grpcio reads the variable when it is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# public name -> the internal module that defines it
_EXPORTS: dict[str, str] = {
    # writing stages
    "stage": "baton.pipeline.registry",
    "StageHooks": "baton.pipeline.hooks",
    "StageContext": "baton.pipeline.context",
    "RunOptions": "baton.pipeline.context",
    # errors (one hierarchy, one root)
    "BatonError": "baton.errors",
    "SpecError": "baton.errors",
    "ConfigError": "baton.errors",
    "UsageError": "baton.errors",
    "StageError": "baton.errors",
    "StorageError": "baton.errors",
    "Preempted": "baton.errors",
    # models and features
    "FeatureSpec": "baton.graphs.feature_spec",
    "ModelSpec": "baton.graphs.model_spec",
}

__all__ = [  # the same names as _EXPORTS (tests/test_public_api.py checks), spelled out for tools
    "__version__",
    "stage",
    "StageHooks",
    "StageContext",
    "RunOptions",
    "BatonError",
    "SpecError",
    "ConfigError",
    "UsageError",
    "StageError",
    "StorageError",
    "Preempted",
    "FeatureSpec",
    "ModelSpec",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; the runtime resolves lazily below
    from baton.errors import (
        BatonError,
        ConfigError,
        Preempted,
        SpecError,
        StageError,
        StorageError,
        UsageError,
    )
    from baton.graphs.feature_spec import FeatureSpec
    from baton.graphs.model_spec import ModelSpec
    from baton.pipeline.context import RunOptions, StageContext
    from baton.pipeline.hooks import StageHooks
    from baton.pipeline.registry import stage


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'baton' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
