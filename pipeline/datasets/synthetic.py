"""Deterministic synthetic tabular data of any size, generated in columnar chunks.

`generate(...)` yields numpy chunks (numeric `x0..`, categorical `c0..`, `label`); the same
seed always gives the same rows, whatever the chunk size, because each chunk draws from its
own generator seeded by (seed, chunk index) at a fixed chunk length. The label is a fixed
random linear rule of the features plus noise, cut at standard-normal quantiles into
`classes` equally likely classes (`class_0`, ...), or the raw score for regression
(`classes: 0`). Ingest writes these chunks straight to tf.Examples (fast enough for tens of
millions of rows); `baton_synthetic` exposes the same rows as a TFDS builder.

`generate_images(...)` makes labelled images instead (one `image` array `[n, H, W, C]`,
float32 in [0, 1], as ingest writes TFDS images): each class is a visible pattern (a
horizontal bar, a vertical bar, a diagonal, an anti-diagonal, a cross, a square outline) at a
random position, length and brightness, on a noisy background. Where the pattern sits varies,
so a CNN (translation-invariant filters) learns it from a few thousand images, while an MLP
must learn every position separately and does visibly worse.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

CHUNK = 65_536
IMAGE_CHUNK = 4_096  # images per chunk, fewer for large images (see image_chunk)
IMAGE_CHUNK_VALUES = 1 << 20  # pixel values per chunk (4 MB of float32)
PATTERNS = ("horizontal", "vertical", "diagonal", "antidiagonal", "cross", "square")
IMAGE_FEATURE = "image"


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


def image_chunk(shape: tuple[int, ...]) -> int:
    """Images per chunk of `generate_images`: fixed for a shape (so rows are deterministic
    whatever `rows` is), IMAGE_CHUNK up to 256 values per image, then bounded in values."""
    return max(16, min(IMAGE_CHUNK, IMAGE_CHUNK_VALUES // int(np.prod(shape))))


def generate_images(rows: int, seed: int = 0, shape: tuple[int, ...] = (8, 8, 1),
                    classes: int = 3, noise: float = 0.3,
                    missing: float = 0.0) -> Iterator[dict[str, np.ndarray]]:
    """Chunks of at most `image_chunk(shape)` images: {"image": float32 [n, H, W, C], "label":
    str objects}.

    Class k is the pattern PATTERNS[k] (its name is the label), drawn with brightness in
    [0.6, 1] on a black background, plus Gaussian pixel noise of std `noise`, clipped to [0, 1].
    Bars span half to all of the image; lines and boxes sit anywhere. `missing` leaves that
    fraction of pixel values missing (NaN). Deterministic for a seed, whatever `rows` is.
    """
    h, w, c = (int(d) for d in shape)
    if not 2 <= classes <= len(PATTERNS):
        raise ValueError(f"synthetic images need 2 to {len(PATTERNS)} classes (one pattern "
                         f"each: {', '.join(PATTERNS)}). Received: classes={classes}")
    if min(h, w) < 4 or c < 1:
        raise ValueError(f"synthetic images need height and width >= 4 and channels >= 1. "
                         f"Received: image={list(shape)}")
    names = np.array(PATTERNS, object)
    rr, cc = np.mgrid[0:h, 0:w]
    rr, cc = rr[None], cc[None]  # [1, H, W], broadcast against per-image [n, 1, 1] parameters
    reach = min(h, w) // 3
    size = image_chunk(shape)
    for chunk, start in enumerate(range(0, rows, size)):
        n = min(size, rows - start)
        g = np.random.default_rng([seed, chunk, h, w, c])

        def draw(f, *args, n=n):  # noqa: ANN001, ANN002, ANN202 - fixed-length draws
            return f(*args, size=size)[:n, None, None]

        k = g.integers(0, classes, size)[:n]
        row, col = draw(g.integers, 0, h), draw(g.integers, 0, w)
        span, at = draw(g.random), draw(g.random)
        off = draw(g.integers, -reach, reach + 1)
        box = draw(g.integers, 3, min(h, w) + 1)
        brightness = draw(g.uniform, 0.6, 1.0).astype(np.float32)
        pixels = g.standard_normal((size, h, w, c), np.float32)[:n] * np.float32(noise)
        # bars: length L in [ceil(side / 2), side], start anywhere it fits
        h_len = (w + 1) // 2 + (span * (w - (w + 1) // 2 + 1)).astype(int)
        h_at = (at * (w - h_len + 1)).astype(int)
        v_len = (h + 1) // 2 + (span * (h - (h + 1) // 2 + 1)).astype(int)
        v_at = (at * (h - v_len + 1)).astype(int)
        b_r = (at * (h - box + 1)).astype(int)
        b_c = (span * (w - box + 1)).astype(int)
        in_box = (rr >= b_r) & (rr < b_r + box) & (cc >= b_c) & (cc < b_c + box)
        edge = (rr == b_r) | (rr == b_r + box - 1) | (cc == b_c) | (cc == b_c + box - 1)
        masks = (
            (rr == row) & (cc >= h_at) & (cc < h_at + h_len),
            (cc == col) & (rr >= v_at) & (rr < v_at + v_len),
            (rr - cc) == off,
            (rr + cc) == (h - 1 + off),
            (rr == row) | (cc == col),
            in_box & edge,
        )
        pattern = np.zeros((n, h, w), bool)
        for j in range(classes):
            sel = k == j
            pattern[sel] = np.broadcast_to(masks[j], (n, h, w))[sel]
        pixels += (pattern * brightness)[..., None]
        np.clip(pixels, 0.0, 1.0, out=pixels)
        flat = pixels.reshape(n, -1)
        if missing:
            flat[g.random((size, flat.shape[1]))[:n] < missing] = np.nan
        out: dict[str, np.ndarray] = {IMAGE_FEATURE: pixels, "label": names[k]}
        yield out
