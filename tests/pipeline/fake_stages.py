"""Small pure-Python stages for testing the framework without TensorFlow."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from baton.pipeline.registry import stage

CALLS: list[str] = []


@dataclasses.dataclass(frozen=True)
class SourceConfig:
    path: str = "data.txt"
    repeat: int = 1

    def __post_init__(self) -> None:
        if self.repeat < 1:
            raise ValueError(f"repeat must be >= 1. Received: repeat={self.repeat}")


def _source_files(config: SourceConfig, spec_dir: Path) -> list[Path]:
    return [spec_dir / config.path]


@stage(outputs=("lines",), config=SourceConfig, external_inputs=_source_files)
def source(ctx, config: SourceConfig) -> None:
    CALLS.append(ctx.stage)
    text = ctx.resolve(config.path).read_text()
    (ctx.output("lines") / "data.txt").write_text(text * config.repeat)


@dataclasses.dataclass(frozen=True)
class UpperConfig:
    suffix: str = ""


@stage(inputs={"lines": True}, outputs=("upper",), config=UpperConfig)
def upper(ctx, config: UpperConfig) -> None:
    CALLS.append(ctx.stage)
    text = (ctx.inputs["lines"] / "data.txt").read_text()
    (ctx.output("upper") / "data.txt").write_text(text.upper() + config.suffix)
    ctx.record(chars=len(text))


@stage(inputs={"lines": True}, outputs=("count",))
def count(ctx, config: dict) -> None:
    CALLS.append(ctx.stage)
    n = len((ctx.inputs["lines"] / "data.txt").read_text().splitlines())
    (ctx.output("count") / "n.txt").write_text(str(n))
    ctx.record(lines=n)


@stage(inputs={"lines": True}, outputs=("slow",))
def slow_writer(ctx, config: dict) -> None:
    """Writes half its artifact, signals readiness through a file, then waits to be killed."""
    out = ctx.output("slow")
    (out / "part-0").write_text("half")
    Path(config["ready_file"]).write_text(str(os.getpid()))
    time.sleep(60)
    (out / "part-1").write_text("other half")


@stage(inputs={"lines": True}, outputs=("never",))
def failing(ctx, config: dict) -> None:
    from baton.errors import StageError

    (ctx.output("never") / "junk").write_text("x")
    raise StageError("the data was bad: 3 rows could not be parsed")


@dataclasses.dataclass(frozen=True)
class PublishConfig:
    dest: str = "published.txt"


def _publish_cache_valid(outputs: dict[str, Path]) -> str | None:
    dest = Path((outputs["receipt"] / "dest.txt").read_text())
    return None if dest.exists() else f"{dest} is gone"


@stage(inputs={"lines": True}, outputs=("receipt",), config=PublishConfig,
       cache_valid=_publish_cache_valid)
def publish(ctx, config: PublishConfig) -> None:
    """Writes outside the run (as push does): a cached result stands only while that file exists."""
    CALLS.append(ctx.stage)
    dest = ctx.resolve(config.dest)
    dest.write_text((ctx.inputs["lines"] / "data.txt").read_text())
    (ctx.output("receipt") / "dest.txt").write_text(str(dest))


@dataclasses.dataclass(frozen=True)
class JudgeConfig:
    word: str = "A"


def _judge_check(config: JudgeConfig, inputs: dict[str, Path]) -> list[str]:
    """Settled by the source's data alone, before `upper` (the expensive stage) runs."""
    words = (inputs["lines"] / "data.txt").read_text().split()
    return [] if config.word in words else [f"config.word: {config.word!r} is not in the data: {words}"]


@stage(inputs={"lines": True, "upper": True}, outputs=("verdict",), config=JudgeConfig,
       early_inputs=("lines",), check_inputs=_judge_check)
def judge(ctx, config: JudgeConfig) -> None:
    CALLS.append(ctx.stage)
    (ctx.output("verdict") / "ok.txt").write_text("yes")


def _rehearsal(config: dict, options, spec) -> dict:
    return {"fault": options.inject_failure}


@stage(inputs={"lines": True}, outputs=("seen",), run_settings=_rehearsal)
def rehearsed(ctx, config: dict) -> None:
    """Its output depends on a run setting (a flag), which its run_settings hook names."""
    CALLS.append("rehearsed")
    (ctx.output("seen") / "fault.txt").write_text(str(ctx.options.inject_failure))


@stage(inputs={"lines": True}, outputs=("never",))
def failing_early(ctx, config: dict) -> None:
    """Fails after asking for its output directory, before writing anything into it."""
    from baton.errors import StageError

    ctx.output("never")
    raise StageError("the model function returned a string")


@stage(outputs=("shards",))
def direct_writer(ctx, config: dict) -> None:
    """Writes a shard as a Beam worker on another machine would (StageContext.direct_output),
    and a file of its own."""
    from baton.pipeline.dataplane.beam.shard_sink import shard_path

    with shard_path(ctx.direct_output("shards", elsewhere=True), "train",
                    "part-00000.bin") as path:
        Path(path).write_bytes(b"rows written by a worker")
    (ctx.output("shards") / "meta.json").write_text('{"splits": ["train"]}')
