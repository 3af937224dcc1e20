"""Periodic, atomic training backups that every task can resume from.

A backup is a `tf.train.Checkpoint` of the model, the optimizer (whose `iterations` is the global
step, so the data position follows from it) and a small training-state record (history so far,
the running epoch's totals) kept *inside* the checkpoint, so weights and bookkeeping can never
disagree. `tf.train.CheckpointManager` writes the data files first and then atomically replaces
the `checkpoint` index, so a task killed mid-save leaves the previous backup as the latest.

Under multi-worker mirrored every task must call `save` (saving may run collectives); only the
chief's copy lands in the backup directory, the others write to a private temporary directory
that is removed again (the pattern the TensorFlow multi-worker guide prescribes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


class Backup:
    """Save/restore of model, optimizer and training state in `directory`."""

    def __init__(
        self,
        directory: str | Path,
        is_chief: bool,
        task_name: str,
        max_to_keep: int = 2,
        fingerprint: str = "",
        **trackables: Any,
    ) -> None:
        import tensorflow as tf

        self.fingerprint = fingerprint
        self.directory = Path(directory)
        self.is_chief = is_chief
        self.state = tf.Variable("{}", dtype=tf.string, trainable=False, name="training_state")
        self.checkpoint = tf.train.Checkpoint(state=self.state, **trackables)
        target = (
            self.directory if is_chief else self.directory / f".tmp-{task_name.replace(':', '-')}"
        )
        self._target = target
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(target), max_to_keep=max_to_keep
        )

    def latest(self) -> str | None:
        import tensorflow as tf

        return tf.train.latest_checkpoint(str(self.directory))

    def restore(self) -> dict[str, Any] | None:
        """Restore the chief's latest backup; returns the saved training state (None: none yet).

        A backup written by a different job (another config, model or data: its fingerprint
        differs) is ignored rather than silently continued; the new job starts from scratch.
        """
        import tensorflow as tf

        path = self.latest()
        if path is None:
            return None
        reader = tf.train.load_checkpoint(path)
        key = next((k for k in reader.get_variable_to_shape_map() if k.startswith("state/")), None)
        saved = json.loads(reader.get_tensor(key).decode()) if key else {}
        if saved.get("fingerprint", "") != self.fingerprint:
            return None
        self.checkpoint.restore(path).assert_existing_objects_matched()
        return json.loads(self.state.numpy().decode())

    def save(self, step: int, state: dict[str, Any]) -> str | None:
        """Save at `step` (every task calls this; only the chief's copy is kept)."""
        self.state.assign(json.dumps({**state, "fingerprint": self.fingerprint}))
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:
            shutil.rmtree(self._target, ignore_errors=True)
            return None
        return path
