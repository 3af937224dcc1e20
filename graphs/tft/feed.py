"""Feeding a transform graph one record batch at a time, cheaply.

A preprocessing_fn's graphs (an analyzer phase's, the final transform's) take the raw columns
as tensors. Two costs of feeding them were measured as large as the graphs' own work:

- **String columns.** Converting a numpy array of Python bytes objects to a string tensor runs
  in Python's C API under the GIL, ~20 ns a row, so a second thread cannot overlap it. The
  columns arrive dictionary-encoded (Arrow dictionaries, `tf.unique` when parsed from
  TFRecords), so they are fed as `Codes`, the distinct values and an int32 code per row, and
  the column is rebuilt inside TensorFlow, which releases the GIL: on the 10M-row
  benchmark table (4 numbers, one category) the transform's apply step went from 75 to 62 ms
  per million rows on one thread and to 47 ms on two (from 64 ms with the plain arrays).
  The distinct values themselves cross as one packed buffer and their offsets (`Packed`:
  Arrow's own layout, read from the record batch without a Python object per value), and
  `tf.strings.substr` cuts each row's value out of the buffer at its code's offsets (one
  string made per row, as `tf.gather` made): a column of distinct texts (a text
  preprocessing_fn's input, each row its own value) no longer costs two Python objects a
  row and the GIL held for each.
- **Columns a graph does not read.** An analyzer phase often needs a few columns (the second
  phase of a census-like function only one); the others are fed as zero-row constants
  instead of being converted (`used_inputs` says which are read).

`Feeder` wraps the graph in a `tf.function` that takes the encoded columns, decodes them, and
calls the graph itself (the same concrete function, the one exported for serving): only the
way the values reach it changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Codes:
    """A string column as its distinct values (an object array of bytes) and, per row, the
    int32 index of its value."""

    values: np.ndarray
    codes: np.ndarray

    @classmethod
    def of(cls, column: Any) -> Codes:
        """A plain column (an array of bytes or str objects), each row its own value."""
        values = np.asarray(column, dtype=object)
        return cls(values, np.arange(len(values), dtype=np.int32))

    def decoded(self) -> np.ndarray:
        return self.values[self.codes]

    def packed(self) -> Packed:
        """The same column with its distinct values packed (`Packed`)."""
        vals = [v if isinstance(v, bytes) else str(v).encode() for v in self.values.tolist()]
        lens = np.fromiter(map(len, vals), np.int64, len(vals))
        offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lens)])
        return Packed(b"".join(vals), offsets, self.codes)


@dataclasses.dataclass(frozen=True)
class Packed:
    """A string column as its distinct values packed back to back (`data`; value i is
    `data[offsets[i]:offsets[i + 1]]`, `offsets` int64) and, per row, the int32 index of its
    value: an Arrow binary dictionary's own buffers (pipeline.dataplane.records.reader)."""

    data: bytes
    offsets: np.ndarray
    codes: np.ndarray

    def values(self) -> np.ndarray:
        """The distinct values, an object array of bytes."""
        o = self.offsets.tolist()
        out = np.empty(len(o) - 1, dtype=object)
        out[:] = [self.data[a:b] for a, b in zip(o[:-1], o[1:], strict=True)]
        return out

    def decoded(self) -> np.ndarray:
        return self.values()[self.codes]


def used_inputs(concrete: Any) -> frozenset[str]:
    """The raw features a concrete function reads: the input placeholders its outputs and its
    control outputs (stateful ops that must run) are computed from. TensorFlow prunes every
    other op when it instantiates the function, so the others' values are never looked at."""
    import tensorflow as tf

    specs = tf.nest.flatten(concrete.structured_input_signature)
    by_op = {t.op.name: s.name for t, s in zip(concrete.graph.inputs, specs, strict=False)}
    seen: set[str] = set()
    used: set[str] = set()
    stack = [t.op for t in concrete.outputs] + list(concrete.graph.control_outputs)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.name in by_op:
            used.add(by_op[op.name])
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return frozenset(used)


def empty_input(spec: Any) -> Any:
    """A zero-row value for an input the function does not read (`used_inputs`)."""
    import tensorflow as tf

    return tf.zeros([0, *spec.shape[1:]], spec.dtype)


class Feeder:
    """`fn(raw)` (a graph over the raw features `specs`) called on batches whose string
    columns are `Codes`; only the features in `used` are fed.

    A batch maps each used feature to its values: a numpy array for a number or a tensor
    feature, `Packed` or `Codes` (or a plain array of bytes objects, turned into `Codes`) for
    a string.
    """

    def __init__(self, fn: Callable[[dict[str, Any]], Any], specs: Mapping[str, Any],
                 used: frozenset[str]) -> None:
        import tensorflow as tf

        self.specs, self.used = dict(specs), frozenset(used)
        self.strings = frozenset(n for n in self.used if self.specs[n].dtype == tf.string)
        self.names = sorted(self.used)
        flat: list[Any] = []  # a concrete function of flat tensors: the cheapest call
        for n in self.names:
            flat += ([tf.TensorSpec([], tf.string), tf.TensorSpec([None], tf.int64),
                      tf.TensorSpec([None], tf.int32)]
                     if n in self.strings else [self.specs[n]])
        unread = {n: s for n, s in self.specs.items() if n not in self.used}

        def call(*values: Any) -> Any:
            raw = {n: empty_input(s) for n, s in unread.items()}
            it = iter(values)
            for n in self.names:
                if n in self.strings:  # each row's value cut out of the packed buffer
                    data, offsets, codes = next(it), next(it), next(it)
                    raw[n] = tf.strings.substr(data, tf.gather(offsets, codes),
                                               tf.gather(offsets[1:] - offsets[:-1], codes))
                else:
                    raw[n] = next(it)
            return fn(raw)

        self._call = tf.function(call, input_signature=flat,
                                 autograph=False).get_concrete_function()

    def __call__(self, batch: Mapping[str, Any]) -> Any:
        import tensorflow as tf

        missing = [n for n in self.names if n not in batch]
        if missing:
            raise KeyError(f"the batch lacks raw features {missing}")
        args: list[Any] = []
        for n in self.names:
            v = batch[n]
            if n in self.strings:
                p = v if isinstance(v, Packed) else (
                    v if isinstance(v, Codes) else Codes.of(v)).packed()
                args += [tf.constant(p.data, tf.string), tf.constant(p.offsets, tf.int64),
                         tf.constant(p.codes, tf.int32)]
            else:
                args.append(tf.constant(v, self.specs[n].dtype))
        return self._call(*args)
