"""Probe for tests: the first batches each parameter-server worker reads (run as a subprocess).

    python -m tests.strategies.ps_probe JOB_JSON BATCHES

Starts an in-process cluster (a chief coordinator, 2 workers, 1 PS on free 127.0.0.1 ports),
builds the trainer's per-worker iterator (`strategies.ps_trainer.per_worker_iterator`) exactly
as `ps_trainer.train` does, and runs `next(iterator)` BATCHES times on each worker by name.
Prints `{"workers": 2, "rows": {"0": [[row], ...], "1": [...]}}`: each row the batch's feature
values (sorted column names, then the label), and the trainer's worker count.
In-process servers cannot be shut down, hence a process of its own.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import tensorflow as tf

    from baton.strategies import factory, ps_trainer
    from baton.strategies.cluster import ClusterSpec, TaskId, TFConfig
    from baton.strategies.job import TrainJob
    from baton.strategies.task import setup_runtime

    job = TrainJob.from_json(argv[0])
    batches = int(argv[1])
    setup_runtime(job)  # the chief's global seed, as in run_task
    cluster = ClusterSpec.local(workers=2, ps=1, chief=True)
    servers = [  # noqa: F841 - kept alive for the process lifetime
        factory.start_server(TFConfig(cluster, t)) for t in cluster.tasks() if t.type != "chief"
    ]
    strategy = factory.make_strategy("parameter_server", TFConfig(cluster, TaskId("chief", 0)))
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    train_ds, _ = job.data().dataset_fns()
    iterator = ps_trainer.per_worker_iterator(coordinator, strategy, train_ds, skip=0)

    @tf.function
    def take(it):  # noqa: ANN001, ANN202
        rows = []
        for _ in range(batches):
            features, label = next(it)
            cols = [tf.cast(features[k], tf.float32) for k in sorted(features)]
            rows.append(tf.stack(cols + [tf.cast(label, tf.float32)], axis=1))
        return tf.concat(rows, axis=0)

    out = {}
    for i, worker in enumerate(coordinator._cluster.workers):  # noqa: SLF001 - pick the worker
        value = worker.create_resource(take, args=(iterator,))
        out[str(i)] = [[round(float(x), 5) for x in row] for row in value.fetch()]
    result = {"workers": ps_trainer.job_workers(strategy), "rows": out}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import os

    code = main(sys.argv[1:])
    os._exit(code)  # in-process gRPC servers never shut down cleanly
