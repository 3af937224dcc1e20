"""The text table's preprocessing_fn, written once for both sides (`make(tft, tf)`): tf.Transform's
text pattern, a vocabulary over the tokens of `text` applied to them, so the output is ragged
(one id per token). Baton runs it as `transform.config.preprocessing_fn: text_fn:preprocessing_fn`
(spec_dir bench/data); the peer (bench/data/tft_peer.py --table text) with tensorflow-transform."""

from __future__ import annotations

TOP_K = 10_000


def make(tft, tf):  # noqa: ANN001, ANN201 - tft is either library
    def preprocessing_fn(inputs):  # noqa: ANN001, ANN202
        tokens = tf.strings.split(inputs["text"])  # RaggedTensor [B, None]
        return {"row_out": inputs["row"] + 0.0,
                "tokens": tft.compute_and_apply_vocabulary(tokens, top_k=TOP_K,
                                                           num_oov_buckets=1,
                                                           vocab_filename="words")}

    return preprocessing_fn


def preprocessing_fn(inputs):  # noqa: ANN001, ANN201
    import tensorflow as tf

    import baton.tft as tft

    return make(tft, tf)(inputs)
