"""A run directory on an object store (`--runs-dir s3://...`), worked on through a local mirror.

Stages stay simple: they read inputs from local directories and write outputs into local
directories, as on a local run. The runner keeps a node-local mirror of the run directory
(`<cache>/runs/<scheme>/<bucket>/<prefix>/<pipeline>/<run id>`, see baton.storage.node_cache)
and this module moves it to and from the store, with the guarantees rename gives a local disk:

- a stage's files go to `<run>/<stage>/data-<attempt>/...` (a fresh prefix per attempt, so no
  object a reader may hold is ever overwritten) and its lineage record, with the manifest of
  every file (path, size, sha256, key), is written last as `<run>/<stage>/lineage.json`: the
  commit. Readers (the runner, the cache, `baton inspect`, later runs' baselines) trust only
  commits; a writer killed at any point leaves objects no commit names, which nothing reads.
- Beam stages may write their shards straight to the attempt's prefix (`direct_output`), as
  Dataflow, Flink or Spark workers would; at commit they are listed, hashed from the bytes the
  store holds and named in the manifest like the rest.
- inputs are staged by manifest (`hydrate`): each output a stage reads is downloaded once into
  the content-addressed node cache and hard-linked into the mirror, so a rerun, a later stage
  or a later run on this node fetches nothing twice.
- a cache hit copies nothing: the new commit names the objects of the execution it reuses
  (`reuse`). Deleting a run's prefix therefore deletes outputs later runs may name; the cache
  notices (its records are checked against a listing) and such a run's stages rerun.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from baton import logs
from baton.errors import BatonError, UsageError
from baton.pipeline import lineage
from baton.storage import location as L
from baton.storage import manifest as M
from baton.storage import node_cache, objects, trees
from baton.storage.filesystems import check_bucket

_LOG = logs.get("pipeline.bucket_run")
DATA_PREFIX = "data-"
RUN_FILES = ("run.json", "spec.yaml")


def mirror_root(root: str) -> Path:
    """The node-local mirror of pipeline root URL `root` (node_cache.mirror_dir)."""
    return node_cache.mirror_dir(root)


class BucketRun:
    """One run of a pipeline whose runs directory is a bucket URL.

    Args:
        root: the pipeline's runs URL (`s3://bucket/runs/<pipeline>`).
        run_id: the run.
    """

    def __init__(self, root: str, run_id: str) -> None:
        self.root = root
        self.run_id = run_id
        self.url = L.join(root, run_id)
        self.local_root = mirror_root(root)
        self.run_dir = self.local_root / run_id
        self._attempts: dict[str, str] = {}
        self.cache = BucketCache(root)
        # commits uploading in the background, in order: stage -> (future, its record)
        self._pending: dict[str, tuple[Future[None], dict[str, Any]]] = {}
        self._pool: ThreadPoolExecutor | None = None

    # -- the run -------------------------------------------------------------------------
    def start(self) -> None:
        """Check the bucket (one line when it is missing or refuses the credentials) and start
        the mirror of this run afresh: it is a cache, and the store is the truth."""
        check_bucket(self.url, "--runs-dir")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)

    def save(self, name: str) -> None:
        """Upload a run-level file of the mirror (run.json, spec.yaml, a failed stage's record)."""
        objects.upload_file(self.run_dir / name, L.join(self.url, name))

    # -- stage commits --------------------------------------------------------------------
    def commit_url(self, stage: str) -> str:
        return L.join(self.url, stage, lineage.FILENAME)

    def read_commit(self, stage: str) -> dict[str, Any] | None:
        """The stage's commit (one still uploading from this process counts: its files are
        in this node's mirror, and the store gets them before the run ends)."""
        pending = self._pending.get(stage)
        if pending is not None and not (pending[0].done() and pending[0].exception()):
            return pending[1]
        rec = objects.read_json(self.commit_url(stage))
        return rec if isinstance(rec, dict) and rec.get("status") == "succeeded" else None

    def begin(self, stage: str) -> None:
        """Before a stage runs: its earlier commit in this run stops being visible (its objects
        stay: other runs may name them), and a fresh attempt prefix is chosen."""
        objects.delete(self.commit_url(stage))
        self._attempts[stage] = f"{DATA_PREFIX}{secrets.token_hex(4)}"

    def direct_output(self, stage: str, name: str) -> str:
        """The URL under which other processes (Beam workers) write output `name` of `stage`."""
        return L.join(self.url, stage, self._attempts[stage], name)

    def commit(self, stage: str, work: Path, record: dict[str, Any],
               final: Path | None = None) -> dict[str, Any]:
        """Publish a finished stage: objects written straight to the store are staged into
        `work`, every file is hashed, and the record with its manifest is returned (and
        written to `lineage.json`). With `final`, `work` is renamed there and the upload and
        the commit run in the background, in order, while later stages run (`flush` waits);
        without, they are done when this returns."""
        attempt = self._attempts[stage]
        prefix = L.join(self.url, stage, attempt)
        written = objects.list_tree(prefix)
        missing = [rel for rel in written if not (work / rel).exists()]

        def stage_in(rel: str) -> None:
            sha, _ = node_cache.fetch_unlisted(L.join(prefix, rel))
            node_cache.place(sha, work / rel)

        objects.each(stage_in, missing)
        files = M.of_directory(work, skip=[lineage.FILENAME])
        key = f"{self.run_id}/{stage}/{attempt}"
        record = {**record, "manifest": {rel: {**e, "key": f"{key}/{rel}"}
                                         for rel, e in files.items()}}
        for name, out in record.get("outputs", {}).items():
            out["url"] = L.join(prefix, name)
            out["hash"] = M.digest(M.below(files, name))  # store.hash_path of the directory
        payload = objects.dump_json(record)  # now: the caller may go on adding to its record
        objects.write_bytes(str(work / lineage.FILENAME), payload)
        source = work if final is None else final
        if final is not None:
            os.replace(work, final)

        def publish() -> None:  # the files, then the commit naming them
            trees.upload(source, prefix, files, present=written)
            objects.write_bytes(self.commit_url(stage), payload)

        if final is None:
            publish()
        else:
            self._submit(stage, publish, payload)
        return record

    def _submit(self, stage: str, fn: Any, payload: bytes) -> None:
        if self._pool is None:  # one thread: commits land in the order the stages finished
            self._pool = ThreadPoolExecutor(1, f"baton-commit-{self.run_id}")
        # the record as a reader will parse it from the commit object
        self._pending[stage] = (self._pool.submit(fn), json.loads(payload))

    def then(self, stage: str, fn: Any) -> None:
        """Run `fn` once `stage` is committed (not at all if its commit fails): the cache index
        names only committed outputs."""
        pending = self._pending.get(stage)
        if pending is None:
            fn()
            return
        future = pending[0]

        def after() -> None:
            if future.exception() is None:
                try:
                    fn()
                except BatonError as exc:  # e.g. the cache index: a later run just misses it
                    _LOG.warning("after committing %s: %s", stage, exc)

        assert self._pool is not None
        self._pool.submit(after)

    def flush(self, wait: bool = True) -> dict[str, str]:
        """Wait for the background commits (`wait=False`: drop those not started, as when a
        run is interrupted); returns stage -> error for those that failed."""
        if self._pool is not None and not wait:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            return {}
        if self._pool is not None:  # every queued task done (commits, then cache records)
            self._pool.shutdown(wait=True)
            self._pool = None
        failed = {}
        for stage, (future, _) in list(self._pending.items()):
            error = future.exception()
            if error is not None:
                failed[stage] = str(error) if isinstance(error, BatonError) else \
                    f"{type(error).__name__}: {error}"
        self._pending.clear()
        return failed

    def abort(self, stage: str) -> None:
        """A failed or interrupted attempt: remove what it wrote to the store (never committed,
        never read). Best effort: when the store is what failed, the leftovers stay unread."""
        attempt = self._attempts.pop(stage, None)
        if attempt is not None:
            try:
                objects.delete_tree(L.join(self.url, stage, attempt))
            except BatonError as exc:
                _LOG.warning("cannot remove the failed attempt's objects: %s", exc)

    def save_failure(self, stage: str) -> None:
        """A failed stage's record and traceback beside the run on the store, best effort."""
        for name in (f"{stage}.failed.json", f"{stage}.traceback.txt"):
            if (self.run_dir / name).is_file():
                try:
                    self.save(name)
                except BatonError as exc:
                    _LOG.warning("cannot save %s to %s: %s", name, self.url, exc)

    def cached_outputs(self, hit: dict[str, Any]) -> dict[str, Any]:
        """A cache record with its outputs staged on this node and their paths local (for a
        stage's `cache_valid` hook, which reads them)."""
        source = BucketRun(self.root, str(hit.get("run_id")))
        source.hydrate(str(hit.get("stage")))
        return {**hit, "outputs": {k: {**v, "path": str(source.run_dir / str(hit["stage"]) / k)}
                                   for k, v in hit["outputs"].items()}}

    def reuse(self, stage: str, hit: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
        """Commit a cache hit: the new record names the objects of the execution it reuses;
        no byte is copied or downloaded (inputs are staged only when a stage reads them)."""
        outputs = {k: {**v, "path": str(self.run_dir / stage / k)}
                   for k, v in hit["outputs"].items()}
        record = {**record, "outputs": outputs, "manifest": hit.get("manifest", {})}
        objects.delete(self.commit_url(stage))
        payload = objects.dump_json(record)
        self._submit(stage, lambda: objects.write_bytes(self.commit_url(stage), payload), payload)
        return record

    # -- staging inputs --------------------------------------------------------------------
    def hydrate(self, stage: str, outputs: Iterable[str] | None = None) -> dict[str, Any] | None:
        """The committed record of `stage` (None: not committed), with the files of
        `outputs` (default: all) staged in the mirror at `run_dir/<stage>/<output>`."""
        rec = self.read_commit(stage)
        if rec is None:
            return None
        local = self.run_dir / stage
        if lineage.read(local) != rec:
            shutil.rmtree(local, ignore_errors=True)
            local.mkdir(parents=True)
            objects.write_json(str(local / lineage.FILENAME), rec)
        for name in (rec.get("outputs", {}) if outputs is None else outputs):
            self._stage_output(local, rec, name)
        return rec

    def _stage_output(self, local: Path, rec: dict[str, Any], name: str) -> None:
        target = local / name
        if target.is_dir() or name not in rec.get("outputs", {}):
            return
        files = M.below(rec.get("manifest", {}), name)
        tmp = local / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        trees.download(files, tmp, lambda _rel, e: L.join(self.root, e["key"]))
        os.replace(tmp, target)

    def fetch(self, path: Path) -> Path:
        """`path` (an artifact path in a record: the mirror of some run of this pipeline),
        staged on this node if it is not there yet; other paths as they are."""
        if path.exists():
            return path
        try:
            parts = path.relative_to(self.local_root).parts
        except ValueError:
            return path
        if len(parts) >= 3:
            BucketRun(self.root, parts[0]).hydrate(parts[1], [parts[2]])
        return path

    def fetch_file(self, stage: str, rel: str) -> Path | None:
        """One committed file of `stage` (path relative to the stage directory), staged in
        the mirror; None when the commit does not list it."""
        rec = self.read_commit(stage) or {}
        entry = rec.get("manifest", {}).get(rel)
        if entry is None:
            return None
        target = self.run_dir / stage / rel
        if not target.exists():
            node_cache.fetch(L.join(self.root, entry["key"]), entry["sha256"], entry["size"])
            node_cache.place(entry["sha256"], target)
        return target

    def stage_record_files(self) -> None:
        """run.json, every committed stage's record and every failed stage's record, staged in
        the mirror (what `baton inspect` reads; outputs stay on the store)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name in ("run.json", "spec.yaml"):
            data = objects.read_json(L.join(self.url, name)) if name.endswith(".json") else None
            if data is not None:
                objects.write_json(str(self.run_dir / name), data)
        run = objects.read_json(L.join(self.url, "run.json")) or {}
        for s in run.get("stages", []):
            if s.get("status") == "failed":
                rec = objects.read_json(L.join(self.url, f"{s['name']}.failed.json"))
                if rec is not None:
                    objects.write_json(str(self.run_dir / f"{s['name']}.failed.json"), rec)
            else:
                self.hydrate(s["name"], outputs=[])

    # -- earlier runs ------------------------------------------------------------------------
    def records(self, stage_type: str | None = None,
                exclude_run: str | None = None) -> Iterator[dict[str, Any]]:
        """Committed stage records of this pipeline's runs, newest run first (lineage's
        `iter_records` for a bucket): each run's run.json names its stages and their types,
        so only the commits asked for are read."""
        runs = sorted((name for name, is_dir in objects.list_children(self.root).items()
                       if is_dir and not name.startswith(".") and name != exclude_run),
                      reverse=True)
        for run_id in runs:
            run = objects.read_json(L.join(self.root, run_id, "run.json")) or {}
            if run.get("status") in ("succeeded", "failed"):  # its stages, with their types
                stages = [s["name"] for s in run.get("stages", [])
                          if s.get("status") in ("succeeded", "cached")
                          and (stage_type is None or s.get("type") == stage_type)]
            else:  # running, or stopped before it could say: every stage committed
                stages = [n for n, d in objects.list_children(L.join(self.root, run_id)).items()
                          if d]
            other = BucketRun(self.root, run_id)
            for stage, rec in zip(stages, objects.each(other.read_commit, stages), strict=True):
                if rec is not None and (stage_type is None or rec.get("type") == stage_type):
                    rec.setdefault("run_id", run_id)
                    rec["stage_dir"] = str(other.run_dir / stage)
                    yield rec


def open_run(url: str) -> BucketRun:
    """The run at `url`: a run's URL, or a pipeline's (its newest run); UsageError if none."""
    if objects.exists(L.join(url, "run.json")):
        return BucketRun(L.parent(url), L.basename(url))
    runs = sorted(n for n, d in objects.list_children(url).items()
                  if d and not n.startswith(".") and objects.exists(L.join(url, n, "run.json")))
    if not runs:
        raise UsageError(f"RUN_DIR: {url} is not a run directory (no run.json). "
                         "Expected <runs dir>/<pipeline>/<run id>")
    return BucketRun(url, runs[-1])


class BucketCache:
    """The execution cache's index on the store: `<root>/.cache/<key>.json` (cache.Cache's
    records, with their manifests). A record is reused only while every object it names is
    still there with its size (one listing per output prefix)."""

    def __init__(self, root: str) -> None:
        self.dir = L.join(root, ".cache")
        self.root = root

    def lookup(self, key: str) -> dict[str, Any] | None:
        rec = objects.read_json(L.join(self.dir, f"{key}.json"))
        if not isinstance(rec, dict):
            return None
        prefixes: dict[str, dict[str, int]] = {}
        for entry in rec.get("manifest", {}).values():
            run_id, stage, attempt, rel = entry["key"].split("/", 3)  # see BucketRun.commit
            where = f"{run_id}/{stage}/{attempt}"
            if where not in prefixes:
                prefixes[where] = objects.list_tree(L.join(self.root, where))
            if prefixes[where].get(rel) != entry["size"]:
                return None
        return rec

    def store(self, key: str, record: dict[str, Any]) -> None:
        objects.write_json(L.join(self.dir, f"{key}.json"), record)
