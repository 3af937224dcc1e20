"""The job every training task runs, and the data it reads.

A `TrainJob` is the train stage's settings as they are plus what the run resolved around them;
it is one JSON file (the job file each task of a local cluster is handed, and the same thing
in-process), so the local launcher, `baton task` on a TFJob pod and the in-process train stage
all run exactly the same job (strategies/task.py runs it). Here too: the job's datasets (the
train stream as each strategy and balance mode reads it, the eval split, the row count).
Nothing here reads the environment.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from baton.strategies.factory import ONE_DEVICE
from baton.strategies.settings import TrainSettings

# The `model` artifact `write_model_artifact` writes (the train stage's output).
MODEL_FILE = "model.keras"
HISTORY_FILE = "history.json"
TRAIN_INFO_FILE = "train_info.json"
# the settings that pick the topology (the job carries what they resolved to): not part of what
# shapes the weights (`TrainJob.fingerprint`)
TOPOLOGY_SETTINGS = ("strategy", "workers", "max_workers", "objective", "probe_steps", "ps",
                     "min_workers", "max_restarts", "balance")


@dataclasses.dataclass(frozen=True)
class TrainJob:
    """Everything a task needs to train: the stage's settings as they are, and what the run
    resolved around them (the data, the resolved strategy and balance, the user code's place).

    Plain JSON-able values only besides `settings`, which travels as its own `to_dict` and is
    read back with the same typed checks as the spec (`from_json`).
    """

    feature_spec: dict[str, Any]
    settings: TrainSettings = dataclasses.field(default_factory=TrainSettings)
    transformed_dir: str = ""  # empty: synthetic data of `synthetic_examples` rows
    synthetic_examples: int = 0
    num_train_examples: int = 0  # counted once by the launcher so every task agrees
    # Where the user's modules are imported from (the spec's directory; on a TFJob pod the
    # mounted ConfigMap beside the spec), and a digest of their source: references travel as
    # strings and every task imports the files itself, nothing is pickled.
    code_dir: str = ""
    code_hash: str = ""
    # the strategy the topology resolved to (`settings.strategy` may leave it to flags/cluster)
    strategy: str = ONE_DEVICE
    # the resolved balance: "auto": per-replica batches follow measured speed
    # (strategies.balance); "off": equal
    balance: str = "off"
    # The group may shrink or grow mid-run (`min_workers`, strategies.elastic). With balance
    # off, every worker then reads the global batches of one stream and keeps its replicas'
    # equal slices, so a step's examples do not depend on how many workers there are (sharded
    # per worker, a resize changed them).
    elastic: bool = False
    # Content hash of the inputs (set by the train stage). When set, the backup fingerprint uses
    # it instead of `transformed_dir`, so a rerun whose inputs sit in another run directory (the
    # same bytes) still resumes the interrupted run's backup.
    data_hash: str = ""
    # A topology probe (strategies.probe) when > 0: one warm-up chunk of `steps_per_execution`
    # steps, then this many timed steps (the trainer's `info["window"]`), no evaluation; the
    # task reports its window instead of writing a model.
    probe_steps: int = 0

    def __post_init__(self) -> None:
        if self.probe_steps < 0:
            raise ValueError(f"probe_steps must be >= 0. Received: probe_steps={self.probe_steps}")
        if self.balance not in ("auto", "off"):
            raise ValueError(f"balance must be 'auto' or 'off'. Received: balance={self.balance!r}")

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**data, "settings": self.settings.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainJob:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown train job field(s) {unknown}. Received keys: {sorted(data)}")
        return cls(**{**data, "settings": TrainSettings.from_dict(data.get("settings") or {})})

    def fingerprint(self) -> str:
        """A digest of everything that shapes the weights (other jobs' backups are not resumed).

        The settings that choose the topology do not: the job carries the strategy they
        resolved to, and a group that shrinks or grows (`min_workers`) resumes its backup."""
        import hashlib

        data = self.to_dict()
        for name in TOPOLOGY_SETTINGS:
            del data["settings"][name]
        if self.data_hash:
            del data["transformed_dir"]  # where the bytes are does not shape the weights
        del data["code_dir"]  # where the code is does not either; what it says does (code_hash)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def spec(self) -> Any:
        from baton.graphs.feature_spec import FeatureSpec

        return FeatureSpec.from_dict(self.feature_spec)

    def data(self) -> Any:
        """The job's data as the graph side reads it (graphs.training_data.TrainingData)."""
        from baton.graphs.training_data import TrainingData

        return TrainingData(self.feature_spec, self.transformed_dir, self.synthetic_examples,
                            self.settings.cache)

    def steps_per_epoch(self) -> int:
        n = self.num_train_examples or self.synthetic_examples
        if n < self.settings.batch_size:
            raise ValueError(
                f"batch_size must not exceed the training examples ({n}). "
                f"Received: batch_size={self.settings.batch_size}"
            )
        return n // self.settings.batch_size

    def total_steps(self) -> int:
        """The steps training runs: `steps`, or every step of `epochs` epochs."""
        return self.settings.steps or self.settings.epochs * self.steps_per_epoch()

    def planned_epochs(self) -> int:
        """Epochs the training spans (the last one partial when `steps` ends inside it)."""
        return -(-self.settings.steps // self.steps_per_epoch()) if self.settings.steps else self.settings.epochs



def count_examples(job: TrainJob, split: str = "train") -> int:
    """Rows in a split of the transformed data (one pass; done once, before tasks start)."""
    return job.data().count(split)


def counted(job: TrainJob) -> TrainJob:
    """`job` with its training rows counted (once, before any task starts); a batch larger than
    the split is refused (StageError)."""
    from baton.errors import StageError

    n = count_examples(job)
    if n < job.settings.batch_size:
        raise StageError(
            f"batch_size must not exceed the {n} training examples. "
            f"Received: batch_size={job.settings.batch_size}"
        )
    return dataclasses.replace(job, num_train_examples=n)


def with_example_count(job: TrainJob) -> TrainJob:
    """`job` with `num_train_examples` filled in, counting the rows if nobody has yet.

    The local launcher counts once, in its own process, before any task starts. A TFJob replica
    (`baton task SPEC --run-dir DIR`) cannot count at its edge: counting runs tf.data ops, which
    initialise TensorFlow's eager context, and a multi-worker strategy must configure collective
    ops before that ("Collective ops must be configured at program startup"). `run_task`
    therefore calls this after the strategy exists; every replica reads the same files, so all
    of them get the same count.
    """
    if job.num_train_examples or not job.transformed_dir:
        return job
    return dataclasses.replace(job, num_train_examples=count_examples(job))


def row_table(job: TrainJob) -> Any:
    """Under `balance: auto`, the train split held in memory (graphs.row_table), or None.

    Used when the split fits the table's share of the memory available; every task then draws
    the same global batches of row indices and gathers only its own rows. A split that does
    not fit is streamed whole on every task instead (see `dataset_fns`).
    """
    from baton.graphs import row_table as rt

    rows = job.num_train_examples if job.transformed_dir else job.synthetic_examples
    data = job.data()
    if job.balance != "auto" or not rt.fits(rows, data.spec):
        return None
    if job.transformed_dir:
        return rt.RowTable(lambda: data.chunks("train"))
    return rt.RowTable(lambda: data.dataset("train", 4096, shuffle=False, input_context=None,
                                            cache=False))


def dataset_fns(job: TrainJob, table: Any = None) -> tuple[Any, Any]:
    """(train_dataset(skip, input_context), eval_dataset()) for the trainer.

    Training reads one endless, seeded stream; with op determinism on (which also makes tf.data
    deterministic) a resumed task that skips `skip` batches sees exactly what it would have seen.
    With `balance: off` each task reads its own shard of it, except in an elastic job
    (`elastic`: the slices of the global batches, `sliced_ds`). With `balance: auto` no task
    shards it: every task reads the whole stream in global batches
    (each local replica gets its own copy of each batch) and the step takes each replica's
    rows out of it (graphs.steps.make_train_chunk(balance=True)). With a `table` (`row_table`)
    the stream is of row indices and the step gathers its rows from the table; otherwise the
    stream carries the rows and the step slices them.
    """
    import tensorflow as tf

    data = job.data()

    def balanced_ds(skip: int, ctx: Any) -> Any:
        if table is not None:
            ds = table.index_stream(job.settings.batch_size, job.settings.seed, skip)
        else:
            ds = data.dataset("train", job.settings.batch_size, shuffle=True, input_context=None,
                              seed=job.settings.seed, repeat=True)
            ds = ds.skip(skip) if skip else ds
        local = ctx.num_replicas_in_sync // ctx.num_input_pipelines if ctx is not None else 1
        if local > 1:  # replicas of one task take consecutive elements: give each the batch
            ds = ds.flat_map(
                lambda *element: tf.data.Dataset.from_tensors(element if len(element) > 1
                                                              else element[0]).repeat(local))
        if ctx is not None:
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.OFF)
            ds = ds.with_options(options)
        return ds

    def train_ds(skip: int, ctx: Any) -> Any:
        batch = (
            ctx.get_per_replica_batch_size(job.settings.batch_size) if ctx is not None else job.settings.batch_size
        )
        ds = data.dataset("train", batch, shuffle=True, input_context=ctx, seed=job.settings.seed,
                          repeat=True)
        return ds.skip(skip) if skip else ds

    def sliced_ds(skip: int, ctx: Any) -> Any:
        """The global batches of one stream (as `balanced_ds` reads it), each cut into equal
        per-replica slices of which this task keeps its replicas' (in their order: a task's
        local replicas take consecutive elements)."""
        ds = data.dataset("train", job.settings.batch_size, shuffle=True, input_context=None,
                          seed=job.settings.seed, repeat=True)
        ds = ds.skip(skip) if skip else ds
        if ctx is None:
            return ds
        per = ctx.get_per_replica_batch_size(job.settings.batch_size)
        local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
        first = ctx.input_pipeline_id * local

        def cut(features: Any, labels: Any, r: int) -> Any:
            from baton.graphs.feature_spec import slice_rows

            lo, hi = r * per, (r + 1) * per
            return {k: slice_rows(v, lo, hi) for k, v in features.items()}, labels[lo:hi]

        def mine(features: Any, labels: Any) -> Any:
            out = tf.data.Dataset.from_tensors(cut(features, labels, first))
            for r in range(first + 1, first + local):
                out = out.concatenate(tf.data.Dataset.from_tensors(cut(features, labels, r)))
            return out

        ds = ds.map(lambda f, y: cut(f, y, first)) if local == 1 else ds.flat_map(mine)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        return ds.with_options(options)

    def eval_ds() -> Any:
        ds = data.dataset("eval", job.settings.eval_batch_size, shuffle=False, input_context=None)
        return ds.take(job.settings.eval_steps) if job.settings.eval_steps else ds

    if job.balance == "auto":
        return balanced_ds, eval_ds
    return (sliced_ds if job.elastic else train_ds), eval_ds


def finite_split(job: TrainJob, split: str) -> Any:
    """One pass over a split in file order, in training batches: where the non-finite guard
    looks for the first non-finite feature (graphs.nonfinite_guard)."""
    return job.data().dataset(split, job.settings.batch_size, shuffle=False, input_context=None,
                              cache=False)
