"""How a training step is compiled, and what XLA made of it.

`StepOptions` (XLA and its scope, the fp16 all-reduce, TensorFlow's executor) is what the
chunk (graphs.steps) is made with; `resolve_jit_scope` turns `jit_scope: auto` into the scope a
strategy and a model get; after the first call, `xla_compiled_functions` lists what XLA
compiled (train_info) and `xla_failure` says in one line why XLA refused a step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

JIT_SCOPES = ("auto", "chunk", "step", "gradients")


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How the per-replica step is compiled and how its gradients travel.

    `jit_scope` says what XLA compiles when `jit_compile` is on: `chunk` all of a chunk's steps
    as one XLA program (one replica only: the chunk's batches are read from the iterator first,
    then every step runs inside XLA's own loop, so XLA fuses across the whole step and nothing
    crosses between TensorFlow's executor and XLA per step), `step` the whole per-replica
    step (forward, backward and the optimizer update) once per step, `gradients` the forward
    and backward pass only, the update (and the gradient all-reduce inside it) running outside
    XLA. `auto` picks `gradients` under multi-worker mirrored and parameter-server strategies,
    whose updates run collectives or remote variable writes that XLA cannot compile (on CPU the
    multi-worker all-reduce is a CollectiveGatherV2/CollectiveReduceV2 with no XLA kernel),
    `chunk` under a one-replica strategy (one device, or the default strategy) for a small
    model (graphs.executor.small: no convolution or pooling, few parameters), and `step`
    otherwise: a convolution model ran its steps 16x slower as one XLA chunk than per step
    (XLA's CPU convolutions inside its own loop), and the chunk reads its batches before its
    steps instead of beside them. `executor` picks TensorFlow's executor for the chunk
    (graphs.executor): `auto` runs it single-threaded where that fits (one replica on a
    CPU-only machine).
    """

    jit_compile: bool = False  # XLA for the per-replica computation
    fp16_allreduce: bool = False  # cast gradients to float16 for the cross-replica sum
    jit_scope: str = "auto"  # auto | chunk | step | gradients (Python API; specs use auto)
    executor: str = "auto"  # auto | single_threaded | default (graphs.executor)

    def __post_init__(self) -> None:
        from baton.graphs.executor import check_choice

        if self.jit_scope not in JIT_SCOPES:
            raise ValueError(
                f"jit_scope must be one of {', '.join(JIT_SCOPES)}. "
                f"Received: jit_scope={self.jit_scope!r}"
            )
        check_choice(self.executor)


def resolve_jit_scope(options: StepOptions, strategy: Any, model: Any = None,
                      batch: int = 1) -> str | None:
    """What XLA compiles under `strategy`: "chunk", "step", "gradients", or None (XLA off).

    `model` and its per-replica `batch`, when given, refine `auto` on one replica: `chunk`
    only for a small model (graphs.executor.small), `step` for the others.
    """
    from baton.graphs.executor import small

    if not options.jit_compile:
        return None
    if options.jit_scope != "auto":
        return options.jit_scope
    import tensorflow as tf

    multi_worker = (
        tf.distribute.MultiWorkerMirroredStrategy,
        tf.distribute.experimental.ParameterServerStrategy,
    )
    if isinstance(strategy, multi_worker):
        return "gradients"
    if one_replica(strategy) and (model is None or small(model, batch)):
        return "chunk"
    return "step"


def one_replica(strategy: Any) -> bool:
    """One replica on this process, with no cross-device reduction in its step: the
    one-device strategy or the default (no) strategy. The `chunk` XLA scope needs it."""
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.OneDeviceStrategy) or (
        type(strategy).__name__ == "_DefaultDistributionStrategy")


def xla_compiled_functions(fn: Any) -> list[str]:
    """Names of the functions that XLA must compile in every graph `fn` (a tf.function) traced.

    A function traced with `jit_compile=True` carries `_XlaMustCompile: true`; the runtime then
    compiles it with XLA or fails, it never falls back silently. Empty: nothing is compiled.
    """
    names: set[str] = set()
    for concrete in fn._list_all_concrete_functions():  # noqa: SLF001 - the traced graphs
        for f in concrete.graph.as_graph_def().library.function:
            attr = f.attr.get("_XlaMustCompile")
            if attr is not None and attr.b:
                names.add(f.signature.name)
    return sorted(names)


def xla_failure(exc: BaseException) -> str | None:
    """What XLA could not compile, in one line, when `exc` is XLA refusing the step; else None.

    TensorFlow's own message is dozens of lines (the node, twice, then the graph's name and
    every function around it); the cause is one op: one with no XLA kernel on this device (a
    string op, a `tf.py_function`), or one whose XLA kernel is not deterministic while
    TensorFlow's op determinism is on (max-pooling's gradient).
    """
    import re

    msg = str(getattr(exc, "message", "") or exc)
    node = re.search(r"\{\{node ([^}]+)\}\}", msg)
    where = f" (node {node.group(1)})" if node else ""
    missing = re.search(r"on (XLA_\w+_JIT): (\w+) \(", msg)
    if missing:
        return (f"XLA has no kernel for the op {missing.group(2)} on {missing.group(1)}{where}: "
                "set jit_compile: false to train this model without XLA")
    nondeterministic = re.search(r"([^\n:]*do not yet have a deterministic XLA implementation)",
                                 msg)
    if nondeterministic:
        return (f"{nondeterministic.group(1).strip()}{where}, and op determinism is on "
                "(deterministic: true): set deterministic: false, or jit_compile: false")
    return None
