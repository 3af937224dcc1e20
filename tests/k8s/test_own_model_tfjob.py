"""The user's own model on Kubernetes: its modules ride in the spec's ConfigMap, beside the spec.

`baton k8s` finds the modules the train stage names and the helpers they import from the spec's
directory (pipeline.user_code), writes each into the spec ConfigMap under a flat key and mounts
the ConfigMap with `items` putting every module back at its path under /etc/baton, beside
pipeline.yaml, where `baton task` imports it from as it does locally. The generated TFJobs
run end to end on the example's model (a custom layer, a custom loss, an optimizer factory) in
tests/k8s/test_emulator_tf.py: multi-worker mirrored with a SIGKILLed replica, and parameter
servers, each with the spec's directory deleted first.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from baton.k8s.errors import ManifestError
from baton.k8s.pods import SPEC_DIR, code_key, spec_configmap, volumes
from tests.k8s.conftest import make_options

REPO = Path(__file__).resolve().parents[2]
BATON = shutil.which("baton", path=str(Path(sys.executable).parent)) or "baton"


def test_code_files_ride_in_the_spec_configmap_at_their_paths() -> None:
    opts = make_options(code_files=(("my_model.py", "X = 1\n"), ("helpers/util.py", "Y = 2\n")))
    cm = spec_configmap(opts)
    assert cm is not None
    assert cm["data"]["my_model.py"] == "X = 1\n" and cm["data"]["helpers--util.py"] == "Y = 2\n"
    vols, mounts = volumes(opts)
    spec_vol = next(v for v in vols if v["name"] == "pipeline-spec")
    assert spec_vol["configMap"]["items"] == [
        {"key": "pipeline.yaml", "path": "pipeline.yaml"},
        {"key": "my_model.py", "path": "my_model.py"},
        {"key": code_key("helpers/util.py"), "path": "helpers/util.py"},
    ]
    assert {"name": "pipeline-spec", "mountPath": SPEC_DIR, "readOnly": True} in mounts
    # no user code: the manifests are exactly as before (no items)
    plain = next(v for v in volumes(make_options())[0] if v["name"] == "pipeline-spec")
    assert "items" not in plain["configMap"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ((("../up.py", ""),), "must be relative to the spec's directory"),
        ((("/abs.py", ""),), "must be relative to the spec's directory"),
        ((("big.py", "x" * (1024 * 1024)),), "more than a ConfigMap holds"),
    ],
)
def test_code_files_that_cannot_ship_in_a_configmap_are_refused(files, message) -> None:
    with pytest.raises(ManifestError, match=message):
        make_options(code_files=files)


def test_baton_k8s_ships_the_model_module_and_its_helper(tmp_path) -> None:
    spec_dir = tmp_path / "spec"
    shutil.copytree(REPO / "examples" / "own_model", spec_dir,
                    ignore=shutil.ignore_patterns("__pycache__", "models"))
    (spec_dir / "unrelated.py").write_text("# not imported: not shipped\n")
    proc = subprocess.run([BATON, "k8s", str(spec_dir / "pipeline.yaml"), "--out",
                           str(tmp_path / "mf"), "--run-id", "r1"],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    cm = yaml.safe_load((tmp_path / "mf" / "pipeline-spec.yaml").read_text())
    assert sorted(cm["data"]) == ["penguin_layers.py", "penguin_model.py", "pipeline.yaml"]
    assert cm["data"]["penguin_layers.py"] == (spec_dir / "penguin_layers.py").read_text()
