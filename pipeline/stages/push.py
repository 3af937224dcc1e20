"""Push: release a blessed, checked model into the serving base directory `<base>/<version>/`.

Refuses an unblessed model (the blessing's failed checks are the message) and a model whose
check stage did not pass. The copy is atomic (see pipeline.release.pushing); the last `keep`
versions stay. When an edge model is given and its release decision is positive, the TFLite
file travels inside the same version (`assets.extra/edge/`), so the cloud and edge models are
released together or not at all.

Caching: CACHEABLE is True on purpose. The cache key covers the exported model, the blessing,
the check, the edge model and this config, so "a rerun with nothing changed" reuses the
earlier push instead of adding a duplicate version, and a deliberate `baton rollback` is not
undone by the next unchanged run. A cached push is reused only while the serving base still
accounts for its version (present, rolled back, or superseded by a newer one): when the base was
wiped or the version deleted by hand, push runs again (`cache_valid`). When push does run, it is
still idempotent: content equal to the newest served version is not pushed again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

from baton.errors import StageError
from baton.graphs.signatures import ASSETS_EXTRA
from baton.pipeline.context import StageContext

INPUTS = {"saved_model": True, "blessing": True, "check": False, "edge_model": False}
OUTPUTS = ("pushed",)
CODE_DEPS = ("baton.pipeline.release.pushing", "baton.pipeline.release.versions", "baton.pipeline.release.status")
CACHEABLE = True
EDGE_DIR = f"{ASSETS_EXTRA}/edge"  # the edge files travel inside the pushed version


@dataclasses.dataclass(frozen=True)
class Config:
    """serving_base: the model base path a server watches (default `models/<pipeline>`), or a
    bucket URL (`s3://bucket/models/<name>`, `gs://...`; committed by manifest: docs/artifacts.md).
    keep: versions kept after a push. on_not_blessed: fail the run (exit 1) or skip quietly.
    server: a REST address (http://127.0.0.1:8501) to poll until the new version is AVAILABLE.
    allow_unchecked: push without a `check` input (a model never loaded in a fresh process)."""

    serving_base: Path | None = None
    keep: int = 5
    on_not_blessed: Literal["fail", "skip"] = "fail"
    server: str | None = None
    model_name: str | None = None
    wait_seconds: float = 60.0
    allow_unchecked: bool = False

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise ValueError(f"keep must be >= 1. Received: keep={self.keep}")
        if self.wait_seconds < 0:
            raise ValueError(f"wait_seconds must be >= 0. Received: {self.wait_seconds}")


def check_spec(config: Config, stage: Any, spec: Any) -> list[str]:
    """A push must be preceded by the check stage (TFX's InfraValidator) unless the spec opts out
    in so many words: an unloadable model reaching serving is the failure this stage prevents."""
    if "check" in stage.inputs or config.allow_unchecked:
        return []
    return ["push has no `check` input, so a model never loaded and run in a fresh process "
            "would be served; add `check: <check stage>.check` to its inputs, or set "
            "`allow_unchecked: true` in its config"]


def run(ctx: StageContext, config: Config) -> None:
    from baton.pipeline.release import pushing
    from baton.pipeline.stages.export import EXPORT_INFO, version_dir

    base = serving_base(ctx, config)
    out = ctx.output("pushed")
    blessing = _read_json(ctx.inputs["blessing"] / "blessing.json", "blessing")
    if not blessing.get("blessed"):
        reasons = "; ".join(blessing.get("failed") or []) or "blessed is false"
        if config.on_not_blessed == "skip":
            _write(out, {"pushed": False, "reason": f"not blessed: {reasons}",
                         "serving_base": str(base)})
            ctx.record(pushed=False)
            ctx.log(f"not pushed: model not blessed ({reasons})")
            return
        raise StageError(f"push: the model is not blessed, so it is not pushed to {base}: "
                         f"{reasons}")
    if "check" in ctx.inputs:
        check = _read_json(ctx.inputs["check"] / "check.json", "check")
        if not check.get("ok"):
            raise StageError(f"push: the check stage did not pass: {check.get('problems')}")

    src = version_dir(ctx.inputs["saved_model"])
    info_path = ctx.inputs["saved_model"] / EXPORT_INFO
    export_info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    edge = _edge(ctx)
    try:
        result = pushing.push(
            src, base, proposed_version=int(export_info.get("version", src.name)),
            keep=config.keep, extra=edge["files"] if edge else None,
            info={"run_id": ctx.run_id, "pipeline": ctx.pipeline,
                  "edge_released": bool(edge)},
        )
    except OSError as exc:
        raise StageError(f"push: cannot write to serving base {base}: {exc}") from None
    result.update(serving_base=str(base), edge_released=bool(edge),
                  edge_reason=(edge or {}).get("reason") or _edge_reason(ctx))
    if config.server and result["pushed"]:
        from baton.pipeline.release import status

        name = config.model_name or export_info.get("model_name") or ctx.pipeline
        result["server_status"] = status.wait_available(
            config.server, name, result["version"], config.wait_seconds)
    _write(out, result)
    ctx.record(pushed=result["pushed"], version=result["version"],
               edge_released=bool(edge))
    verb = "pushed" if result["pushed"] else "unchanged:"
    ctx.log(f"{verb} version {result['version']} at {result['path']}"
            + ("" if result["pushed"] else f" ({result['reason']})"))


def serving_base(ctx: StageContext, config: Config) -> Path | str:
    """The serving base: a bucket URL (`s3://`, `gs://`) as given, else a path relative to
    the spec's directory (default `models/<pipeline>`)."""
    from baton.storage import location

    given = location.from_path(config.serving_base) if config.serving_base else None
    if given is not None and location.is_remote(given):
        return location.normalize(given, "push.serving_base")
    return ctx.resolve(config.serving_base or Path("models") / ctx.pipeline)


def cache_valid(outputs: dict[str, Path]) -> str | None:
    """Why an earlier push cannot stand for this one (None: it can): its version left the base.

    Reusing it would report "pushed" while nothing is served. A rolled-back version or one
    superseded by a newer version is still accounted for, so a rollback is not undone.
    """
    from baton.pipeline.release import versions

    try:
        result = json.loads((outputs["pushed"] / "push.json").read_text())
    except (OSError, ValueError, KeyError):
        return "the earlier push record is unreadable"
    if not result.get("pushed") and result.get("version") is None:
        return None  # an unblessed model skipped: nothing was meant to be served
    from baton.storage.location import is_remote

    base, version = str(result["serving_base"]), int(result["version"])
    if not is_remote(base) and not Path(base).is_dir():
        return f"serving base {base} is gone"
    present = versions.versions(base)
    if version in present or version in versions.rolled_back(base) or any(v > version for v in present):
        return None
    return f"version {version} is no longer in {base}"


def _edge(ctx: StageContext) -> dict[str, Any] | None:
    """The edge files to release with the model, or None when there are none to release."""
    if "edge_model" not in ctx.inputs:
        return None
    d = ctx.inputs["edge_model"]
    info = _read_json(d / "edge.json", "edge_model")
    if not info.get("released"):
        return None
    files = {f"{EDGE_DIR}/{name}": d / name for name in info.get("release_files", [])}
    files[f"{EDGE_DIR}/edge.json"] = d / "edge.json"
    return {"files": files, "reason": info.get("reason")}


def _edge_reason(ctx: StageContext) -> str | None:
    if "edge_model" not in ctx.inputs:
        return "no edge model in this pipeline"
    return _read_json(ctx.inputs["edge_model"] / "edge.json", "edge_model").get("reason")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StageError(f"push: input {what!r} has no {path.name} (looked in {path.parent})"
                         ) from None
    except ValueError as exc:
        raise StageError(f"push: {path} is not valid JSON: {exc}") from None


def _write(out: Path, obj: dict[str, Any]) -> None:
    (out / "push.json").write_text(json.dumps(obj, indent=2, default=str) + "\n")
