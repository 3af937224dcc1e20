"""baton.serving.conventions mirrors TensorFlow's SavedModel names without importing TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import pytest

from baton.serving import conventions as C

TF_NAMES = [
    "SERVING", "PREDICT_METHOD_NAME", "CLASSIFY_METHOD_NAME", "REGRESS_METHOD_NAME",
    "DEFAULT_SERVING_SIGNATURE_DEF_KEY", "CLASSIFY_INPUTS", "CLASSIFY_OUTPUT_CLASSES",
    "CLASSIFY_OUTPUT_SCORES", "REGRESS_INPUTS", "REGRESS_OUTPUTS",
]


@pytest.mark.parametrize("name", TF_NAMES)
def test_each_name_equals_tf_saved_models(name):
    import tensorflow as tf

    assert getattr(C, name) == getattr(tf.saved_model, name)


def test_the_warmup_path_is_the_one_graphs_writes():
    import os

    from baton.graphs import signatures as S

    assert C.ASSETS_EXTRA == S.ASSETS_EXTRA
    assert os.path.join(S.ASSETS_EXTRA, S.WARMUP_FILE) == C.WARMUP_FILE


def test_the_server_and_the_k8s_manifests_use_the_default_ports():
    from baton.k8s import serving as K
    from baton.serving.server import ServerOptions

    # 8500 is tensorflow_model_server's; its REST default is 0 (off), ours 8501 (docs/serving.md)
    assert (C.DEFAULT_GRPC_PORT, C.DEFAULT_REST_PORT) == (8500, 8501)
    assert (ServerOptions().port, ServerOptions().rest_api_port) == (8500, 8501)
    assert (K.GRPC_PORT, K.REST_PORT) == (8500, 8501)


def test_serving_spells_tf_names_only_here():
    """No other serving module writes one of the mirrored names as a literal (the tag
    "serve" was spelled in cli.py, server.py and servable.py)."""
    import ast
    import pathlib

    values = {getattr(C, n) for n in TF_NAMES if getattr(C, n) not in ("inputs", "outputs",
                                                                      "classes", "scores")}
    found = []
    for path in sorted(pathlib.Path(C.__file__).parent.glob("*.py")):
        if path.name == "conventions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in values:
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert found == []


def test_importing_it_does_not_import_tensorflow():
    code = "import sys, baton.serving.conventions; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
