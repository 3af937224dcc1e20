"""A consistent copy of a checkpoint's variables, so that its write can run beside training.

A backup written on the training thread stops training for as long as the write takes (the
data files, their index, the `checkpoint` state file; ~4 ms a save for the own-model example,
and ~100 ms for the first, traced one). Written on another thread from the live variables, it
would mix steps: the next chunk updates the variables while the writer reads them. So a save
first copies every variable the checkpoint holds into a shadow variable on the host CPU (one
traced function of assignments, ~0.1-0.3 ms for a small model), and the checkpoint serializes
the shadows in place of the originals. TensorFlow's saver has the hook for this,
`TrackableSaver._object_map` ("to be overridden by a Checkpoint subclass, e.g.
AsyncCheckpoint"); its own async checkpoint (`CheckpointOptions(
experimental_enable_async_checkpoint=True)`) is not used because its copy of a Keras 3 variable
is a second `tf.Variable` made from the first copy's value (`keras...core.Variable.
_copy_trackable_to_cpu`), which a traced copy never refreshes, and because it writes eagerly
(~15-20 ms of Python per save, holding the interpreter lock the training thread needs).

`shadow_plan` refuses (returns None and says why) a checkpoint holding anything that is not a
plain variable (a lookup table, a dataset iterator, a custom `_serialize_to_tensors`), or a
legacy optimizer's slot variables: those are read at write time and a copy cannot be made of
them generically; the backup then writes on the training thread, as before.
"""

from __future__ import annotations

from typing import Any

_SAVE_HOOKS = ("_serialize_to_tensors", "_gather_saveables_for_checkpoint",
               "_copy_trackable_to_cpu")


def _saves_itself(obj: Any) -> bool:
    """Whether `obj`'s class (below TensorFlow's Trackable base) writes tensors of its own."""
    from tensorflow.python.trackable import base

    for cls in type(obj).mro():
        if cls is base.Trackable:
            continue
        if any(h in cls.__dict__ for h in _SAVE_HOOKS):
            return True
    return False


def _storage(obj: Any) -> Any:
    """The `tf.Variable` that holds `obj`'s value (a Keras 3 variable wraps one), or None."""
    import tensorflow as tf

    inner = getattr(obj, "_value", None)  # keras.src.backend.tensorflow.core.Variable
    if isinstance(inner, tf.Variable):
        return inner
    return obj if isinstance(obj, tf.Variable) else None


class ShadowPlan:
    """The variables of one checkpoint and their host copies (made at the first `take`)."""

    def __init__(self, checkpoint: Any, pairs: list[tuple[Any, Any]]) -> None:
        self.checkpoint = checkpoint
        self._pairs = pairs  # (the trackable the checkpoint serializes, its tf.Variable)
        self._shadows: list[Any] = []
        self._copy: Any = None

    def __len__(self) -> int:
        return len(self._pairs)

    def take(self) -> None:
        """Copy every variable into its shadow, all at one point of the training thread's
        program order (the next train step's updates come after it)."""
        if self._copy is None:
            self.install()
        self._copy()

    def trace(self) -> None:
        """Trace the copy now (any thread), so that the first `take` only runs it."""
        if self._copy is None:
            self.install()
        self._copy.get_concrete_function()

    def install(self) -> None:
        """Make the shadows and hand them to the checkpoint's saver (once)."""
        if self._copy is not None:
            return
        import tensorflow as tf
        from tensorflow.python.ops import resource_variable_ops
        from tensorflow.python.util import object_identity

        object_map = object_identity.ObjectIdentityDictionary()
        of_var = object_identity.ObjectIdentityDictionary()  # one shadow per storage variable
        sources = []
        for obj, var in self._pairs:
            if var not in of_var:
                # Not through tf.Variable: a strategy's variable creator (mirrored, ...) must
                # not see it; CPU:0 as TensorFlow's async checkpoint places its copies.
                with tf.device("/cpu:0"):
                    of_var[var] = resource_variable_ops.UninitializedVariable(
                        shape=var.shape, dtype=var.dtype, trainable=False,
                        name=f"shadow_{len(self._shadows)}")
                self._shadows.append(of_var[var])
                sources.append(var)
            object_map[obj] = object_map[var] = of_var[var]

        @tf.function(autograph=False)
        def copy() -> None:
            for var, shadow in zip(sources, self._shadows, strict=True):
                shadow.assign(var.read_value())

        self._copy = copy
        # The saver serializes the shadows in place of the originals, under the originals'
        # names: the files are those of a write from the live variables.
        self.checkpoint._saver._object_map = object_map  # noqa: SLF001 - TF's documented hook


def shadow_plan(checkpoint: Any) -> tuple[ShadowPlan | None, str]:
    """A ShadowPlan for `checkpoint`, or (None, why not)."""
    from tensorflow.python.checkpoint import trackable_view

    pairs: list[tuple[Any, Any]] = []
    for obj in trackable_view.TrackableView(checkpoint).descendants():
        if obj is checkpoint:
            continue
        if "get_slot_names" in dir(obj):  # a tf.keras (v1) optimizer: slots are not children
            return None, f"{type(obj).__name__} keeps slot variables outside the object graph"
        var = _storage(obj)
        if var is not None:
            pairs.append((obj, var))
        elif _saves_itself(obj):
            return None, f"{type(obj).__name__} is saved by its own code, not as variables"
    return ShadowPlan(checkpoint, pairs), ""
