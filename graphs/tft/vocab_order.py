"""A vocabulary's data side: counts merged across batches, then ordered, pruned and written.

The rules are tf.Transform's (beam/analyzer_impls.py: `_ApplyThresholdsAndTopK`,
`_OrderElementsFn`, `_VocabularyOrderAndWriteImpl`; the mutual information of
`_calculate_mutual_information_for_feature_value` and info_theory.py), in numpy:

- a token's value is its count; with `weights`, its summed weight; with `labels`, its
  (adjusted) mutual information with the label, its weighted count kept as its frequency;
- `frequency_threshold` keeps values >= it (with labels: mutual information >= it), then
  `top_k` keeps the largest; `key_fn` adds a coverage arm (the `coverage_top_k` largest per
  key), without duplicates;
- the order is value descending, then token bytes descending; `fingerprint_shuffle` orders by
  the SHA-1 of the token instead; `reserved_tokens` come first (and are removed from the rest);
- an empty vocabulary holds one placeholder token (count 1);
- for text files, tokens that are empty or hold a newline or carriage return are left out
  (a line could not hold them); TFRecord files keep them.

A file line is the token, or `"<value> <token>"` with `store_frequency` (reserved tokens: -1).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

EMPTY_STRING_TOKEN = b"49d0cd50-04bb-48c0-bc6f-5b575dce351a"  # tf.Transform's, for no tokens
EMPTY_INT_TOKEN = b"-1"
SENTINEL = b"global_y_count_sentinel"  # tf.Transform's: the label distribution's entry
ORDERINGS = ("frequency", "weighted", "mi", "weighted_mi")


def accumulate(params: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> dict[bytes, Any]:
    """One batch's entries: token -> count (frequency), summed weight (weighted), or
    [count, summed weight, summed weight per label] (mutual information)."""
    ordering = params["ordering"]
    listed = np.asarray(arrays[0]).reshape(-1).tolist()
    tokens = listed if all(type(t) is bytes for t in listed) else [_bytes(t) for t in listed]
    keep = _keeper(params)
    if ordering in ("frequency", "weighted"):
        vals = np.asarray(arrays[1]).reshape(-1).tolist()
        if len(set(tokens)) == len(tokens):  # the phase graph's distinct tokens: no sums
            out: dict[bytes, Any] = dict(zip(tokens, vals, strict=True))
            if params.get("filter_newlines") and _any_unwritable(tokens):
                out = {t: v for t, v in out.items() if keep(t)}
            return out
        out = {}
        for t, v in zip(tokens, vals, strict=True):
            if keep(t):
                out[t] = out.get(t, 0) + v
        return out
    if ordering == "mi":
        positives, counts = np.asarray(arrays[1], np.float64), np.asarray(arrays[2])
        weights = counts.astype(np.float64)
    else:
        weights, positives, counts = (np.asarray(arrays[1], np.float64),
                                      np.asarray(arrays[2], np.float64), np.asarray(arrays[3]))
    return {t: [int(counts[i]), float(weights[i]), positives[i]]
            for i, t in enumerate(tokens) if t == SENTINEL or keep(t)}


def merge(a: dict[bytes, Any], b: dict[bytes, Any]) -> dict[bytes, Any]:
    if len(a) < len(b):
        a, b = b, a
    out = dict(a)
    for t, v in b.items():
        if t not in out:
            out[t] = v
        elif isinstance(v, list):
            c, w, p = out[t]
            q = v[2]
            n = max(len(p), len(q))
            out[t] = [c + v[0], w + v[1], np.pad(p, (0, n - len(p))) + np.pad(q, (0, n - len(q)))]
        else:
            out[t] = out[t] + v
    return out


def finalize(params: Mapping[str, Any], acc: dict[bytes, Any] | None) -> list[Any]:
    """[tokens (object array of bytes, in file order), values (object array: each token's
    count, weight or information; -1 for a reserved token)]."""
    entries = _scored(params, acc or {})  # (value, frequency, token)
    info_threshold = params.get("informativeness_threshold")
    freq_threshold = params.get("frequency_threshold") or 0

    def arm(threshold: float, info: float | None, top_k: int | None,
            key_fn: Any = None) -> list[tuple[Any, bytes]]:
        kept = [(v, t) for v, f, t in entries
                if f >= threshold and (info is None or v >= info)]
        kept.sort(key=lambda vt: (vt[0], vt[1]), reverse=True)
        if top_k is None:
            return kept
        if key_fn is None:
            return kept[: int(top_k)]
        per: dict[Any, list[tuple[Any, bytes]]] = {}
        for vt in kept:
            per.setdefault(key_fn(vt[1]), []).append(vt)
        return [vt for group in per.values() for vt in group[: int(top_k)]]

    chosen = arm(freq_threshold, info_threshold, params.get("top_k"))
    if params.get("top_k") is not None and not chosen:
        chosen = [(1, _empty_token(params))]
    if params.get("key_fn") is not None:
        cov = arm(params.get("coverage_frequency_threshold") or 0,
                  params.get("coverage_informativeness_threshold"),
                  params.get("coverage_top_k"), params["key_fn"])
        chosen = list(dict.fromkeys(chosen + cov))  # duplicates (same value and token) out
    if params.get("fingerprint_shuffle"):
        chosen.sort(key=lambda vt: hashlib.sha1(vt[1]).digest())
    else:
        chosen.sort(key=lambda vt: (vt[0], vt[1]), reverse=True)
    reserved = [_bytes(t) for t in params.get("reserved_tokens") or ()]
    if reserved:
        taken = set(reserved)
        chosen = [(-1, t) for t in reserved] + [vt for vt in chosen if vt[1] not in taken]
    if not chosen:
        chosen = [(1, _empty_token(params))]
    tokens = np.empty(len(chosen), dtype=object)
    values = np.empty(len(chosen), dtype=object)
    for i, (v, t) in enumerate(chosen):
        tokens[i], values[i] = t, v
    return [tokens, values]


def lines(params: Mapping[str, Any], tokens: Sequence[bytes], values: Sequence[Any]) -> list[bytes]:
    """The file's lines (records): the tokens, or `<value> <token>` with store_frequency."""
    if not params.get("store_frequency"):
        return list(tokens)
    return [f"{v} ".encode() + t for v, t in zip(values, tokens, strict=True)]


def write(path: Path, params: Mapping[str, Any], tokens: Sequence[bytes],
          values: Sequence[Any]) -> None:
    """The vocabulary file: text lines, or (file_format "tfrecord_gzip") a GZIP TFRecord file
    of one record per entry, as tf.Transform writes them."""
    rows = lines(params, tokens, values)
    if params.get("file_format", "text") == "text":
        path.write_bytes(b"".join(r + b"\n" for r in rows))
        return
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for r in rows:
            writer.write(r)


def _keeper(params: Mapping[str, Any]) -> Any:
    if not params.get("filter_newlines"):
        return lambda t: True
    return lambda t: bool(t) and b"\n" not in t and b"\r" not in t


def _any_unwritable(tokens: Sequence[bytes]) -> bool:
    """Whether any token is one a text file's line cannot hold (`_keeper`), checked on the
    tokens joined (C speed; a batch holds tens of thousands of distinct tokens) rather than
    one Python call per token."""
    joined = b"\x00".join(tokens)
    return b"" in tokens or b"\n" in joined or b"\r" in joined


def _empty_token(params: Mapping[str, Any]) -> bytes:
    return EMPTY_INT_TOKEN if params.get("integer") else EMPTY_STRING_TOKEN


def _bytes(t: Any) -> bytes:
    if isinstance(t, bytes):
        return t
    if isinstance(t, np.bytes_):
        return bytes(t)
    return str(t).encode()


def _scored(params: Mapping[str, Any], acc: dict[bytes, Any]) -> list[tuple[Any, Any, bytes]]:
    """(value, frequency, token) of every token: the value is what orders and `top_k` keeps."""
    ordering = params["ordering"]
    if ordering in ("frequency", "weighted"):
        return [(v, v, t) for t, v in acc.items()]
    glob = acc.get(SENTINEL)
    out = []
    n = 0.0 if glob is None else glob[1]
    label_counts = np.zeros(0) if glob is None else glob[2]
    min_diff = params.get("min_diff_from_avg")
    if min_diff is None:
        min_diff = recommended_min_diff_from_avg(n)
    for t, (_count, weight, positives) in acc.items():
        if t == SENTINEL:
            continue
        mi = mutual_information(weight, positives, n, label_counts, t,
                                bool(params.get("use_adjusted_mutual_info")), float(min_diff))
        out.append((mi, weight, t))
    return out


def recommended_min_diff_from_avg(dataset_size: float) -> int:
    """tf.Transform's `calculate_recommended_min_diff_from_avg`: 2 for 10k records or fewer,
    25 from 1M, linear in between."""
    lo, hi, small, large = 2, 25, 10_000, 1_000_000
    return int(min(hi, max(lo, (dataset_size - small) / (large - small) * (hi - lo) + lo)))


def mutual_information(x_i: float, positives: np.ndarray, n: float, label_counts: np.ndarray,
                       token: bytes, adjusted: bool, min_diff: float) -> float:
    """The (adjusted) mutual information of one token with the label, unnormalised: the sum
    over labels of n_ij * log2(n * n_ij / (x_i * y_j)), n_ij the token's (clipped) weighted
    co-occurrence; adjusted subtracts its expectation under independence."""
    if n == 0:
        return float("nan")
    if round(x_i) == round(n):
        return 0.0
    if round(x_i) > round(n):
        raise ValueError(f"Frequency of token {token!r} higher than number of records {x_i} > "
                         f"{n}. This likely means you have provided tft.vocabulary with input "
                         "that has repeated tokens per row, rather than a set representation.")
    mi = emi = 0.0
    for j, y_j in enumerate(label_counts.tolist()):
        if y_j == 0:
            continue
        share = positives[j] / x_i if j < len(positives) and x_i else 0.0
        n_ij = min(max(share, 1e-6), 1 - 1e-6) * x_i
        if abs(x_i * y_j / n - n_ij) < min_diff:
            continue
        mi += _partial_mi(n_ij, x_i, y_j, n)
        if adjusted:
            emi += _partial_emi(n, x_i, y_j)
    return mi - emi if adjusted else mi


def _partial_mi(n_ij: float, x_i: float, y_j: float, n: float) -> float:
    if n_ij == 0 or x_i == 0 or y_j == 0:
        return 0.0
    return n_ij * ((math.log2(n_ij) + math.log2(n)) - (math.log2(x_i) + math.log2(y_j)))


def _partial_emi(n: float, x_i: float, y_j: float) -> float:
    """The expected mutual information of one (token, label) cell under the hypergeometric
    distribution of its co-occurrence count (Vinh, Epps and Bailey, ICML 2009)."""
    if x_i == 0 or y_j == 0:
        return 0.0
    coefficient = -math.log2(x_i) - math.log2(y_j) + math.log2(n)
    start, end = int(round(max(0, x_i + y_j - n))), int(round(min(x_i, y_j)))
    lf = math.lgamma
    numerator = lf(x_i + 1) + lf(y_j + 1) + lf(n - x_i + 1) + lf(n - y_j + 1)
    denominator = (lf(n + 1) + lf(start + 1) + lf(x_i - start + 1) + lf(y_j - start + 1)
                   + lf(n - x_i - y_j + start + 1))
    total = partial = 0.0
    for n_j in range(start, end + 1):
        p = math.exp(numerator - denominator)
        if n_j != 0:
            partial += n_j * (coefficient + math.log2(n_j)) * p
        total += p
        if n_j != end:
            denominator += (math.log(n_j + 1) - math.log(x_i - n_j) - math.log(y_j - n_j)
                            + math.log(n - x_i - y_j + n_j + 1))
    return partial / total
