"""Which TensorFlow executor runs the loop's graphs: the single-threaded one for small models.

A small model's train step is hundreds of tiny ops (the forward and backward pass, and Keras 3's
optimizer update, ~20 ops per variable); TensorFlow's default executor hands ready ops between
its inter-op threads, and on such a model that dispatch, not the arithmetic, is most of a step.
TensorFlow also registers `SINGLE_THREADED_EXECUTOR` (the one tf.data runs its functions on): a
function's kernels one after another in topological order on the calling thread, no per-op
scheduling. On 2 cores it ran the own-model example's bare train chunk (bench/training,
bench_chunk_vs_fit.py) 1.6x as fast at batch 32 and 1.1x at batch 256.

It is not free for larger models, measured on the same 2 cores (docs/training.md): the chunk's
loop is then a functional `While` whose body TensorFlow instantiates without its graph rewrites
(oneDNN's matmul and convolution kernels stay Eigen's), and independent ops stop running side
by side. An MLP (256, 256) (80k parameters) ran 0.75x at batch 32, the (1024, 1024, 512) MLP
0.43x-0.65x; (128, 128) (23k) still ran 1.36x. Calling the step as a separate, non-inlined
function keeps the rewrites, but the call cost a third of the small model's gain. So `auto`
picks it only where it wins: one replica on a CPU-only machine (it also refuses collectives,
send/recv between devices and v1 control flow), at most `SMALL_PARAMS` trainable parameters
and `SMALL_WORK` parameters x per-replica batch, and no convolution in the traced graph.
`single_threaded` forces it where TensorFlow allows it, `default` never uses it.

Numerics: with oneDNN off (`TF_ENABLE_ONEDNN_OPTS=0`) the weights are bitwise the default
executor's; with it on (TensorFlow's default on x86) the default executor's loop runs oneDNN's
matmuls and this one Eigen's, which differ in the last bits. Either choice is deterministic,
and a run resumed from a backup makes the same choice, so it ends bitwise where the
uninterrupted run does.
"""

from __future__ import annotations

from typing import Any

EXECUTORS = ("auto", "single_threaded", "default")
SINGLE_THREADED = "SINGLE_THREADED_EXECUTOR"  # TensorFlow's registered name
SMALL_PARAMS = 25_000  # trainable parameters (measured: 23k won 1.36x, 80k lost 0.75x)
SMALL_WORK = 4_000_000  # parameters x per-replica batch (6.5k x 256 won 1.1x, 23k x 256 ~1.0x)
# Node types the single-threaded executor rejects (single_threaded_executor.cc, ValidateOp).
_CONTROL_FLOW = {"Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit",
                 "RefExit", "NextIteration", "RefNextIteration", "LoopCond"}
_PARTITIONED = {"_Send", "_Recv", "_HostSend", "_HostRecv", "Send", "Recv"}
# Functional conditionals: the executor accepts them, but a step holding one (Keras'
# LossScaleOptimizer under mixed_float16 applies its update in a tf.cond) never returned:
# the calling thread waited for ever, idle. TensorFlow's own tf.data runs no such graphs on it.
_BRANCHES = {"If", "StatelessIf", "Case", "StatelessCase"}
_HEAVY = ("Conv", "DepthwiseConv", "MaxPool", "AvgPool")  # oneDNN's, which the body would lose


def check_choice(choice: str) -> None:
    if choice not in EXECUTORS:
        raise ValueError(
            f"executor must be one of {', '.join(EXECUTORS)}. Received: executor={choice!r}"
        )


def fits(strategy: Any) -> bool:
    """True when `strategy` runs one replica on this process's CPU and no GPU is visible."""
    import tensorflow as tf

    if strategy.num_replicas_in_sync != 1 or tf.config.list_logical_devices("GPU"):
        return False
    multi = (tf.distribute.MultiWorkerMirroredStrategy,
             tf.distribute.experimental.ParameterServerStrategy)
    if isinstance(strategy, multi):
        return False
    try:
        devices = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy lists none: its ops go to the local CPU
        return True
    return all("CPU" in d.upper() for d in devices)


def small(model: Any, batch: int) -> bool:
    """At most SMALL_PARAMS trainable parameters and SMALL_WORK parameters x `batch`, and no
    convolution or pooling layer (Keras' Conv*, *Pooling*) anywhere in `model`."""
    import math

    params = sum(math.prod(v.shape) for v in model.trainable_variables)
    layers = model._flatten_layers(include_self=False)  # noqa: SLF001 - every nested layer
    if any(any(h in type(layer).__name__ for h in ("Conv", "Pool")) for layer in layers):
        return False
    return params <= SMALL_PARAMS and params * batch <= SMALL_WORK


def decide(choice: str, strategy: Any, model: Any = None, batch: int = 1) -> str | None:
    """`"auto"` or `"forced"` when the loop's graphs run single-threaded, else None.

    `auto` is checked again on the traced graph (`SingleThreaded`: no convolution op).
    """
    check_choice(choice)
    if choice == "default" or not fits(strategy):
        return None
    if choice == "single_threaded":
        return "forced"
    return "auto" if model is not None and small(model, batch) else None


def refused_nodes(concrete: Any) -> list[str]:
    """What in `concrete` (a traced function, with its library) the executor would refuse.

    Node types it rejects, and anything placed off the local CPU:0 (a captured variable on
    another device, an op pinned elsewhere): the runtime would partition the function and join
    the parts with send/recv, which it rejects too.
    """
    from tensorflow.python.framework import op_def_registry

    out = []
    for node in _nodes(concrete):
        op_def = op_def_registry.get(node.op)
        ref = op_def is not None and any(a.is_ref for a in op_def.output_arg)
        if ref or node.op in _CONTROL_FLOW or node.op in _PARTITIONED or node.op in _BRANCHES \
                or node.op.startswith("Collective") or not _local_cpu(node.device):
            out.append(f"{node.op} ({node.name} on {node.device or 'any device'})")
    for tensor in concrete.captured_inputs:
        if not _local_cpu(getattr(tensor, "device", "")):
            out.append(f"captured input on {tensor.device}")
    return out


def heavy_nodes(concrete: Any) -> list[str]:
    """Convolutions and pooling in `concrete`: kernels oneDNN speeds up, which `auto` keeps."""
    return [f"{n.op} ({n.name})" for n in _nodes(concrete) if n.op.startswith(_HEAVY)]


def _nodes(concrete: Any) -> list[Any]:
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node)
    for f in graph_def.library.function:
        nodes.extend(f.node_def)
    return nodes


def _local_cpu(device: str) -> bool:
    """`device` is unset or names this task's CPU:0."""
    import tensorflow as tf

    if not device:
        return True
    spec = tf.DeviceSpec.from_string(device)
    return (spec.device_type in (None, "CPU") and spec.device_index in (None, 0)
            and spec.job in (None, "localhost") and spec.replica in (None, 0)
            and spec.task in (None, 0))


class SingleThreaded:
    """A `tf.function` traced and called under the single-threaded executor.

    Its first call traces it under the executor and checks the graph: an op the executor
    refuses (`refused`), or under `auto` a convolution (`heavy`), and it runs on the default
    executor from then on (`active` False). The loop calls its functions with one signature;
    a later retrace is checked at the next call. Other attributes are the function's
    (`_list_all_concrete_functions`, ...).
    """

    def __init__(self, fn: Any, auto: bool = True) -> None:
        self._fn = fn
        self.auto = auto
        self.active = True
        self.refused: list[str] = []
        self.heavy: list[str] = []
        self._traces = 0

    @property
    def executor(self) -> str:
        """What ran it, as train_info records it."""
        return "single_threaded" if self.active else "default"

    def __call__(self, *args: Any) -> Any:
        if not self.active:
            return self._fn(*args)
        from tensorflow.python.eager import context

        with context.function_executor_type(SINGLE_THREADED):
            if self._traces == 0 or self._fn.experimental_get_tracing_count() != self._traces:
                self._check(args)
            if self.active:
                return self._fn(*args)
        return self._fn(*args)  # checked and refused: the default executor

    def _check(self, args: tuple[Any, ...]) -> None:
        self._fn.get_concrete_function(*args)  # this call's trace, made under the executor
        for concrete in self._fn._list_all_concrete_functions():  # noqa: SLF001
            self.refused.extend(refused_nodes(concrete))
            if self.auto:
                self.heavy.extend(heavy_nodes(concrete))
        self._traces = self._fn.experimental_get_tracing_count()
        self.active = not self.refused and not self.heavy
        if not self.active:  # traced for this executor (loops not lowered): trace afresh
            self._fn = self._fn._clone(None)  # noqa: SLF001 - same function and settings

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)


def on_executor(fn: Any, decision: str | None) -> Any:
    """`fn` (a tf.function) as the loop calls it: wrapped when `decide` chose single-threaded."""
    return SingleThreaded(fn, auto=decision == "auto") if decision else fn


def executor_of(fn: Any) -> str:
    """"single_threaded" or "default": which executor ran `fn` (after its first call)."""
    return fn.executor if isinstance(fn, SingleThreaded) else "default"
