"""Deterministic synthetic tabular data of any size, generated in columnar chunks.

`generate(...)` yields numpy chunks (numeric `x0..`, categorical `c0..`, `label`); the same
seed always gives the same rows, whatever the chunk size, because each chunk draws from its
own generator seeded by (seed, chunk index) at a fixed chunk length. The label is a fixed
random linear rule of the features plus noise, cut at standard-normal quantiles into
`classes` equally likely classes (`class_0`, ...), or the raw score for regression
(`classes: 0`). Ingest writes these chunks straight to tf.Examples (fast enough for tens of
millions of rows); `baton_synthetic` exposes the same rows as a TFDS builder.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

CHUNK = 65_536


def columns(numeric: int, categorical: int) -> list[tuple[str, str]]:
    return ([(f"x{i}", "float32") for i in range(numeric)]
            + [(f"c{i}", "string") for i in range(categorical)])


def generate(rows: int, seed: int = 0, numeric: int = 4, categorical: int = 1,
             vocab_size: int = 20, classes: int = 2, missing: float = 0.0,
             noise: float = 0.1) -> Iterator[dict[str, np.ndarray]]:
    """Chunks of at most CHUNK rows: {"x0": float32, ..., "c0": str objects, "label": ...}."""
    rule = np.random.default_rng([seed, 2**31 - 1])
    w_num = rule.normal(size=numeric)
    w_cat = rule.normal(size=(categorical, max(vocab_size, 1)))
    scale = np.sqrt((w_num**2).sum() + (w_cat**2).mean(axis=1).sum() + noise**2) or 1.0
    vocab = np.array([f"v{j:03d}" for j in range(max(vocab_size, 1))], object)
    from statistics import NormalDist

    cuts = [NormalDist().inv_cdf(k / classes) for k in range(1, classes)] if classes else []
    labels = np.array([f"class_{k}" for k in range(max(classes, 1))], object)
    for chunk, start in enumerate(range(0, rows, CHUNK)):
        n = min(CHUNK, rows - start)
        g = np.random.default_rng([seed, chunk])
        x = g.standard_normal((CHUNK, numeric)).astype(np.float32)[:n]
        c = g.integers(0, max(vocab_size, 1), size=(CHUNK, categorical))[:n]
        eps = g.standard_normal(CHUNK)[:n] * noise
        drop = g.random((CHUNK, numeric + categorical))[:n] < missing
        score = x.astype(np.float64) @ w_num + eps
        for j in range(categorical):
            score += w_cat[j][c[:, j]]
        score /= scale
        out: dict[str, np.ndarray] = {}
        for i in range(numeric):
            col = x[:, i].copy()
            col[drop[:, i]] = np.nan
            out[f"x{i}"] = col
        for j in range(categorical):
            col = vocab[c[:, j]]
            col[drop[:, numeric + j]] = ""
            out[f"c{j}"] = col
        if classes:
            out["label"] = labels[np.searchsorted(cuts, score)]
        else:
            out["label"] = score.astype(np.float32)
        yield out
