"""One preprocessing_fn, written once, run by tensorflow-transform and by baton.tft (the test
injects `tft`): census-like columns, every supported analyzer, a nested one and text tokens."""

from __future__ import annotations

import numpy as np

NUMERIC = ("a", "b", "c", "d")
CATEGORICAL = ("cat1", "cat2", "cat3")


def rows(n: int = 3000, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(80)])
    text = [" ".join(rng.choice(words, size=rng.integers(1, 6),
                                p=np.arange(80, 0, -1) / np.arange(80, 0, -1).sum()))
            for _ in range(n)]
    return {
        "row": np.arange(n, dtype=np.float32),  # passed through: the rows' order on both sides
        "a": rng.normal(3.0, 2.0, n).astype(np.float32),
        "b": rng.normal(-1.0, 0.5, n).astype(np.float32),
        "c": rng.lognormal(0.0, 1.0, n).astype(np.float32),
        "d": rng.integers(0, 20, n).astype(np.float32),
        "cat1": np.array([f"v{int(x)}" for x in rng.zipf(1.6, n) % 40], object),
        "cat2": np.array([f"k{int(x)}" for x in rng.integers(0, 7, n)], object),
        "cat3": np.array([f"z{int(x)}" for x in rng.binomial(30, 0.3, n)], object),
        "text": np.array(text, object),
    }


def make(tft, tf):  # noqa: ANN001, ANN201 - tft is either library
    """The function as a TFX user writes it: `cat2_top` keeps tf.Transform's default id -1 for
    unknown tokens, and the text ids are padded with -1 (int64 with no known range): Baton's
    transform stage writes both, as tf.Transform does (the data benchmark runs it there)."""

    def preprocessing_fn(inputs):  # noqa: ANN001, ANN202
        out = {"row_out": inputs["row"] + 0.0}
        for k in NUMERIC:
            out[k + "_z"] = tft.scale_to_z_score(inputs[k])
        out["a_01"] = tft.scale_to_0_1(inputs["a"])
        out["b_mm"] = tft.scale_by_min_max(inputs["b"], -1.0, 1.0)
        for k in CATEGORICAL:
            out[k + "_id"] = tft.compute_and_apply_vocabulary(inputs[k], num_oov_buckets=2,
                                                              vocab_filename=k)
        out["cat2_top"] = tft.compute_and_apply_vocabulary(inputs["cat2"], top_k=3,
                                                           frequency_threshold=5,
                                                           num_oov_buckets=0)
        out["c_b"] = tft.bucketize(inputs["c"], 8)
        out["d_b"] = tft.bucketize(inputs["d"], 4)
        out["cat1_h"] = tft.hash_strings(inputs["cat1"], 16)
        tokens = tf.strings.split(inputs["text"])
        out["text_ids"] = tft.compute_and_apply_vocabulary(
            tokens, top_k=50, num_oov_buckets=1).to_tensor(default_value=-1, shape=[None, 5])
        zero = tf.zeros_like(inputs["a"])
        out["a_mean"] = tft.mean(inputs["a"]) + zero
        out["a_var"] = tft.var(inputs["a"]) + zero
        out["c_min"] = tft.min(inputs["c"]) + zero
        out["c_max"] = tft.max(inputs["c"]) + zero
        out["d_sum"] = tft.sum(inputs["d"]) + zero
        out["d_size"] = tf.cast(tft.size(inputs["d"]), tf.float32) + zero
        out["nested"] = tft.scale_to_z_score(inputs["a"] - tft.mean(inputs["b"]))
        return out

    return preprocessing_fn


SCALINGS = ("a_z", "b_z", "c_z", "d_z", "a_01", "b_mm", "nested")
ANALYZER_VALUES = ("a_mean", "a_var", "c_min", "c_max", "d_sum", "d_size")
IDS = ("cat1_id", "cat2_id", "cat3_id", "cat2_top", "cat1_h", "text_ids")
BUCKETS = (("c_b", 8), ("d_b", 4))


def compare(ours: dict[str, np.ndarray], peer: dict[str, np.ndarray],
            min_text_vocab: int = 40) -> tuple[list[str], dict[str, float]]:
    """The parity checks, for the test and the data benchmark: (failures, bucket-id
    disagreement per bucketized output). Rows must be in the same order on both sides."""
    failures: list[str] = []
    if sorted(ours) != sorted(peer):
        return [f"outputs differ: {sorted(set(ours) ^ set(peer))}"], {}
    if not np.array_equal(ours["row_out"], peer["row_out"]):
        failures.append("row_out")
    for k in SCALINGS:
        if not np.allclose(ours[k], peer[k], rtol=1e-5, atol=1e-6):
            failures.append(f"{k}: max |diff| {np.max(np.abs(ours[k] - peer[k])):.3g}")
    for k in ANALYZER_VALUES:
        if not np.allclose(ours[k], peer[k], rtol=1e-6, atol=0):
            failures.append(f"{k}: {ours[k].flat[0]!r} vs {peer[k].flat[0]!r}")
    if len(np.unique(peer["text_ids"])) <= min_text_vocab:
        failures.append("text_ids: the peer's vocabulary is nearly all OOV")
    for k in IDS:
        if not np.array_equal(ours[k], peer[k]):
            failures.append(f"{k}: {float(np.mean(ours[k] != peer[k])):.4%} of ids differ")
    differ = {}
    for k, buckets in BUCKETS:  # within tf.Transform's quantile epsilon
        differ[k] = float(np.mean(ours[k] != peer[k]))
        if differ[k] > min(1.0 / buckets, 0.01) * 2:
            failures.append(f"{k}: {differ[k]:.4%} of bucket ids differ")
    return failures, differ
