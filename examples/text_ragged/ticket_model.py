"""An own model that reads a ragged input: the ticket's token ids, embedded and averaged over
the ticket's words (however many it has), beside its length."""

import keras


def build(spec):
    tokens = spec.inputs["tokens"]  # keras.Input(shape=(None,), dtype="int64", ragged=True)
    vocab = spec.feature_spec.feature("tokens").vocab_size  # words + the OOV bucket
    dim = int(spec.params.get("embedding_dim", 16))
    embedded = keras.layers.Embedding(vocab, dim, name="token_embedding")(tokens)
    pooled = keras.ops.mean(embedded, axis=1)  # [B, dim]: the mean over each ticket's words
    length = keras.layers.Reshape((1,), name="length_col")(spec.inputs["length"])
    x = keras.layers.Concatenate(name="features")([pooled, length])
    x = keras.layers.Dense(int(spec.params.get("units", 32)), activation="relu", name="hidden")(x)
    logits = keras.layers.Dense(spec.num_classes, name="logits")(x)
    return keras.Model(dict(spec.inputs), logits, name="ticket_model")
