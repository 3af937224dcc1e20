"""Shared by the stage tests that run the user's own code: a code directory and a train run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from baton.pipeline.testing import run_stage


def code_dir(tmp_path_factory: Any, files: dict[str, str]) -> Path:
    """A directory (the spec's, in a run) holding `files`: name -> Python source."""
    d = tmp_path_factory.mktemp("code")
    for name, source in files.items():
        (d / name).write_text(source)
    return d


def train(art: dict[str, Path], code: Path, root: Path, **config: Any) -> Any:
    """The train stage on the penguins artifacts `art`, user code imported from `code`."""
    inputs = {"transformed": art["transformed"], "transform_graph": art["transform_graph"]}
    return run_stage("train", config, inputs, root, spec_dir=code)
