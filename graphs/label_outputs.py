"""The label among a preprocessing_fn's outputs: Baton's rule, applied where the outputs are read.

Baton encodes the label itself (its class vocabulary, or the raw value for regression), so the
features a `preprocessing_fn` computes never see it: at serving time there is no label, and the
function is traced with a placeholder for it (graphs/tft/module.py). What that means for each
output:

- the label passed through under its own name (`outputs["species"] = inputs["species"]`) or
  under another (TFX's `outputs["species_xf"] = inputs["species"]`): it is the label, not a
  feature; Baton trains on the raw label;
- any other output computed from the label (a vocabulary over it, a scaling) would be a
  constant feature, the same for every row: refused, naming the output and the rule. Under the
  label's own name it is dropped with a warning instead (`label_note`), as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def passes_through(value: Any, stub: Any) -> bool:
    """`value` is the label placeholder itself, or it through `tf.identity` only."""
    t = value
    while t is not stub:
        op = getattr(t, "op", None)
        if op is None or op.type != "Identity" or not op.inputs:
            return False
        t = op.inputs[0]
    return True


def computed_from(value: Any, stub: Any) -> bool:
    """`value`'s graph reads the label placeholder (data inputs, followed back); a ragged or
    sparse `value` through any of its component tensors."""
    import tensorflow as tf

    ops = [t.op for t in tf.nest.flatten(value, expand_composites=True) if hasattr(t, "op")]
    if not ops:
        return False
    target, stack, seen = stub.op, ops, set()
    while stack:
        node = stack.pop()
        if node is target:
            return True
        if node.name in seen:
            continue
        seen.add(node.name)
        stack.extend(t.op for t in node.inputs)
    return False


def split(outputs: Mapping[str, Any], stub: Any, label: str) -> tuple[dict[str, Any], list[str]]:
    """(the feature outputs, the names under which the label passes through). ValueError, with
    the rule, for an output under another name that is computed from the label."""
    features: dict[str, Any] = {}
    aliases: list[str] = []
    for name, value in outputs.items():
        if name == label:
            continue  # the label's own name: passed through or dropped (tft_module.label_note)
        if passes_through(value, stub):
            aliases.append(name)
            continue
        if computed_from(value, stub):
            raise ValueError(
                f"output {name!r} is computed from the label {label!r}. The label is no input "
                "of the features (there is none when serving: here it is a placeholder), so "
                f"{name!r} would be the same for every row, a dead feature. Baton encodes the "
                "label itself (the class vocabulary; the raw value for regression): leave it "
                f"out of the outputs, or pass it through unchanged (outputs[{label!r}] = "
                f"inputs[{label!r}], or under another name as TFX's "
                f"outputs['{label}_xf'] = inputs[{label!r}])")
        features[name] = value
    return features, aliases
