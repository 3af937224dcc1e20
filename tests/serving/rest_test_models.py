"""The model the ported JSON tests run against over HTTP (test_json_tensor_server.py).

One TF2 SavedModel whose signatures make json_tensor_test.cc's cases observable from
outside: what a request's JSON became is echoed back, and outputs of the kinds upstream
writes (or refuses to write) are produced on demand.

- `serving_default`: inputs `int_tensor` (int32), `str_tensor` (string), `float_tensor`
  (float), `dbl_tensor` (double), any shape; each output is its input (same name).
- `echo_string`: `x` (string, any shape) -> `y` and `y_bytes` (the same strings).
- `complex`: `x` (float [None]) -> `c` (complex64): a dtype JSON cannot carry.
- `scalar`: `x` (float [None]) -> `s` = sum(x), no batch dimension.
- `six_digits`: `x` (float [None]) -> `float_tensor`: upstream's six-digit tensor
  [[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]] for every row of x.
- `half`: `x` (half [None]) -> `y`: an input dtype JSON cannot be converted to.
- `to_number`: `x` (string [None]) -> `y` = tf.strings.to_number(x): a conversion that
  fails inside TensorFlow, in the batch, for a string that is not a number.

`python rest_test_models.py OUT` exports it to OUT/1 and prints OUT.
"""

from __future__ import annotations

import os
import sys


def export(base: str) -> str:
    import tensorflow as tf

    any_shape = {"int_tensor": tf.int32, "str_tensor": tf.string, "float_tensor": tf.float32,
                 "dbl_tensor": tf.float64}
    floats = tf.TensorSpec([None], tf.float32, name="x")

    class Echo(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec(None, d, name=k)
                                      for k, d in any_shape.items()])
        def echo(self, int_tensor, str_tensor, float_tensor, dbl_tensor):
            return {"int_tensor": tf.identity(int_tensor), "str_tensor": tf.identity(str_tensor),
                    "float_tensor": tf.identity(float_tensor),
                    "dbl_tensor": tf.identity(dbl_tensor)}

        @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="x")])
        def echo_string(self, x):
            return {"y": tf.identity(x), "y_bytes": tf.identity(x)}

        @tf.function(input_signature=[floats])
        def complex(self, x):
            return {"c": tf.complex(x, x)}

        @tf.function(input_signature=[floats])
        def scalar(self, x):
            return {"s": tf.reduce_sum(x)}

        @tf.function(input_signature=[floats])
        def six_digits(self, x):
            table = tf.constant([[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]],
                                tf.float32)
            return {"float_tensor": tf.tile(table[None], [tf.shape(x)[0], 1, 1])}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float16, name="x")])
        def half(self, x):
            return {"y": x * 2}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="x")])
        def to_number(self, x):
            return {"y": tf.strings.to_number(x)}

    m = Echo()
    tf.saved_model.save(m, os.path.join(base, "1"), signatures={
        "serving_default": m.echo, "echo_string": m.echo_string, "complex": m.complex,
        "scalar": m.scalar, "six_digits": m.six_digits, "half": m.half,
        "to_number": m.to_number})
    return base


def export_in_subprocess(out: str) -> str:
    """Exports to `out` from a fresh process (the test process' TensorFlow untouched)."""
    import subprocess

    done = subprocess.run([sys.executable, __file__, out], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return out


if __name__ == "__main__":
    print(export(sys.argv[1]))
