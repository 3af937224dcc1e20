"""graphs.label_outputs over ragged and sparse outputs (issue 34): an output computed from the
label is refused whatever its encoding, as a dense one is (issue 35)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kind", ["ragged", "sparse"])
def test_a_composite_output_computed_from_the_label_is_refused(kind: str) -> None:
    import tensorflow as tf

    from baton.graphs import label_outputs

    with tf.Graph().as_default():
        stub = tf.compat.v1.placeholder(tf.string, [None], name="label")
        text = tf.compat.v1.placeholder(tf.string, [None], name="text")
        made = {"ragged": tf.strings.split,
                "sparse": lambda t: tf.sparse.from_dense(tf.reshape(t, [-1, 1]))}[kind]
        ok = {"tokens": made(text), "same": tf.identity(stub)}
        assert label_outputs.split(ok, stub, "species") == ({"tokens": ok["tokens"]}, ["same"])
        with pytest.raises(ValueError, match=r"^output 'from_label' is computed from the label "
                                             r"'species'"):
            label_outputs.split({**ok, "from_label": made(stub)}, stub, "species")
