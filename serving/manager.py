"""Model manager: watches base paths, loads and unloads versions, resolves requests.

Availability-preserving, like TF Serving's default policy: a new version is loaded and
warmed up in the background and only then published; the old one is unloaded after
that. A version that fails to load (corrupt, half-copied, failing warmup) is treated as
absent, so the serving version stays, and it is retried when its directory changes (a
copy that completes) or after `retry_seconds`. Requests read an immutable snapshot
(`_Model.serving`) that is swapped atomically, so the hot path takes no lock.

A base path may be a bucket URL (`s3://`, `gs://`): serving.bucket_models lists its complete
versions and downloads one to a local copy before it is loaded; a store that cannot be reached
leaves the served versions as they are (logged, retried at the next poll).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable

from baton.errors import StorageError
from baton.serving import bucket_models
from baton.serving.config import ModelConfig
from baton.serving.loader import load_servable
from baton.serving.servable import Servable
from baton.serving.status import Code, ServingError, invalid, not_found

log = logging.getLogger(__name__)

START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"


@dataclasses.dataclass
class VersionStatus:
    version: int
    state: str
    error: ServingError | None = None
    fingerprint: tuple | None = None
    failed_at: float = 0.0


class _Model:
    def __init__(self, config: ModelConfig):
        self.config = config
        self.records: dict[int, VersionStatus] = {}
        self.serving: dict[int, Servable] = {}
        self.latest: Servable | None = None
        self.labels: dict[str, int] = dict(config.labels)
        self.dirs: dict[int, str] = {}  # version -> its directory name under base_path

    def publish(self, serving: dict[int, Servable]) -> None:
        self.serving = serving
        self.latest = serving[max(serving)] if serving else None


def version_dirs(base_path: str) -> dict[int, str]:
    """Integer-named subdirectories of base_path (TF Serving's layout): version -> the
    directory name as found (`00000123` is version 123, read from `00000123/`); {} if
    base_path is missing. When two names give one version (`123`, `0123`), the shortest
    (then the first in sort order) is taken, so the choice is stable across polls. A bucket
    URL: its complete versions (serving.bucket_models; StorageError when unreachable)."""
    if bucket_models.is_remote(base_path):
        return bucket_models.version_dirs(base_path)
    try:
        entries = sorted(os.listdir(base_path), key=lambda e: (len(e), e))
    except OSError:
        return {}
    out: dict[int, str] = {}
    for e in entries:
        if e.isdigit() and e.isascii() and os.path.isdir(os.path.join(base_path, e)):
            out.setdefault(int(e), e)
    return out


def list_versions(base_path: str) -> list[int]:
    """The versions under base_path, ascending; [] if missing."""
    return sorted(version_dirs(base_path))


def fingerprint(path: str) -> tuple:
    """(relative path, size, mtime_ns) of every file: changes while a copy is in progress."""
    if bucket_models.is_remote(path):
        return bucket_models.fingerprint(path)
    items = []
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            try:
                st = os.stat(p)
            except OSError:
                continue
            items.append((os.path.relpath(p, path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(items))


class ModelManager:
    """Owns every model's versions.

    Args:
        configs: the models to serve.
        poll_seconds: `--file_system_poll_wait_seconds`; 0 polls once, < 0 never polls.
        warmup: replay assets.extra/tf_serving_warmup_requests before publishing.
        retry_seconds: how long a failed, unchanged version waits before another try.
        loader: injectable for tests; defaults to `load_servable`.
    """

    def __init__(self, configs: list[ModelConfig], poll_seconds: float = 1.0,
                 warmup: bool = True, retry_seconds: float = 30.0,
                 loader: Callable[..., Servable] | None = None):
        self._models: dict[str, _Model] = {c.name: _Model(c) for c in configs}
        self.poll_seconds = poll_seconds
        self.warmup = warmup
        self.retry_seconds = retry_seconds
        self._loader = loader or load_servable
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listeners: list[Callable[[str, int, str], None]] = []
        # --allow_version_labels_for_unavailable_models: a label that is new (or already
        # names that version) may point at a version not yet available (server_core.cc)
        self.allow_unavailable_labels = False

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Loads what is on disk now (blocking, as TF Serving does), then polls."""
        if self.poll_seconds >= 0:
            self.poll_once()
        if self.poll_seconds > 0:
            self._thread = threading.Thread(target=self._poll_loop, name="model-poll",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # noqa: BLE001 - polling must survive anything on disk
                log.exception("model poll failed")

    # -- polling ---------------------------------------------------------------------
    def poll_once(self) -> None:
        """One pass over every model: load what the policy wants, unload the rest."""
        with self._poll_lock:
            for model in list(self._models.values()):
                if self._stop.is_set():
                    return
                self._reconcile(model)

    def _notify(self, name: str, version: int, state: str) -> None:
        for cb in self.listeners:
            cb(name, version, state)

    def _failed_and_unchanged(self, model: _Model, v: int, path: str) -> bool:
        rec = model.records.get(v)
        if rec is None or rec.error is None or rec.state != END:
            return False
        if time.monotonic() - rec.failed_at >= self.retry_seconds:
            return False
        return fingerprint(path) == rec.fingerprint

    def _reconcile(self, model: _Model) -> None:
        cfg = model.config
        try:
            dirs = version_dirs(cfg.base_path)
        except StorageError as e:  # a store out of reach: keep serving what is loaded
            log.warning("Cannot poll base path %s of servable %s: %s", cfg.base_path, cfg.name, e)
            return
        model.dirs = dirs
        on_disk = sorted(dirs)
        if not on_disk and not model.serving:
            log.warning("No versions of servable %s found under base path %s",
                        cfg.name, cfg.base_path)
        tried: set[int] = set()
        while True:
            candidates = [
                v for v in on_disk
                if v in model.serving
                or (v not in tried and not self._failed_and_unchanged(
                    model, v, os.path.join(cfg.base_path, dirs[v])))
            ]
            desired = cfg.policy.select(candidates)
            todo = [v for v in desired if v not in model.serving]
            if not todo:
                break
            v = todo[-1]
            tried.add(v)
            if not self._load(model, v):
                continue  # now failed-and-unchanged: recompute without it
        keep = {v: s for v, s in model.serving.items() if v in desired}
        dropped = [v for v in model.serving if v not in keep]
        if dropped:
            model.publish(keep)
            for v in dropped:
                if bucket_models.is_remote(cfg.base_path):
                    bucket_models.release(cfg.base_path, v)
                model.records[v] = VersionStatus(v, END)
                log.info("Unloaded servable version {name: %s version: %d}", cfg.name, v)
                self._notify(cfg.name, v, END)

    def _load(self, model: _Model, v: int) -> bool:
        cfg = model.config
        path = os.path.join(cfg.base_path, model.dirs.get(v, str(v)))
        before = fingerprint(path)
        model.records[v] = VersionStatus(v, LOADING)
        self._notify(cfg.name, v, LOADING)
        try:
            local = bucket_models.local_copy(path) if bucket_models.is_remote(path) else path
            servable = self._loader(cfg.name, v, local, warmup=self.warmup)
            if fingerprint(path) != before:
                raise ServingError(Code.UNAVAILABLE,
                                   f"{path} changed while loading (copy in progress?)")
        except Exception as e:  # noqa: BLE001
            err = e if isinstance(e, ServingError) else ServingError(Code.UNKNOWN, str(e))
            # the files as they were when this attempt read them: a copy that completed
            # while it loaded is a change the next poll retries (the files as they are now
            # would make it look failed-and-unchanged until retry_seconds)
            model.records[v] = VersionStatus(v, END, err, before, time.monotonic())
            log.warning("Failed to load servable version {name: %s version: %d}: %s",
                        cfg.name, v, err.message)
            self._notify(cfg.name, v, "FAILED")
            return False
        serving = dict(model.serving)
        serving[v] = servable
        model.publish(serving)
        model.records[v] = VersionStatus(v, AVAILABLE)
        log.info("Successfully loaded servable version {name: %s version: %d}", cfg.name, v)
        self._notify(cfg.name, v, AVAILABLE)
        return True

    # -- config ----------------------------------------------------------------------
    def reload_config(self, configs: list[ModelConfig]) -> None:
        """Applies a new model list (HandleReloadConfigRequest); blocks until loaded.

        Raises FAILED_PRECONDITION when a label names a version that is not available.
        """
        with self._poll_lock:
            new = {}
            for c in configs:
                old = self._models.get(c.name)
                if old is not None and old.config.base_path == c.base_path:
                    old.config = c
                    new[c.name] = old
                else:
                    new[c.name] = _Model(c)
            removed = [m for n, m in self._models.items() if n not in new]
            self._models = new
            for m in removed:
                for v in list(m.serving):
                    m.records[v] = VersionStatus(v, END)
                    self._notify(m.config.name, v, END)
                m.publish({})
            for m in new.values():
                self._reconcile(m)
            for m in new.values():
                for label, v in m.config.labels:
                    new_label = m.labels.get(label, v) == v
                    if v not in m.serving and not (self.allow_unavailable_labels and new_label):
                        raise ServingError(
                            Code.FAILED_PRECONDITION,
                            f"Request to assign label {label!r} to version {v} of model "
                            f"{m.config.name}, which is not currently available for inference")
                m.labels = dict(m.config.labels)

    # -- lookups (hot path) ----------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        return sorted(self._models)

    def configs(self) -> list[ModelConfig]:
        return [m.config for m in self._models.values()]

    def resolve(self, name: str, version: int | None = None, label: str | None = None
                ) -> Servable:
        """The servable a request addresses, or NOT_FOUND / INVALID_ARGUMENT."""
        model = self._models.get(name)
        if model is None:
            raise not_found(f"Servable not found for request: Latest({name})")
        if label is not None:
            v = model.labels.get(label)
            if v is None:
                raise invalid(f"Unrecognized servable version label: {label}")
            version = v
        if version is None:
            s = model.latest
            if s is None:
                raise not_found(f"Servable not found for request: Latest({name})")
            return s
        s = model.serving.get(version)
        if s is None:
            raise not_found(f"Servable not found for request: Specific({name}, {version})")
        return s

    def status(self, name: str, version: int | None = None, label: str | None = None
               ) -> list[VersionStatus]:
        """Version states for GetModelStatus (all versions when none is named)."""
        model = self._models.get(name)
        if model is None:
            raise not_found(f"Could not find any versions of model {name}")
        if label is not None:
            if label not in model.labels:
                raise invalid(f"Unrecognized servable version label: {label}")
            version = model.labels[label]
        if version is not None:
            rec = model.records.get(version)
            if rec is None:
                raise not_found(f"Could not find version {version} of model {name}")
            return [rec]
        if not model.records:
            raise not_found(f"Could not find any versions of model {name}")
        return [model.records[v] for v in sorted(model.records, reverse=True)]

    def loaded_versions(self) -> dict[str, list[int]]:
        return {n: sorted(m.serving) for n, m in self._models.items()}

    def all_servables(self) -> list[Servable]:
        return [s for m in self._models.values() for s in m.serving.values()]
