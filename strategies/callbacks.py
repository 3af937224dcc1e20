"""The training loop's side work as Keras callbacks, and the user's callbacks beside them.

Each side concern of the loop is one small `keras.callbacks.Callback`, as in Keras' own loop:
TensorBoard scalars (`Summaries`), the progress report (`Progress`), the launcher's status file
(`StatusFile`), periodic backups (`Backups`) and fault rehearsal (`InjectFault`). The loops
(strategies/trainer.py, strategies/ps_trainer.py) call one `keras.callbacks.CallbackList` of
them plus the spec's `callbacks:` at every chunk end (`on_train_batch_end`, every
`steps_per_execution` steps, as Keras' `fit` does with `steps_per_execution`) and every epoch
end. Order: summaries, progress, status, the user's, backups, fault: a backup holds what a
user callback changed, and an injected fault fires after the backup of its step.

`logs` at a chunk end hold the chunk's `loss` (and `accuracy`); at an epoch end Keras' names
(`loss`, `accuracy`, `val_loss`, `val_<metric>`) and Baton's history names (`train_loss`,
`eval_loss`, `eval_<metric>`), so `EarlyStopping(monitor="val_loss")` works as in Keras.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras

from baton.graphs import summaries
from baton.graphs.objective_checks import check_arguments
from baton.graphs.user_refs import RefError, import_ref, is_ref
from baton.strategies import faults


@dataclasses.dataclass
class LoopState:
    """What the loop's own callbacks read: the global step and what a backup keeps."""

    step: int
    total: int
    steps_per_epoch: int
    global_batch_size: int
    history: list[dict[str, float]]
    extra: Callable[[], dict[str, Any]] = dict  # more backup state (the loop's epoch totals...)

    @property
    def in_epoch(self) -> int:
        return self.step % self.steps_per_epoch


SUMMARY_EVERY_STEPS = 100  # tf.estimator's save_summary_steps default


class Summaries(keras.callbacks.Callback):
    """TensorBoard scalars: train/* and perf/* at the first chunk end past every
    `every_steps`-th step (when `per_chunk`), and the epoch records at every epoch end.

    Writing the chunk scalars at every chunk end (four eager summary ops per chunk) took ~9% of
    a small model's training time on CPU; every 100 steps, as tf.estimator did, keeps the curves.
    """

    def __init__(self, writer: Any, state: LoopState, per_chunk: bool = True,
                 every_steps: int = SUMMARY_EVERY_STEPS) -> None:
        super().__init__()
        self.writer, self.state, self.per_chunk = writer, state, per_chunk
        self.scalars = summaries.ScalarWriter(writer)
        self.every = max(1, every_steps)
        self._t, self._step = time.perf_counter(), state.step

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self.state.step
        if not self.per_chunk or step // self.every == self._step // self.every:
            return
        self.scalars.write({**{f"train/{k}": v for k, v in (logs or {}).items()},
                            **self._perf(step)}, step)

    def _perf(self, step: int) -> dict[str, float]:
        """Steps and examples per second since the last call (which this one becomes)."""
        now = time.perf_counter()
        rate = (step - self._step) / max(now - self._t, 1e-9)
        self._t, self._step = now, step
        return {"perf/steps_per_sec": rate,
                "perf/examples_per_sec": rate * self.state.global_batch_size}

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        record = self.state.history[-1] if self.state.history else {}
        values = {k.replace("_", "/", 1): v for k, v in record.items()
                  if k not in ("epoch", "step")}
        if not self.per_chunk:
            values.update(self._perf(self.state.step))
        self.scalars.write(values, self.state.step)
        self.writer.flush()


class Progress(keras.callbacks.Callback):
    """`on_progress(step, total, chunk metrics)` at every chunk end (the stage's bar, task lines)."""

    def __init__(self, on_progress: Callable[[int, int, dict[str, float]], None],
                 state: LoopState) -> None:
        super().__init__()
        self.on_progress, self.state = on_progress, state

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.on_progress(self.state.step, self.state.total, dict(logs or {}))


class StatusFile(keras.callbacks.Callback):
    """`{"step": n, "resumed_from": r, "time": t, "first_chunk": [t1, s1]}` written atomically
    when training begins (after the restore: n == r) and at every chunk end; the launcher
    follows the chief's step with it (to fire PS-side faults, time each group size of an
    elastic job, see strategies/elastic.py).

    `time` is the chief's clock at the write and `first_chunk` the clock and step of the first
    chunk end after the restore, so the launcher times a group on the chief's own clock: a group
    that trains for less than two of the launcher's polls (a few chunks of a small model after
    a resize) still has a start and an end to time, where polled points alone had one.
    """

    def __init__(self, path: Path, state: LoopState) -> None:
        super().__init__()
        self.path, self.state = path, state
        self.resumed_from = state.step
        self.first_chunk: tuple[float, int] | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.resumed_from, self.first_chunk = self.state.step, None
        write_status(self.path, self.state.step, self.resumed_from)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        now = time.time()
        if self.first_chunk is None and self.state.step > self.resumed_from:
            self.first_chunk = (now, self.state.step)
        write_status(self.path, self.state.step, self.resumed_from, now, self.first_chunk)


class Backups(keras.callbacks.Callback):
    """A backup every `every` steps inside an epoch and at every epoch end (`save` on demand).

    A backup may be written in the background (strategies.backup); training's end waits for
    the last one, and `flush` waits on demand (before a preemption exit, an injected fault).
    """

    def __init__(self, backup: Any, state: LoopState, every: int = 0) -> None:
        super().__init__()
        self.backup, self.state, self.every = backup, state, every

    def save(self) -> None:
        if self.backup is not None:
            self.backup.save(self.state.step, {"history": self.state.history, **self.state.extra()})

    def flush(self) -> None:
        if self.backup is not None:
            self.backup.flush()

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.backup is not None:
            self.backup.prepare()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.backup is not None:
            self.backup.close()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        s = self.state
        if self.every and s.step % self.every == 0 and s.in_epoch:
            self.save()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.save()


class InjectFault(keras.callbacks.Callback):
    """Fault rehearsal: kill or SIGTERM this task once its step reaches the fault's step.

    It fires once the backup of that step (if any) is on disk (`before`: Backups.flush), so a
    rehearsal resumes where it always did; a real crash during a background write resumes
    from the backup before it. At an epoch's last step it fires at the chunk's end, before
    the epoch's evaluation and its backup: the run resumes from the backup before.
    """

    def __init__(self, fault: faults.Fault, state: LoopState,
                 before: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.fault: faults.Fault | None = fault
        self.state, self.before = state, before

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.fault is not None and self.state.step >= self.fault.step:
            fault, self.fault = self.fault, None  # once
            if self.before is not None:
                self.before()
            faults.fire(fault)


def lend_optimizer(model: Any, optimizer: Any) -> None:
    """Give `model` its optimizer as `model.optimizer` for the loop (None: take it back).

    `model.compile` sets it in `fit`, and Keras callbacks that read or set the learning rate
    through it (ReduceLROnPlateau, LearningRateScheduler) failed without it: Baton's loop does
    not compile. The learning rate they set is the optimizer's variable, which the traced step
    reads and the backup keeps. Taken back before the model is exported, so the SavedModel and
    `model.keras` are as they were."""
    model.optimizer = optimizer


def loop_callbacks(
    model: Any,
    state: LoopState,
    backups: Backups,
    *,
    epochs: int,
    steps: int,
    writer: Any = None,
    per_chunk_summaries: bool = True,
    on_progress: Callable[..., Any] | None = None,
    status_file: Path | None = None,
    user: Sequence[Any] = (),
    fault: Any = None,
) -> Any:
    """The one CallbackList both trainers drive: the loop's side work (summaries, progress,
    the status file), the user's callbacks, backups, then fault injection, in that order.
    What is absent (no writer, not the chief...) is passed as None by the caller."""
    return keras.callbacks.CallbackList(
        [
            *([Summaries(writer, state, per_chunk=per_chunk_summaries,
                         every_steps=SUMMARY_EVERY_STEPS)] if writer is not None else []),
            *([Progress(on_progress, state)] if on_progress else []),
            *([StatusFile(status_file, state)] if status_file else []),
            *user,
            backups,
            *([InjectFault(fault, state, backups.flush)] if fault is not None else []),
        ],
        model=model,
        epochs=epochs,
        steps=steps,
        verbose=0,
    )


def epoch_logs(record: Mapping[str, Any]) -> dict[str, float]:
    """An epoch's history record as callback logs: Baton's names and Keras' (`val_loss`...)."""
    logs: dict[str, float] = {}
    for k, v in record.items():
        if k in ("epoch", "step"):
            continue
        logs[k] = v
        if k.startswith("train_"):
            logs[k[len("train_"):]] = v
        elif k.startswith("eval_"):
            logs["val_" + k[len("eval_"):]] = v
    return logs


# ------------------------------------------------------------------ the user's callbacks
def _keras_callback_names() -> list[str]:
    return sorted(
        n for n in dir(keras.callbacks)
        if isinstance(getattr(keras.callbacks, n), type)
        and issubclass(getattr(keras.callbacks, n), keras.callbacks.Callback)
        and n not in ("Callback", "CallbackList", "History", "ProgbarLogger")
    )


def _callback_class(name: str, search_dir: Path | str | None) -> Any:
    short = name.removeprefix("keras.callbacks.")
    if ":" in name:
        return import_ref(name, search_dir, what="callback")
    if short in _keras_callback_names():
        return getattr(keras.callbacks, short)
    from baton.configs import did_you_mean

    names = _keras_callback_names()
    mean = did_you_mean(short, names, cutoff=0.5)
    raise RefError(
        f"unknown Keras callback {name!r}{mean}; give one of {', '.join(names)}, a class "
        f"'module:Class' with its config, or 'module:function' returning callbacks. "
        f"Received: {name!r}"
    )


def check_callbacks(
    specs: Sequence[Any], search_dir: Path | str | None = None, field: str = "config.callbacks"
) -> list[str]:
    """Problems the spec shows: malformed entries, unknown classes, unimportable modules, and
    the arguments a class (Keras' or `module:Class`) or a factory would refuse, read from its
    signature without calling it. `field` is where the list sits, to name the exact key."""
    problems = []
    for i, spec in enumerate(specs):
        try:
            target, config = _parse(spec, search_dir)
        except RefError as exc:
            problems.append(f"[{i}]: {exc}")
            continue
        problems += [f"[{i}]: {p}" for p in _call_problems(target, config, f"{field}[{i}]", spec)]
    return problems


def _call_problems(target: Any, config: dict[str, Any] | None, where: str, spec: Any) -> list[str]:
    """What calling `target(**config)` (a factory: `target()`) at training time would refuse."""
    if config is None:
        return check_arguments(target, {}, where)
    if issubclass(target, keras.callbacks.TensorBoard) and not _has_tensorboard():
        return [
            "keras.callbacks.TensorBoard needs the `tensorboard` package, which is not installed "
            "(Baton does not install it; it would fail after the first epoch). Baton writes the "
            "TensorBoard scalars itself, to the model's logs/ (train/*, eval/*): drop this "
            f"callback. Received: {where}={spec!r}"
        ]
    return check_arguments(target, config, f"{where}.config")


def _has_tensorboard() -> bool:
    """Whether the `tensorboard` package is importable (found without importing it)."""
    return importlib.util.find_spec("tensorboard") is not None


def _parse(spec: Any, search_dir: Path | str | None) -> tuple[Any, dict[str, Any] | None]:
    """(class or factory, config or None for a factory)."""
    if isinstance(spec, str):
        if is_ref(spec):
            obj = import_ref(spec, search_dir, what="callback")
            if isinstance(obj, type):
                return obj, {}
            if not callable(obj):
                raise RefError(f"callback {spec!r} is not callable. Received: {obj!r}")
            return obj, None
        return _callback_class(spec, search_dir), {}
    if isinstance(spec, Mapping):
        extra = sorted(set(spec) - {"class_name", "config"})
        name = spec.get("class_name")
        config = spec.get("config") or {}
        if extra or not isinstance(name, str) or not isinstance(config, Mapping):
            raise RefError(
                "a callback mapping is {class_name: EarlyStopping, config: {...}}. "
                f"Received: {dict(spec)!r}"
            )
        cls = _callback_class(name, search_dir)
        if not isinstance(cls, type):
            raise RefError(f"callback {name!r} is not a class. Received: {cls!r}")
        return cls, dict(config)
    raise RefError(
        f"a callback is a Keras class name, {{class_name, config}} or 'module:function'. "
        f"Received: {spec!r}"
    )


def make_user_callbacks(specs: Sequence[Any], search_dir: Path | str | None = None) -> list[Any]:
    """The spec's `callbacks:` as Keras Callback objects (a RefError names the bad entry)."""
    out: list[Any] = []
    for i, spec in enumerate(specs):
        target, config = _parse(spec, search_dir)
        try:
            made = target(**config) if config is not None else target()
        except Exception as exc:  # noqa: BLE001 - user arguments: report them
            raise RefError(
                f"callbacks[{i}]: {getattr(target, '__name__', target)} refused its arguments "
                f"{config!r}: {type(exc).__name__}: {exc}"
            ) from None
        made_list = list(made) if isinstance(made, list | tuple) else [made]
        for cb in made_list:
            if not isinstance(cb, keras.callbacks.Callback):
                raise RefError(
                    f"callbacks[{i}] gave {type(cb).__name__}, not a keras.callbacks.Callback. "
                    f"Received: {spec!r}"
                )
        out.extend(made_list)
    return out


def write_status(path: Path, step: int, resumed_from: int | None = None,
                 now: float | None = None, first_chunk: tuple[float, int] | None = None) -> None:
    tmp = path.with_suffix(".tmp")
    data: dict[str, Any] = {"step": step, "time": time.time() if now is None else now}
    if resumed_from is not None:
        data["resumed_from"] = resumed_from
    if first_chunk is not None:
        data["first_chunk"] = list(first_chunk)
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
