"""Server configuration: the ModelServerConfig, batching and monitoring text protos.

The files are TF Serving's own text-proto formats, so one config directory drives both
`baton serve` and the official tensorflow/serving image. ModelServerConfig comes from
tensorflow-serving-api; BatchingParameters and MonitoringConfig are not shipped in that
wheel, so their (small) descriptors are declared here and parsed with protobuf's real
text_format parser: unknown fields and bad values fail exactly as they would there.
"""

from __future__ import annotations

import dataclasses
import functools
import os

from baton.errors import ConfigError
from baton.serving.conventions import DEFAULT_PROMETHEUS_PATH

_BATCHING_FIELDS = (
    # (name, wrapper type) as in tensorflow_serving/servables/tensorflow/session_bundle_config.proto
    ("max_batch_size", "Int64Value"),
    ("batch_timeout_micros", "Int64Value"),
    ("max_enqueued_batches", "Int64Value"),
    ("num_batch_threads", "Int64Value"),
    ("thread_pool_name", "StringValue"),
    ("pad_variable_length_inputs", "BoolValue"),
    ("enable_large_batch_splitting", "BoolValue"),
    ("max_execution_batch_size", "Int64Value"),
)


@functools.lru_cache(maxsize=1)
def _messages():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    f = descriptor_pb2.FileDescriptorProto(
        name="baton_serving_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    FD = descriptor_pb2.FieldDescriptorProto
    bp = f.message_type.add(name="BatchingParameters")
    for i, (name, wrapper) in enumerate(_BATCHING_FIELDS, start=1):
        bp.field.add(name=name, number=i, type=FD.TYPE_MESSAGE,
                     type_name=f".google.protobuf.{wrapper}", label=FD.LABEL_OPTIONAL)
    bp.field.add(name="allowed_batch_sizes", number=20, type=FD.TYPE_INT64,
                 label=FD.LABEL_REPEATED)
    pc = f.message_type.add(name="PrometheusConfig")
    pc.field.add(name="enable", number=1, type=FD.TYPE_BOOL, label=FD.LABEL_OPTIONAL)
    pc.field.add(name="path", number=2, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    mc = f.message_type.add(name="MonitoringConfig")
    mc.field.add(name="prometheus_config", number=1, type=FD.TYPE_MESSAGE,
                 type_name=".tensorflow.serving.PrometheusConfig", label=FD.LABEL_OPTIONAL)
    pool.Add(f)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")),
            get(pool.FindMessageTypeByName("tensorflow.serving.MonitoringConfig")))


def _parse_file(path: str, message, what: str):
    from google.protobuf import text_format

    try:
        if path.startswith(("s3://", "gs://")):  # TF Serving reads config files there too
            from baton.storage import objects

            text = objects.read_bytes(path).decode("utf-8")
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as e:
        raise ConfigError(f"cannot read {what} file {path!r}: {e.strerror or e}") from e
    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as e:
        # TF Serving's shape: protobuf's text parser logs the position and reason, then
        # ParseProtoTextFile fails with "Invalid protobuf file" (util/proto_util.h)
        where, _, reason = str(e).partition(" : ")
        if not reason:
            where, reason = f"{e.GetLine()}:{e.GetColumn()}", str(e)
        raise ConfigError(f"Error parsing text-format {message.DESCRIPTOR.full_name}: "
                          f"{where}: {reason}\nInvalid protobuf file: '{path}'") from e


def grpc_channel_arguments(text: str) -> list[tuple[str, int | str]]:
    """`--grpc_channel_arguments`: "key=value,key=value" as TF Serving's
    parseGrpcChannelArgs splits it; a value that parses as a 32-bit integer is passed as
    an integer, anything else as a string (grpc logs arguments it does not know)."""
    out: list[tuple[str, int | str]] = []
    for item in text.split(",") if text else []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--grpc_channel_arguments must be comma-separated key=value "
                              f"pairs. Received: {item!r} in {text!r}")
        try:
            number = int(value)
        except ValueError:
            out.append((key, value))
            continue
        out.append((key, number) if -2 ** 31 <= number < 2 ** 31 else (key, value))
    return out


@dataclasses.dataclass(frozen=True)
class BatchingOptions:
    """Dynamic batching knobs; defaults are TF Serving's BasicBatchScheduler defaults.

    batch_timeout_micros defaults to 0: a batch closes as soon as the executor is free,
    so a lone request is never delayed and batches grow only under load.
    """

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = 1
    allowed_batch_sizes: tuple[int, ...] = ()
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int = 0
    thread_pool_name: str = "batch_threads"  # TF Serving's default; a metrics label here

    def __post_init__(self):
        for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"batching {name} must be >= 1. Received: {getattr(self, name)}")
        if self.batch_timeout_micros < 0:
            raise ConfigError(
                f"batching batch_timeout_micros must be >= 0. Received: {self.batch_timeout_micros}")
        sizes = self.allowed_batch_sizes
        if sizes:
            if list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
                raise ConfigError(f"batching allowed_batch_sizes must be increasing and positive. "
                                  f"Received: {list(sizes)}")
            if sizes[-1] != self.execution_size:
                raise ConfigError(
                    "batching allowed_batch_sizes must end with max_batch_size "
                    f"({self.execution_size}). Received: {list(sizes)}")

    @property
    def execution_size(self) -> int:
        """Largest batch one signature call runs (max_execution_batch_size when splitting)."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size


def load_batching_parameters(path: str | None) -> BatchingOptions:
    """Reads a `--batching_parameters_file` (BatchingParameters text proto)."""
    if not path:
        return BatchingOptions()
    msg = _parse_file(path, _messages()[0](), "BatchingParameters")
    kw: dict = {}
    for name, _ in _BATCHING_FIELDS:
        if msg.HasField(name) and name in {f.name for f in dataclasses.fields(BatchingOptions)}:
            kw[name] = getattr(msg, name).value
    if msg.allowed_batch_sizes:
        kw["allowed_batch_sizes"] = tuple(msg.allowed_batch_sizes)
    try:
        return BatchingOptions(**kw)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e


def load_monitoring_config(path: str | None) -> str | None:
    """Returns the Prometheus metrics path from a `--monitoring_config_file`, or None."""
    if not path:
        return None
    msg = _parse_file(path, _messages()[1](), "MonitoringConfig")
    pc = msg.prometheus_config
    if not pc.enable:
        return None
    p = pc.path or DEFAULT_PROMETHEUS_PATH
    if not p.startswith("/"):
        raise ConfigError(f"prometheus_config.path must start with '/'. Received: {p!r}")
    return p


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
    """model_version_policy: kind is 'latest' (num_versions), 'all' or 'specific'."""

    kind: str = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: list[int]) -> list[int]:
        """The versions that should be served, given those present on disk."""
        av = sorted(available)
        if self.kind == "all":
            return av
        if self.kind == "specific":
            return [v for v in av if v in set(self.versions)]
        return av[-self.num_versions:] if av else []


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One served model: name, base path, version policy and labels."""

    name: str
    base_path: str
    policy: VersionPolicy = VersionPolicy()
    labels: tuple[tuple[str, int], ...] = ()


def _check_name(name: str, where: str) -> None:
    """Any non-empty name without control characters, as TF Serving takes any string:
    `modelname!#$%&'()*+,/:;=?@[]` is served, its REST URL carrying it percent-encoded
    (model names never become paths here)."""
    if not name or not name.isprintable():
        raise ConfigError(f"{where}: model name must be non-empty, without control "
                          f"characters. Received: {name!r}")


def model_configs_from_proto(msg) -> list[ModelConfig]:
    """Converts a tensorflow.serving.ModelServerConfig message to ModelConfigs."""
    if msg.WhichOneof("config") == "custom_model_config":
        raise ConfigError("custom_model_config is not supported; use model_config_list")
    out, seen = [], set()
    for i, c in enumerate(msg.model_config_list.config):
        where = f"model_config_list.config[{i}]"
        _check_name(c.name, where + ".name")
        if c.name in seen:
            raise ConfigError(f"{where}.name: duplicate model name. Received: {c.name!r}")
        seen.add(c.name)
        if not c.base_path:
            raise ConfigError(f"{where}.base_path is required. Received: ''")
        if c.model_platform not in ("", "tensorflow"):
            raise ConfigError(f"{where}.model_platform must be 'tensorflow'. "
                              f"Received: {c.model_platform!r}")
        pol = c.model_version_policy
        which = pol.WhichOneof("policy_choice")
        if which == "all":
            policy = VersionPolicy("all")
        elif which == "specific":
            if not pol.specific.versions:
                raise ConfigError(f"{where}.model_version_policy.specific.versions is empty")
            policy = VersionPolicy("specific", versions=tuple(pol.specific.versions))
        else:
            n = pol.latest.num_versions if which == "latest" else 1
            if n < 1:
                n = 1
            policy = VersionPolicy("latest", num_versions=n)
        labels = tuple(sorted((k, int(v)) for k, v in c.version_labels.items()))
        out.append(ModelConfig(c.name, c.base_path, policy, labels))
    return out


def load_model_config_file(path: str) -> list[ModelConfig]:
    """Reads a `--model_config_file` (ModelServerConfig text proto)."""
    from tensorflow_serving.config import model_server_config_pb2

    msg = _parse_file(path, model_server_config_pb2.ModelServerConfig(), "ModelServerConfig")
    try:
        configs = model_configs_from_proto(msg)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
    # TF Serving resolves relative base paths against the working directory; so do we.
    return [dataclasses.replace(c, base_path=base_path(c.base_path)) for c in configs]


def base_path(path: str) -> str:
    """A model base path as served: a bucket URL (`s3://`, `gs://`) in canonical form, else
    the local path made absolute against the working directory (as TF Serving does)."""
    from baton.storage import location

    return location.normalize(path, "base_path") if location.is_remote(path) \
        else os.path.abspath(path)
