"""Custom ops a SavedModel needs, registered from the Python packages that ship them.

TF Serving's binary has only the ops linked into it: a model using TF Text or
SentencePiece ops fails to load unless the binary is rebuilt with them
(tensorflow/serving issue 1490). In Python, a package registers its ops when it is
imported, so a version whose graph names ops TensorFlow does not know imports the
installed packages that provide such ops (`tensorflow_text`, which includes
SentencePiece's) before it loads, and fails naming the ops and the package otherwise.
Nothing is imported for models that use only TensorFlow's own ops.
"""

from __future__ import annotations

import importlib
import importlib.util

from baton.serving.status import Code, ServingError

# (import name, what to install): packages whose import registers ops with TensorFlow.
PROVIDERS = (("tensorflow_text", "tensorflow-text (pip install 'baton[text]')"),)


def graph_ops(meta_graph) -> set[str]:
    """Op types of a MetaGraphDef's graph and of every function in its library."""
    ops = {n.op for n in meta_graph.graph_def.node}
    for f in meta_graph.graph_def.library.function:
        ops.update(n.op for n in f.node_def)
    return ops


def _unknown(ops: set[str]) -> list[str]:
    from tensorflow.python.framework import op_def_registry

    return sorted(op for op in ops if op_def_registry.get(op) is None)


def ensure_ops(meta_graph, export_dir: str) -> list[str]:
    """Imports the providers needed for the graph's unknown ops; returns those imported.

    Raises NOT_FOUND (TF Serving's "Op type not registered" code) naming the ops still
    unknown afterwards and the packages that might provide them.
    """
    missing = _unknown(graph_ops(meta_graph))
    if not missing:
        return []
    imported, absent = [], []
    for module, install in PROVIDERS:
        if importlib.util.find_spec(module) is None:
            absent.append(install)
            continue
        importlib.import_module(module)
        imported.append(module)
        missing = _unknown(set(missing))
        if not missing:
            return imported
    hint = f"; install {' or '.join(absent)}" if absent else ""
    raise ServingError(Code.NOT_FOUND,
                       f"Op type not registered: {', '.join(missing[:8])}"
                       f"{' ...' if len(missing) > 8 else ''} in {export_dir}"
                       f" (imported: {imported or 'none'}){hint}")
