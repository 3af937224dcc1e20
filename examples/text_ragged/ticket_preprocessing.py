"""The tickets' preprocessing_fn, tf.Transform's text pattern: a vocabulary over the tokens of
`text`, applied to them. The output `tokens` is ragged (one id per token, as many as the
ticket has words), and reaches the model as a ragged keras.Input (ticket_model.py), in
training and in serving alike: the served model runs this same graph on the raw text."""

import tensorflow as tf

import baton.tft as tft


def preprocessing_fn(inputs):
    tokens = tf.strings.split(tf.strings.lower(inputs["text"]))  # RaggedTensor [B, None]
    return {
        "tokens": tft.compute_and_apply_vocabulary(tokens, top_k=500, num_oov_buckets=1,
                                                   vocab_filename="words"),
        "length": tf.cast(tokens.row_lengths(), tf.float32),
        "topic": inputs["topic"],  # the label passes through: Baton encodes it
    }
