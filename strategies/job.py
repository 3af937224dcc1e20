"""The job every training task runs, and the data it reads.

A `TrainJob` is the train stage's settings as they are plus what the run resolved around them;
it is one JSON file (the job file each task of a local cluster is handed, and the same thing
in-process), so the local launcher, `baton task` on a TFJob pod and the in-process train stage
all run exactly the same job (strategies/task.py runs it). Its data goes to the graph side in
one call (`TrainJob.data`: graphs.training_data builds the streams each task reads); the rows
are counted here, once. Nothing here reads the environment.
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
        """The job's data as the graph side reads it (graphs.training_data.TrainingData), handed
        the settings that say how a task reads it once: its datasets, row table and the split
        the non-finite guard searches come from there."""
        from baton.graphs.training_data import TrainingData

        s = self.settings
        return TrainingData(self.feature_spec, self.transformed_dir, self.synthetic_examples,
                            s.cache, batch_size=s.batch_size, eval_batch_size=s.eval_batch_size,
                            eval_steps=s.eval_steps, seed=s.seed, balanced=self.balance == "auto",
                            elastic=self.elastic, num_rows=self.num_train_examples)

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
