"""Periodic, atomic training backups that every task can resume from.

A backup is a `tf.train.Checkpoint` of the model, the optimizer (whose `iterations` is the global
step, so the data position follows from it) and a small training-state record (history so far,
the running epoch's totals) kept *inside* the checkpoint, so weights and bookkeeping can never
disagree. `tf.train.CheckpointManager` writes the data files first and then atomically replaces
the `checkpoint` index, so a task killed mid-save leaves the previous backup as the latest.

Under multi-worker mirrored every task must call `save` (saving may run collectives); only the
chief's copy lands in the backup directory, the others write to a private temporary directory
that is removed again (the pattern the TensorFlow multi-worker guide prescribes).

Writing: `tf.train.Checkpoint.write` first writes the data files and their index under a
temporary name and renames them (TensorFlow's SaveV2 + MergeV2Checkpoints), then the `checkpoint`
state file is replaced atomically (`update_checkpoint_state`), and only then are the backups
beyond `max_to_keep` deleted: a task killed at any point leaves a complete latest backup. An eager
write walks the object graph in Python on every call; a write traced once into a `tf.function`
does not. Measured in the own-model bench loop (bench/training, 2 cores): eager 15-20 ms a save
(the first ~40 ms), the trace ~100 ms once (~200 ms as the process's first trace), traced 5 ms a
save, so tracing pays from about `TRACE_PAYS_FROM` saves on. The trainer tells the backup how many
saves its plan makes (`planned_saves`): a job that will save at least that often traces at its
first save, a shorter one never does. Without a plan (the parameter-server driver), the write is
traced once `TRACE_PAYS_FROM` saves were eager.

On a run directory on an object store the backup directory mirrors a bucket prefix: the chief
uploads each backup after it is written, the `checkpoint` state file last, and every task
stages the latest one before restoring (strategies.backup_sync).

In the background (`background`, the chief of a one-process job): `save` copies the variables
into host shadows on the calling thread and the write above runs on the backup's own thread
(strategies.snapshot); `flush` waits for it, and the next `save` waits for the previous write.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

TRACE_PAYS_FROM = 10  # saves from which tracing the write costs less than writing eagerly
PREFIX = "ckpt"  # as tf.train.CheckpointManager names them: ckpt-<step>.index, ckpt-<step>.data-*


class Backup:
    """Save/restore of model, optimizer and training state in `directory`."""

    def __init__(
        self,
        directory: str | Path,
        is_chief: bool,
        task_name: str,
        max_to_keep: int = 2,
        fingerprint: str = "",
        planned_saves: int | None = None,
        background: bool = False,
        **trackables: Any,
    ) -> None:
        import tensorflow as tf

        self.fingerprint = fingerprint
        self.directory = Path(directory)
        self.is_chief = is_chief
        self.state = tf.Variable("{}", dtype=tf.string, trainable=False, name="training_state")
        self.checkpoint = tf.train.Checkpoint(state=self.state, **trackables)
        _ = self.checkpoint.save_counter  # created now, so every backup holds it (as save() did)
        target = (
            self.directory if is_chief else self.directory / f".tmp-{task_name.replace(':', '-')}"
        )
        self._target = target
        self.max_to_keep = max_to_keep
        self._saves = 0
        self._traced_write: Any = None
        self.planned_saves = planned_saves  # None: unknown (trace after TRACE_PAYS_FROM)
        self._plan: Any = None  # strategies.snapshot.ShadowPlan, made at the first save
        self._pool: Any = None
        self._pending: Any = None  # the background write in flight (a Future)
        self.background = background and is_chief
        self.refused = ""  # why the background write was refused (checked at the first save)

    def latest(self) -> str | None:
        import tensorflow as tf

        self.flush()
        return tf.train.latest_checkpoint(str(self.directory))

    def restore(self) -> dict[str, Any] | None:
        """Restore the chief's latest backup; returns the saved training state (None: none yet).

        A backup written by a different job (another config, model or data: its fingerprint
        differs) is ignored rather than silently continued; the new job starts from scratch.
        """
        import tensorflow as tf

        from baton.strategies import backup_sync

        backup_sync.pull(self.directory)  # a directory mirroring a bucket: its latest backup
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
        """Save at `step` (every task calls this; only the chief's copy is kept).

        In the background (`background`, chief only): the variables are copied now and the
        write runs on the backup's own thread; the previous background write is waited for
        first. The backup is the latest once its files and the `checkpoint` state file are
        written; `flush()` waits for that.
        """
        self.prepare()
        self.flush()  # a background write reads the shadows: the next copy waits for it
        self.state.assign(json.dumps({**state, "fingerprint": self.fingerprint}))
        prefix = str(self._target / f"{PREFIX}-{step}")
        if not self.background:
            return self._save(prefix)
        self._plan.take()
        self._pending = self._pool.submit(self._save, prefix)
        return prefix

    def prepare(self) -> None:
        """Set up the background write before the first save: the shadow variables, and on
        the backup's thread the traces of the copy and (when `traces()`) of the write, so
        the one-off tracing (~100-150 ms) overlaps training instead of stopping it. A no-op
        unless `background`, and after the first call."""
        if not self.background or self._plan is not None:
            return
        import concurrent.futures

        from baton.strategies.snapshot import shadow_plan

        self._plan, self.refused = shadow_plan(self.checkpoint)
        if self._plan is None:
            self.background = False
            return
        self._plan.install()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "baton-backup")
        self._pending = self._pool.submit(self._warm_up)

    def _warm_up(self) -> None:
        import tensorflow as tf

        self._plan.trace()
        if self.traces():
            self._traced().get_concrete_function(tf.TensorSpec([], tf.string))

    def flush(self) -> None:
        """Wait for the background write in flight; raise what it raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self, quiet: bool = False) -> None:
        """Flush, and stop the background thread (`quiet`: a failed write is not raised, as
        when another error is already on its way up)."""
        try:
            self.flush()
        except Exception:
            if not quiet:
                raise
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    def _save(self, prefix: str) -> str | None:
        """Write `prefix`, make it the latest, drop the older ones (the chief's copy)."""
        from tensorflow.python.checkpoint import checkpoint_management

        self._target.mkdir(parents=True, exist_ok=True)
        self._write(prefix)
        self._saves += 1
        if not self.is_chief:
            shutil.rmtree(self._target, ignore_errors=True)
            return None
        recorded = checkpoint_management.get_checkpoint_state(str(self._target))
        older = [Path(p).name for p in (recorded.all_model_checkpoint_paths if recorded else [])
                 if Path(p).name != Path(prefix).name]
        kept = [*older[len(older) - self.max_to_keep + 1:], Path(prefix).name] \
            if self.max_to_keep > 1 else [Path(prefix).name]
        # names relative to the directory (as CheckpointManager writes them): a moved or
        # remounted backup directory still resolves
        checkpoint_management.update_checkpoint_state_internal(  # what the manager calls
            str(self._target), kept[-1], all_model_checkpoint_paths=kept,
            save_relative_paths=True,
        )
        for name in set(self._existing()) - set(kept):  # older ones, and a killed save's files
            for f in self._target.glob(name + ".*"):
                f.unlink(missing_ok=True)
        from baton.strategies import backup_sync

        backup_sync.push(self._target, kept)  # to the bucket, when the directory mirrors one
        return prefix

    def _write(self, prefix: str) -> None:
        import tensorflow as tf

        if not self.traces():
            self.checkpoint.write(prefix)
            return
        self._traced()(tf.constant(prefix))

    def _traced(self) -> Any:
        import tensorflow as tf

        if self._traced_write is None:
            self._traced_write = tf.function(lambda p: self.checkpoint.write(p))
        return self._traced_write

    def traces(self) -> bool:
        """Whether the next write runs traced (see the module docstring)."""
        if self.planned_saves is not None:
            return self.planned_saves >= TRACE_PAYS_FROM
        return self._saves >= TRACE_PAYS_FROM

    def _existing(self) -> list[str]:
        """The backup names on disk in this task's directory, oldest first (by step)."""
        steps = sorted(
            int(m.group(1))
            for f in self._target.glob(f"{PREFIX}-*.index")
            if (m := re.fullmatch(rf"{PREFIX}-(\d+)\.index", f.name))
        )
        return [f"{PREFIX}-{n}" for n in steps]
