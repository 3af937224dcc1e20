"""The training split held in host memory and addressed by row index, for `balance: auto`.

Under `balance: auto` every worker trains on a different slice of one global batch, and the
slices move as measured speeds change (strategies.balance), so no worker can be given a fixed
shard of the rows. Streaming the whole global batch through tf.data on every worker and
slicing it in the step (the path this replaces when the split fits) made each worker read,
shuffle and copy every row of every batch: on rows of 12 KB (32x32x3 images) that was ~67 ms
of a ~390 ms step, on the slowed worker as on the fast one, which balancing cannot win back.

Here each worker loads the split once (what `cache: true` already held in memory on every
worker under `balance: auto`), every worker draws the same stream of global batches of row
*indices* (a seeded permutation per epoch, batches running across epoch ends, as the
streaming `repeat()` path does), and the step gathers only its own rows `idx[lo:hi]`. The
per-step input work is then one gather of the worker's own rows.

The table is loaded lazily, on the first call that needs it, so the load happens where the
streaming path filled its cache: inside the trainer's timed loop.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

# The table is used when the split takes at most this share of the memory available at the
# start (every task of a local cluster holds its own copy).
MEMORY_SHARE = 0.25
_FALLBACK_AVAILABLE = 2 << 30  # when /proc/meminfo cannot be read


def row_bytes(feature_spec: Any) -> int:
    """Bytes one row takes in the table: 4 per float32/int32 value, 8 per int64 (the label)."""
    size = 0
    for f in feature_spec.features:
        values = f.size if getattr(f, "shape", ()) else 1
        size += values * (8 if f.dtype == "int64" else 4)
    return size + 8


def available_memory(root: Path = Path("/")) -> int:
    """Memory this process may still take, in bytes: MemAvailable from /proc/meminfo, cut to
    what the cgroup's limit leaves (a Kubernetes `limits.memory`: a pod sees the node's
    MemAvailable but is killed at its own limit). A fixed 2 GiB where neither can be read."""
    avail = None
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:  # not Linux
        avail = None
    left = _cgroup_headroom(root / "sys/fs/cgroup")
    known = [x for x in (avail, left) if x is not None]
    return min(known) if known else _FALLBACK_AVAILABLE


def _cgroup_headroom(cgroup: Path) -> int | None:
    """The cgroup's memory limit less its usage (v2 `memory.max` / `memory.current`, else v1
    `memory.limit_in_bytes` / `memory.usage_in_bytes`); None without a limit."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = (cgroup / limit_file).read_text().strip()
            usage = int((cgroup / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None  # no limit ("max" in v2, a huge number in v1)
        return max(0, int(limit) - usage)
    return None


def fits(num_rows: int, feature_spec: Any, available: int | None = None) -> bool:
    """Whether a split of `num_rows` rows fits the table's memory share. A split with a
    ragged, sparse or string feature is streamed instead: the table gathers fixed-size rows."""
    if any(not getattr(f, "dense", True) or f.dtype == "string" for f in feature_spec.features):
        return False
    available = available_memory() if available is None else available
    return 0 < num_rows * row_bytes(feature_spec) <= MEMORY_SHARE * available


class RowTable:
    """Rows of one split as `{feature: Tensor[N, ...]}` and `labels: Tensor[N]`, loaded once.

    Args:
        load_dataset: a zero-argument callable returning a finite, unshuffled `tf.data.Dataset`
            of `(features, labels)` batches covering the split once.
    """

    def __init__(self, load_dataset: Any) -> None:
        self._load_dataset = load_dataset
        self._lock = threading.Lock()
        self._rows: tuple[dict[str, Any], Any] | None = None

    def rows(self) -> tuple[dict[str, Any], Any]:
        """(features, labels) of the whole split, loading it on the first call."""
        with self._lock:
            if self._rows is None:
                self._rows = self._load()
            return self._rows

    def _load(self) -> tuple[dict[str, Any], Any]:
        import tensorflow as tf

        parts: dict[str, list[Any]] = {}
        labels: list[Any] = []
        # Eagerly even when first asked while a step is traced (the table is then captured);
        # the batches are concatenated as tensors, one copy of the split.
        with tf.init_scope(), tf.device("/cpu:0"):
            for features, label in self._load_dataset():
                for k, v in features.items():
                    parts.setdefault(k, []).append(v)
                labels.append(label)
            if not labels:
                raise ValueError("the training split has no rows")
            table = {k: tf.concat(v, 0) for k, v in parts.items()}
            return table, tf.concat(labels, 0)

    @property
    def num_rows(self) -> int:
        return int(self.rows()[1].shape[0])

    def index_stream(self, global_batch: int, seed: int, skip: int = 0) -> Any:
        """An endless dataset of `int32[global_batch]` row indices, the same on every task.

        Epoch `e` visits the rows in the stateless permutation seeded by `(seed, e)`; batches
        run across epoch ends. `skip` drops that many batches first (a resumed task).
        """
        import tensorflow as tf

        n = self.num_rows
        seed = int(seed) % (2**31)

        def permutation(epoch: Any) -> Any:
            return tf.random.experimental.stateless_shuffle(
                tf.range(n, dtype=tf.int32), seed=tf.stack([tf.constant(seed, tf.int64), epoch]))

        ds = tf.data.Dataset.counter().map(permutation).rebatch(global_batch, drop_remainder=True)
        return ds.skip(skip) if skip else ds

    def take(self, indices: Any, lo: Any, hi: Any) -> tuple[dict[str, Any], Any]:
        """This replica's rows of a global batch of indices: rows `indices[lo:hi]`, gathered."""
        import tensorflow as tf

        features, labels = self.rows()
        mine = indices[lo:hi]
        return {k: tf.gather(v, mine) for k, v in features.items()}, tf.gather(labels, mine)
